"""Affinity plans on the node fixtures (tests/data/nodes) and the plan file both ends read."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuperf.affinity import plan as aff
from gpuperf.affinity import report as affinity_report
from gpuperf.files import config
from gpuperf.hookbase.hook import HookState
from gpuperf.hookbase.jobctx import JobContext
from gpuperf.prolog import affinityplan
from gpuperf.wrappers import run as gprun
from gpuperf.topology import load_node

NODES = Path(__file__).resolve().parents[1] / "data" / "nodes"


def topo(name: str) -> dict:
    """A fixture node's topology (gpuperf.topology.v1)."""
    return load_node(str(NODES / name), health=False).topology


def numa_cpus(t: dict, node: int) -> set[int]:
    return {c for n in t["numa_nodes"] if n["id"] == node for c in n["cpus"]}


def all_cpus(t: dict) -> tuple[int, ...]:
    return tuple(sorted(c for n in t["numa_nodes"] for c in n["cpus"]))


def without_smt(t: dict) -> dict:
    """The same node with SMT switched off in the BIOS: only the first thread of each core is online."""
    t = copy.deepcopy(t)
    sib = t["cpus"]["siblings"]
    first = {min(v) for v in sib.values()}
    for n in t["numa_nodes"]:
        n["cpus"] = [c for c in n["cpus"] if c in first]
    t["cpus"] = {"online": sorted(first), "siblings": {str(c): [c] for c in first}}
    return t


@pytest.fixture(scope="module")
def hgx() -> dict:
    return topo("hgx-h100-2s")


def test_fixture_is_what_the_plans_assume(hgx):
    # GPUs 0-3 on NUMA 0, 4-7 on NUMA 1, SMT on: every plan below depends on it
    assert [g["numa_node"] for g in sorted(hgx["gpus"], key=lambda g: g["index"])] == [0] * 4 + [1] * 4
    assert all(len(v) == 2 for v in hgx["cpus"]["siblings"].values())


def test_8_ranks_1_gpu_each_get_disjoint_whole_cores_of_their_gpus_numa_node(hgx):
    alloc = aff.Allocation(gpus=tuple(range(8)), cpus=all_cpus(hgx))
    p = aff.plan(hgx, alloc, 8)
    assert p.noop is None and not p.warnings
    seen: set[int] = set()
    for r in p.ranks:
        assert r.gpus == (r.rank,)
        node = 0 if r.rank < 4 else 1
        assert r.numa_nodes == (node,) and r.mems == (node,) and r.mem_policy == "bind"
        assert set(r.cpus) <= numa_cpus(hgx, node)
        assert not seen & set(r.cpus)
        seen |= set(r.cpus)
        # whole cores: every CPU's SMT sibling is in the same rank's set
        assert all(set(hgx["cpus"]["siblings"][str(c)]) <= set(r.cpus) for c in r.cpus)
        assert r.omp_num_threads == len(r.cpus) // 2
    # the 4 ranks of one socket share its CPUs evenly and use all of them
    assert seen == set(all_cpus(hgx))
    assert len({len(r.cpus) for r in p.ranks}) == 1


def test_2_ranks_4_gpus_each_get_their_whole_socket(hgx):
    p = aff.plan(hgx, aff.Allocation(gpus=tuple(range(8)), cpus=all_cpus(hgx)), 2)
    assert [r.gpus for r in p.ranks] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [set(r.cpus) for r in p.ranks] == [numa_cpus(hgx, 0), numa_cpus(hgx, 1)]
    assert [r.mems for r in p.ranks] == [(0,), (1,)]


def test_1_rank_8_gpus_spans_both_nodes(hgx):
    (r,) = aff.plan(hgx, aff.Allocation(gpus=tuple(range(8)), cpus=all_cpus(hgx)), 1).ranks
    assert r.gpus == tuple(range(8)) and r.numa_nodes == (0, 1) and r.mems == (0, 1)
    assert set(r.cpus) == set(all_cpus(hgx))


def test_job_cpus_only_on_socket_0_with_gpus_4_7_warns_and_pins_nothing(hgx):
    socket0 = tuple(sorted(numa_cpus(hgx, 0)))[:16]
    p = aff.plan(hgx, aff.Allocation(gpus=(4, 5, 6, 7), cpus=socket0), 4)
    assert len(p.warnings) == 1 and "NUMA 1" in p.warnings[0] and "not pinned" in p.warnings[0]
    assert all(r.cpus == () and r.mem_policy == "none" and r.mems == () for r in p.ranks)
    # the plugin's line for such a rank says so: nothing to apply
    line = aff.rank_line(4, p.ranks[0])
    assert "cpus=none" in line and "policy=none" in line


def test_job_cpus_are_intersected_and_split_among_ranks_of_one_node(hgx):
    n0 = sorted(numa_cpus(hgx, 0))
    job = tuple(n0[:8] + [c + 112 for c in n0[:8] if c < 112])  # 8 cores with both threads
    p = aff.plan(hgx, aff.Allocation(gpus=(0, 1), cpus=job), 2)
    assert set(p.ranks[0].cpus) | set(p.ranks[1].cpus) == set(job) & numa_cpus(hgx, 0)
    assert not set(p.ranks[0].cpus) & set(p.ranks[1].cpus)
    assert [r.omp_num_threads for r in p.ranks] == [4, 4]


def test_hyperthreads_off_in_config_uses_one_thread_per_core(hgx):
    p = aff.plan(hgx, aff.Allocation(gpus=tuple(range(8)), cpus=all_cpus(hgx)), 8, hyperthreads=False)
    for r in p.ranks:
        assert all(c == min(hgx["cpus"]["siblings"][str(c)]) for c in r.cpus)
        assert r.omp_num_threads == len(r.cpus) == 14
        assert r.omp_places == "{" + str(r.cpus[0]) + "}:14"


def test_smt_off_node_plans_single_thread_places(hgx):
    t = without_smt(hgx)
    p = aff.plan(t, aff.Allocation(gpus=tuple(range(8)), cpus=all_cpus(t)), 8)
    assert all(len(r.cpus) == 14 and r.omp_num_threads == 14 for r in p.ranks)
    assert set().union(*(set(r.cpus) for r in p.ranks)) == set(all_cpus(t))


def test_smt_on_places_are_cores(hgx):
    r = aff.plan(hgx, aff.Allocation(gpus=tuple(range(8)), cpus=all_cpus(hgx)), 8).ranks[0]
    first = r.cpus[0]
    sib = max(hgx["cpus"]["siblings"][str(first)])
    assert r.omp_places == f"{{{first},{sib}}}:{r.omp_num_threads}"


def test_more_ranks_than_gpus_share_gpus_evenly(hgx):
    p = aff.plan(hgx, aff.Allocation(gpus=(0, 1), cpus=all_cpus(hgx)), 4)
    assert [r.gpus for r in p.ranks] == [(0,), (0,), (1,), (1,)]
    assert len({frozenset(r.cpus) for r in p.ranks}) == 4


def test_fewer_cpus_than_ranks_share_cpus_rather_than_go_unpinned(hgx):
    p = aff.plan(hgx, aff.Allocation(gpus=(0, 1, 2, 3), cpus=(0,)), 4)
    assert [r.cpus for r in p.ranks] == [(0,)] * 4


def test_mem_policy_prefer_and_none(hgx):
    alloc = aff.Allocation(gpus=tuple(range(8)), cpus=all_cpus(hgx))
    pref = aff.plan(hgx, alloc, 2, mem_policy="prefer")
    assert [(r.mem_policy, r.mems) for r in pref.ranks] == [("prefer", (0,)), ("prefer", (1,))]
    # preferring one of two nodes would favour one GPU's side: the spanning rank keeps the default
    (one,) = aff.plan(hgx, alloc, 1, mem_policy="prefer").ranks
    assert (one.mem_policy, one.mems) == ("none", ())
    none = aff.plan(hgx, alloc, 2, mem_policy="none")
    assert all(r.mem_policy == "none" and r.cpus for r in none.ranks)
    with pytest.raises(ValueError, match="mem_policy"):
        aff.plan(hgx, alloc, 2, mem_policy="interleave")


def test_pcie_l40s_2s():
    t = topo("pcie-l40s-2s")
    by_numa = {g["index"]: g["numa_node"] for g in t["gpus"]}
    p = aff.plan(t, aff.Allocation(gpus=tuple(sorted(by_numa)), cpus=all_cpus(t)), len(by_numa))
    assert p.noop is None
    for r in p.ranks:
        (g,) = r.gpus
        assert r.numa_nodes == (by_numa[g],) and set(r.cpus) <= numa_cpus(t, by_numa[g]) and r.cpus


@pytest.mark.parametrize("vm", ["h100-vm", "h200x4-vm"])
def test_vms_with_one_numa_node_are_a_noop_and_say_so(vm):
    if not (NODES / vm).is_dir():
        pytest.skip(f"fixture {vm} not recorded yet")
    t = topo(vm)
    gpus = tuple(g["index"] for g in t["gpus"])
    p = aff.plan(t, aff.Allocation(gpus=gpus, cpus=all_cpus(t)), max(1, len(gpus)))
    assert p.noop and not p.ranks
    text = aff.plan_text(7, aff.Allocation(gpus=gpus, cpus=all_cpus(t)), [p])
    assert aff.parse_plan_text(text).noop == p.noop


def test_one_numa_node_synthetic_is_a_noop(hgx):
    t = copy.deepcopy(hgx)
    t["numa_nodes"] = [{"id": 0, "cpus": all_cpus(hgx)}]
    p = aff.plan(t, aff.Allocation(gpus=(0, 1), cpus=all_cpus(hgx)), 2)
    assert p.noop and "NUMA" in p.noop and p.ranks == []


def test_unknown_gpu_numa_is_a_noop(hgx):
    t = copy.deepcopy(hgx)
    for g in t["gpus"]:
        g["numa_node"] = None
    assert aff.plan(t, aff.Allocation(gpus=(0,), cpus=all_cpus(t)), 1).noop


def test_plan_file_round_trip(hgx):
    alloc = aff.Allocation(gpus=tuple(range(8)), cpus=all_cpus(hgx), cpus_source="cgroup")
    plans = [aff.plan(hgx, alloc, t) for t in aff.plan_counts(alloc, known=[16])]
    parsed = aff.parse_plan_text(aff.plan_text(42, alloc, plans))
    assert parsed.job_id == 42 and parsed.noop is None
    assert len(parsed.ranks) == sum(p.tasks for p in plans)
    for p in plans:
        for r in p.ranks:
            assert parsed.ranks[(p.tasks, r.rank)] == r


def test_plan_counts_cover_one_to_gpus_and_known_shapes():
    alloc = aff.Allocation(gpus=tuple(range(8)), cpus=tuple(range(64)))
    assert aff.plan_counts(alloc, known=[32]) == list(range(1, 9)) + [32]
    assert aff.plan_counts(aff.Allocation(gpus=tuple(range(16)), cpus=(0, 1)), known=[]) == list(range(1, 17))


def test_slurm_abstract_cpu_ids_map_to_os_ids_core_by_core(hgx):
    # Slurm numbers CPUs socket, core, thread; the kernel numbers first threads, then siblings
    assert aff.slurm_ids_to_os(range(0, 4), hgx, 2, 56, 2) == sorted([0, 1] + [
        max(hgx["cpus"]["siblings"]["0"]), max(hgx["cpus"]["siblings"]["1"])])
    second_socket_first_core = min(sorted(numa_cpus(hgx, 1)))
    assert aff.slurm_ids_to_os([112], hgx, 2, 56, 2) == [second_socket_first_core]
    # Slurm configured without threads: ids are cores, only their first threads are the job's for sure
    assert aff.slurm_ids_to_os(range(0, 3), hgx, 2, 56, 1) == [0, 1, 2]
    # ids beyond the node are dropped; a layout that does not fit the NUMA nodes cannot be mapped
    assert aff.slurm_ids_to_os([10_000], hgx, 2, 56, 2) == []
    assert aff.slurm_ids_to_os([0], hgx, 3, 56, 2) is None


@pytest.mark.parametrize("text,err", [
    ("", "not a gpuperf affinity plan"),
    ("garbage\n", "not a gpuperf affinity plan"),
    (aff.PLAN_HEADER + "\ntasks=1 rank=0 gpus=0\n", "line 2"),
    (aff.PLAN_HEADER + "\ntasks=1 rank=0 gpus=0 numa=0 cpus=3-1 mems=0 policy=bind omp_threads=1 omp_places={0}\n", "descending"),
    (aff.PLAN_HEADER + "\nwhat=1\n", "unknown record"),
])
def test_corrupt_plan_files_are_errors_naming_the_line(text, err):
    with pytest.raises(ValueError, match=err):
        aff.parse_plan_text(text)


def test_cpu_list_formats():
    assert aff.format_cpu_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert aff.parse_cpu_list("0-2,5,7-8") == [0, 1, 2, 5, 7, 8]
    assert aff.parse_cpu_list(aff.format_cpu_list(range(0, 224, 3))) == list(range(0, 224, 3))
    with pytest.raises(ValueError):
        aff.parse_cpu_list("0-a")
    assert aff.format_omp_places([(0, 112), (1, 113), (5, 117)]) == "{0,112}:2,{5,117}"


def test_applied_record_round_trip():
    rec = {"job": 3, "step": "0", "rank": 1, "tasks": 2, "pid": 9, "status": "ok", "gpus": "1", "numa": "0",
           "cpus": "14-27", "policy": "bind", "mem": "ok", "us": 80.5}
    assert aff.parse_applied_line(aff.applied_line(rec)) == {k: str(v) for k, v in rec.items()}
    with pytest.raises(ValueError):
        aff.parse_applied_line("hello")


# --- the prolog step ---------------------------------------------------------------------------

def _cfg(tmp_path: Path, t: dict, **affinity) -> config.Config:
    (tmp_path / "topo.json").write_text(json.dumps(t))
    (tmp_path / "nobin").mkdir(exist_ok=True)
    text = (f'[general]\nrun_dir = "{tmp_path / "run"}"\nslurm_bin_dir = "{tmp_path / "nobin"}"\n'
            f'[affinity]\ntopology_file = "{tmp_path / "topo.json"}"\ncgroup_root = "{tmp_path / "cg"}"\n')
    text += "".join(f"{k} = {json.dumps(v)}\n" for k, v in affinity.items())
    return config.parse(text)


def _ctx(job_id: int = 77, gpus=(4, 5, 6, 7), uid: int | None = None) -> JobContext:
    return JobContext(hook="prolog", job_id=job_id, uid=uid if uid is not None else os.getuid(), user="u",
                      gpus=list(gpus), node="n1")


def test_prolog_step_reads_the_jobs_cpuset_and_writes_the_plan(tmp_path, hgx):
    cg = tmp_path / "cg" / "cpuset" / "slurm" / f"uid_{os.getuid()}" / "job_77"
    cg.mkdir(parents=True)
    n1 = sorted(numa_cpus(hgx, 1))
    (cg / "cpuset.cpus").write_text(aff.format_cpu_list(n1[:8]) + "\n")
    state = HookState()
    affinityplan.step(_ctx(), _cfg(tmp_path, hgx), state)
    rec = state.data["affinity"]
    assert rec["cpus_source"] == "cgroup" and rec["job_cpus"] == aff.format_cpu_list(n1[:8])
    parsed = aff.parse_plan_text(Path(rec["plan_file"]).read_text())
    r0 = parsed.ranks[(4, 0)]
    assert r0.gpus == (4,) and set(r0.cpus) <= set(n1[:8]) and r0.mems == (1,)
    applied = tmp_path / "run" / "jobs" / "77" / "applied"
    assert applied.is_dir() and applied.stat().st_uid == os.getuid()


def test_prolog_step_without_cgroup_or_scontrol_uses_all_cpus_and_warns_when_wrong_socket(tmp_path, hgx):
    state = HookState()
    affinityplan.step(_ctx(), _cfg(tmp_path, hgx), state)
    assert state.data["affinity"]["cpus_source"] == "all" and not state.data["affinity"]["warnings"]

    cg = tmp_path / "cg" / "cpuset" / "slurm" / f"uid_{os.getuid()}" / "job_78"
    cg.mkdir(parents=True)
    (cg / "cpuset.cpus").write_text(aff.format_cpu_list(sorted(numa_cpus(hgx, 0))[:4]))
    state = HookState()
    affinityplan.step(_ctx(78), _cfg(tmp_path, hgx), state)
    assert state.data["affinity"]["warnings"]
    assert affinityplan.plan_warnings(str(tmp_path / "run"), 78) == state.data["affinity"]["warnings"]


def test_prolog_step_disabled_or_opted_out_writes_a_noop_plan(tmp_path, hgx):
    state = HookState()
    affinityplan.step(_ctx(79), _cfg(tmp_path, hgx, enabled=False), state)
    assert "disabled" in state.data["affinity"]["noop"]
    ctx = _ctx(80)
    ctx.env_gpuperf = "off"
    affinityplan.step(ctx, _cfg(tmp_path, hgx), state)
    assert "off" in aff.parse_plan_text(affinityplan.plan_path(str(tmp_path / "run"), 80).read_text()).noop
    # a job without GPUs: decided before the node is read (this topology file does not exist)
    cfg = _cfg(tmp_path, hgx)
    cfg.data["affinity"]["topology_file"] = str(tmp_path / "absent.json")
    affinityplan.step(_ctx(82, gpus=()), cfg, state)
    assert "no GPUs" in state.data["affinity"]["noop"]


def test_applied_records_are_read_back_sorted(tmp_path):
    d = tmp_path / "jobs" / "5" / "applied"
    d.mkdir(parents=True)
    for step, rank in (("0", 1), ("0", 0), ("batch", 0)):
        (d / f"{step}.{rank}").write_text(aff.applied_line({"job": 5, "step": step, "rank": rank, "status": "ok"}))
    (d / "junk").write_text("not a record")
    recs = affinity_report.applied_records(str(tmp_path), 5)
    assert [(r["step"], r["rank"]) for r in recs] == [("0", "0"), ("0", "1"), ("batch", "0")]


# --- gpuperf-run ---------------------------------------------------------------------------------

HERE_CPUS = sorted(os.sched_getaffinity(0))


def test_local_tasks_reads_this_nodes_entry():
    env = {"SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}
    assert gprun.local_tasks(env) == 1
    assert gprun.local_tasks({**env, "SLURM_NODEID": "1"}) == 2
    assert gprun.local_tasks({"SLURM_TASKS_PER_NODE": "4"}) == 4
    assert gprun.local_tasks({"SLURM_STEP_TASKS_PER_NODE": "garbage"}) is None


@pytest.mark.parametrize("line,rel,name", [
    ("4:cpuset:/slurm/uid_0/job_9/step_0", "cpuset/slurm/uid_0/job_9/step_0", "cpuset.effective_cpus"),
    ("0::/system.slice/slurmstepd.scope/job_9/step_0", "system.slice/slurmstepd.scope/job_9/step_0",
     "cpuset.cpus.effective"),
])
def test_own_cpuset_v1_and_v2(tmp_path, line, rel, name):
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(f"9:memory:/x\n{line}\n")
    (tmp_path / "cg" / rel).mkdir(parents=True)
    (tmp_path / "cg" / rel / name).write_text("2-3,8\n")
    assert gprun.own_cpuset(str(tmp_path / "proc"), str(tmp_path / "cg")) == [2, 3, 8]


def test_omp_exports_respect_the_user_and_replace_our_own():
    r = aff.RankPlan(rank=0, gpus=(0,), numa_nodes=(0,), cpus=(0, 1), mems=(0,), mem_policy="bind",
                     omp_num_threads=2, omp_places="{0}:2")
    assert dict(gprun.omp_exports(r, {})) == {"OMP_NUM_THREADS": "2", "OMP_PLACES": "{0}:2",
                                             "GPUPERF_AFFINITY_OMP": "2 {0}:2", "GPUPERF_OMP": "2 {0}:2"}
    assert gprun.omp_exports(r, {"OMP_NUM_THREADS": "7"}) == []
    assert gprun.omp_exports(r, {"OMP_PLACES": "cores"}) == []
    # inherited from the batch step: our places, and threads the env part's TaskProlog exported
    inherited = {"OMP_NUM_THREADS": "1", "OMP_PLACES": "{0}:4", "GPUPERF_AFFINITY_OMP": "4 {0}:4",
                 "GPUPERF_OMP": "1 none"}
    assert dict(gprun.omp_exports(r, inherited))["OMP_PLACES"] == "{0}:2"
    # the env part marked its threads, but OMP_PLACES is the user's own
    assert gprun.omp_exports(r, {"OMP_NUM_THREADS": "1", "GPUPERF_OMP": "1 none", "OMP_PLACES": "sockets"}) == []


def _policy_of_child(nodes: str) -> subprocess.CompletedProcess:
    code = ("import sys; from gpuperf.wrappers.run import set_mempolicy\n"
            f"set_mempolicy('bind', ({nodes},))\n"
            "print(open('/proc/self/numa_maps').readline().split()[1])")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_set_mempolicy_binds_and_reports_the_kernels_error():
    assert _policy_of_child("0").stdout.strip() == "bind:0"
    if not Path("/sys/devices/system/node/node1").exists():
        bad = _policy_of_child("1")
        assert bad.returncode != 0 and "Invalid argument" in bad.stderr


def _run_env(tmp_path: Path, plan: str | None, **extra: str) -> dict[str, str]:
    run = tmp_path / "run"
    jdir = run / "jobs" / "31"
    (jdir / "applied").mkdir(parents=True, exist_ok=True)
    if plan is not None:
        (jdir / "affinity.plan").write_text(plan)
    (tmp_path / "gpuperf.toml").write_text(f'[general]\nrun_dir = "{run}"\nlog_file = ""\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMP_", "GPUPERF"))}
    env.update({"GPUPERF_CONFIG": str(tmp_path / "gpuperf.toml"), "SLURM_JOB_ID": "31", "SLURM_LOCALID": "1",
                "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_NODEID": "0", "SLURM_STEP_ID": "0"}, **extra)
    return env


def _gpuperf_run(env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = "awk '/^Cpus_allowed_list/{print $2}' /proc/self/status; echo omp=$OMP_NUM_THREADS"
    return subprocess.run([sys.executable, "-m", "gpuperf.wrappers.run", "sh", "-c", cmd],
                          capture_output=True, text=True, env=env, timeout=60)


def _two_rank_plan() -> str:
    last = HERE_CPUS[-1]
    r = [aff.RankPlan(rank=i, gpus=(i,), numa_nodes=(0,), cpus=(HERE_CPUS[0],) if i == 0 else (last,), mems=(0,),
                      mem_policy="bind", omp_num_threads=1, omp_places=f"{{{HERE_CPUS[0] if i == 0 else last}}}")
         for i in range(2)]
    return aff.plan_text(31, aff.Allocation(gpus=(0, 1), cpus=tuple(HERE_CPUS)), [aff.AffinityPlan(tasks=2, ranks=r)])


def test_gpuperf_run_pins_from_the_plan_file_sets_omp_records_and_execs(tmp_path):
    p = _gpuperf_run(_run_env(tmp_path, _two_rank_plan()))
    assert p.returncode == 0, p.stderr
    cpus, omp = p.stdout.split()
    assert cpus == str(HERE_CPUS[-1]) and omp == "omp=1"
    rec = affinity_report.applied_records(str(tmp_path / "run"), 31)
    assert [(r["rank"], r["status"], r["cpus"], r["mem"]) for r in rec] == [("1", "ok", str(HERE_CPUS[-1]), "ok")]


def test_gpuperf_run_off_or_broken_plan_still_runs_the_command_unpinned(tmp_path):
    off = _gpuperf_run(_run_env(tmp_path, _two_rank_plan(), GPUPERF="off"))
    assert off.returncode == 0 and off.stdout.split()[0] == aff.format_cpu_list(HERE_CPUS)
    broken = _gpuperf_run(_run_env(tmp_path, "garbage\n"))
    assert broken.returncode == 0 and broken.stdout.split()[0] == aff.format_cpu_list(HERE_CPUS)
    assert broken.stderr.count("gpuperf-run:") == 1 and "not a gpuperf affinity plan" in broken.stderr
    missing = subprocess.run([sys.executable, "-m", "gpuperf.wrappers.run", "/nonexistent/cmd"],
                             capture_output=True, text=True, env=_run_env(tmp_path, None))
    assert missing.returncode == 127 and "cannot run /nonexistent/cmd" in missing.stderr


def test_report_shows_the_plan_until_tasks_report_then_what_they_applied(tmp_path, hgx):
    cg = tmp_path / "cg" / "cpuset" / "slurm" / f"uid_{os.getuid()}" / "job_81"
    cg.mkdir(parents=True)
    (cg / "cpuset.cpus").write_text(aff.format_cpu_list(all_cpus(hgx)))
    affinityplan.step(_ctx(81, gpus=range(8)), _cfg(tmp_path, hgx), HookState())
    jdir = tmp_path / "run" / "jobs" / "81"
    before = affinity_report.report(jdir)
    assert before["cpus_source"] == "cgroup" and before["noop"] is None
    assert [before[str(r)]["gpu"] for r in range(8)] == [str(r) for r in range(8)]
    assert {before[str(r)]["status"] for r in range(8)} == {"planned"}
    assert set(before["7"]["cpus"]) <= numa_cpus(hgx, 1)
    for step, rank, cpus in (("batch", 0, "0-223"), ("0", 0, "0-55,112-167"), ("0", 1, "56-111,168-223")):
        (jdir / "applied" / f"{step}.{rank}").write_text(aff.applied_line(
            {"job": 81, "step": step, "rank": rank, "tasks": 2, "status": "ok", "gpus": "0-3" if rank == 0 else "4-7",
             "numa": str(rank), "cpus": cpus, "policy": "bind", "mem": "ok"}))
    after = affinity_report.report(jdir)
    assert sorted(k for k in after if k.isdigit()) == ["0", "1"]  # the planned 8 ranks are gone
    assert after["0"]["step"] == "0" and after["0"]["cpus"] == sorted(numa_cpus(hgx, 0))
    assert after["1"]["gpu"] == "4-7" and after["statuses"] == {"ok": 3}
    assert affinity_report.report(tmp_path / "nothing") is None
