"""The SPANK plugin and gpuperf-run in a real Slurm: built from source, loaded from plugstack.conf.

This machine has 2 CPUs and one NUMA node, so the fixture CPU ids (0-127 on ``pcie-l40s-2s``) do
not exist here. The tests plan from a topology derived from that fixture (its 4 GPUs, GPUs 0-1 on
NUMA 0 and 2-3 on NUMA 1) whose NUMA node 0 is CPU 0 and NUMA node 1 is CPU 1, so every planned
set is real here and a rank pinned to the wrong node would show. Memory binding to NUMA 1 fails
here (no such node), which also exercises the plugin's "CPUs pinned, memory not" path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from gpuperf.affinity import plan as aff
from gpuperf.affinity import report as affinity_report
from gpuperf.prolog import affinityplan
from gpuperf.topology import load_node

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "data" / "nodes" / "pcie-l40s-2s"
# what each task reports about itself, from inside the task
REPORT_SH = ("#!/bin/sh\necho \"rank=$SLURM_LOCALID step=$SLURM_STEP_ID "
             "cpus=$(awk '/^Cpus_allowed_list/{print $2}' /proc/self/status) "
             "mem=$(head -1 /proc/self/numa_maps | cut -d' ' -f2) omp=$OMP_NUM_THREADS places=$OMP_PLACES gpuperf=$GPUPERF\"\n")


def _topology_here(tmp: Path) -> tuple[Path, dict]:
    t = load_node(str(FIXTURE), health=False).topology
    t["numa_nodes"] = [{"id": 0, "cpus": [0]}, {"id": 1, "cpus": [1]}]
    t["cpus"] = {"online": [0, 1], "siblings": {"0": [0], "1": [1]}}
    path = tmp / "affinity-topology.json"
    path.write_text(json.dumps(t))
    return path, t


@pytest.fixture(scope="module")
def spank_cluster(slurm_cluster):
    """The test cluster with gpuperf_spank.so (built here from source) in its plugstack.conf."""
    c = slurm_cluster
    lib = c.dir / "lib"
    build = subprocess.run(["bash", str(REPO / "packaging" / "build-spank.sh"), "--out", str(lib)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    topo_path, _ = _topology_here(c.dir)
    plugstack = c.dir / "plugstack.conf"
    saved = plugstack.read_text()
    plugstack.write_text(saved + f"required {lib / 'gpuperf_spank.so'} run_dir={c.run_dir}\n")
    _report(c).write_text(REPORT_SH)
    _report(c).chmod(0o755)
    conf = c.gpuperf_config()
    conf["affinity"] = {"topology_file": str(topo_path), "mem_policy": "bind"}
    # these tests read no reports: keep the slurmctld epilog from holding the GPUs for long
    conf.setdefault("controller", {}).update({"merge_wait_s": 1.0})
    c.write_gpuperf_config(conf)
    try:
        yield c
    finally:
        plugstack.write_text(saved)
        c.reset_gpuperf_config()


def _report(c) -> Path:
    return c.layout.out_dir / "affinity-report.sh"


def _lines(out: str) -> dict[tuple[str, int], dict[str, str]]:
    """Task report lines by (step, rank)."""
    got = {}
    for line in out.splitlines():
        if line.startswith("rank="):
            kv = dict(tok.partition("=")[::2] for tok in line.split())
            got[(kv["step"], int(kv["rank"]))] = kv
    return got


def _applied(c, job: int) -> dict[tuple[str, int], dict[str, str]]:
    return {(r["step"], int(r["rank"])): r for r in affinity_report.applied_records(str(c.run_dir), job)}


def _plugin_log_lines(c, job: int, text: str) -> list[str]:
    log = (c.layout.log_dir / f"slurmd-{c.node_names[0]}.log").read_text(errors="replace")
    return [l for l in log.splitlines() if f"gpuperf: job {job} " in l and text in l]


def test_option_is_registered_for_sbatch_and_srun_and_rejects_bad_values(spank_cluster):
    for tool in ("sbatch", "srun"):
        assert "--gpuperf=off|on" in spank_cluster.run(tool, "--help").stdout
    bad = spank_cluster.run("sbatch", "--gpuperf=maybe", "--wrap=true")
    assert bad.returncode != 0 and "expected off or on" in bad.stderr


def test_every_rank_of_a_4_task_srun_ends_on_its_planned_cpus(spank_cluster):
    c = spank_cluster
    script = f"srun -n4 {_report(c)}\nsrun -n4 --gpuperf=off {_report(c)}\n"
    job = c.sbatch(script, "-n4", "--gres=gpu:4", user=c.user)
    assert c.wait(job) == "COMPLETED", c.job_output(job)
    out = _lines(c.job_output(job))
    plan = aff.parse_plan_text(affinityplan.plan_path(str(c.run_dir), job).read_text())
    topo = json.loads((c.dir / "affinity-topology.json").read_text())
    gpu_numa = {g["index"]: g["numa_node"] for g in topo["gpus"]}
    numa_cpu = {n["id"]: n["cpus"] for n in topo["numa_nodes"]}
    applied = _applied(c, job)
    for rank in range(4):
        planned = plan.ranks[(4, rank)]
        task = out[("0", rank)]
        # the plan puts rank r next to GPU r, and the task ends exactly there
        assert planned.gpus == (rank,) and list(planned.cpus) == numa_cpu[gpu_numa[rank]]
        assert aff.parse_cpu_list(task["cpus"]) == list(planned.cpus), task
        # the rank's OpenMP places, not the batch step's that srun copied into the step's environment
        assert task["places"] == planned.omp_places, task
        assert applied[("0", rank)]["status"] == "ok" and applied[("0", rank)]["cpus"] == task["cpus"]
        if gpu_numa[rank] == 0:  # NUMA 1 has no memory here: its bind fails and is recorded as such
            assert task["mem"] == "bind:0" and applied[("0", rank)]["mem"] == "ok"
        else:
            assert task["mem"] == "default" and applied[("0", rank)]["mem"] == "failed:EINVAL"
        # --gpuperf=off on srun: nothing applied, no memory policy, and the TaskProlog saw GPUPERF=off
        off = out[("1", rank)]
        assert applied[("1", rank)]["status"] == "off" and off["mem"] == "default" and off["gpuperf"] == "off"
    assert len({out[("0", r)]["cpus"] for r in range(4)}) == 2  # the two NUMA nodes, not one CPU for all
    # the prolog cannot see the job's cpuset yet (22.05 creates it after the Prolog): Slurm's CPU ids
    assert c.job_record(job, "prolog")["data"]["affinity"]["cpus_source"] == "scontrol"
    assert applied[("0", 0)]["pid"] != applied[("0", 1)]["pid"]
    assert (c.run_dir / "jobs" / str(job) / "applied").stat().st_uid != 0  # the job user's directory


def test_sbatch_gpuperf_off_reaches_prolog_taskprolog_and_every_step(spank_cluster):
    c = spank_cluster
    job = c.sbatch(f"echo batch gpuperf=$GPUPERF\nsrun -n2 {_report(c)}\n", "-n2", "--gres=gpu:2",
                   "--gpuperf=off")
    assert c.wait(job) == "COMPLETED", c.job_output(job)
    output = c.job_output(job)
    assert "batch gpuperf=off" in output
    plan = aff.parse_plan_text(affinityplan.plan_path(str(c.run_dir), job).read_text())
    assert plan.noop and "--gpuperf=off" in plan.noop and not plan.ranks
    applied = _applied(c, job)
    assert {r["status"] for r in applied.values()} == {"off"} and ("0", 1) in applied
    assert all(t["mem"] == "default" for t in _lines(output).values())
    contexts = [r["context"] for k, r in c.job_records(job).items() if k.startswith("taskprolog.")]
    assert contexts and all(t["env_gpuperf"] == "off" for t in contexts)


def test_missing_or_corrupt_plan_leaves_tasks_running_unpinned_with_one_log_line_each(spank_cluster):
    c = spank_cluster
    plan = f"{c.run_dir}/jobs/$SLURM_JOB_ID/affinity.plan"
    script = (f"rm -f {plan}\nsrun -n2 {_report(c)}\n"
              f"echo 'not a plan' > {plan}\nsrun -n2 {_report(c)}\n"
              f"printf '# gpuperf affinity plan v1\\ntasks=2 rank=0 cpus=0-x\\ntasks=2 rank=1\\n' > {plan}\n"
              f"srun -n2 {_report(c)}\necho done\n")
    job = c.sbatch(script, "-n2", "--gres=gpu:4")
    assert c.wait(job) == "COMPLETED", c.job_output(job)
    output = c.job_output(job)
    assert output.rstrip().endswith("done")
    tasks = _lines(output)
    applied = _applied(c, job)
    for rank in range(2):
        assert applied[("0", rank)]["status"] == "noplan"
        assert applied[("1", rank)]["status"] == "corrupt"
        assert applied[("2", rank)]["status"] in ("unpinned", "corrupt")
        for step in ("0", "1", "2"):
            # nothing applied, and the batch step's OpenMP places are not left behind for an unpinned task
            assert tasks[(step, rank)]["mem"] == "default" and tasks[(step, rank)]["places"] == ""
    assert len(_plugin_log_lines(c, job, "no affinity plan")) == 2
    assert len(_plugin_log_lines(c, job, "corrupt affinity plan")) == 4
    assert all(re.search(r"task \d: ", l) for l in _plugin_log_lines(c, job, "not pinned"))


def test_gpuperf_run_applies_the_same_plan_without_the_plugin(spank_cluster):
    c = spank_cluster
    plugstack = c.dir / "plugstack.conf"
    with_plugin = plugstack.read_text()
    plugstack.write_text("# gpuperf_spank.so left out: gpuperf-run does the pinning\n")
    try:
        job = c.sbatch(f"srun -n4 {os.environ.get('GPUPERF_PREFIX', '/opt/gpuperf')}/venv/bin/gpuperf-run {_report(c)}\n", "-n4",
                       "--gres=gpu:4", f"--export=ALL,GPUPERF_CONFIG={c.gpuperf_config_path}")
        assert c.wait(job) == "COMPLETED", c.job_output(job)
    finally:
        plugstack.write_text(with_plugin)
    plan = aff.parse_plan_text(affinityplan.plan_path(str(c.run_dir), job).read_text())
    out = _lines(c.job_output(job))
    for rank in range(4):
        assert aff.parse_cpu_list(out[("0", rank)]["cpus"]) == list(plan.ranks[(4, rank)].cpus)
    assert {r["status"] for r in _applied(c, job).values()} == {"ok"}
