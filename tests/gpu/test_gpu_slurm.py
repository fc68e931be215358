"""Acceptance on real GPUs under real Slurm: real ``sbatch`` jobs as an ordinary user, each checked end
to end, with gpuperf fully on (prolog live checks, SPANK pinning, TaskProlog environment, the node
daemon sampling NVML, the controller's AdminComment, reports, doctor, the fleet probe).

Runs on a machine with NVIDIA GPUs (any number: the jobs ask for one GPU each and the checks read
what Slurm gave them); skipped with the reason elsewhere (``conftest.why_no_gpu``). The batch of jobs
is submitted once (``batch``) and each test checks its own job. ``tests/gpu/README.md`` says how the
GPU machines run it; results: ``benchmarks/results/gpu/``.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from pathlib import Path

import pytest
from gpunode import wait_admincomment, watch_processes

pytestmark = pytest.mark.slurm

# what a task says about itself, from inside the task
REPORT = ("echo \"task step=$SLURM_STEP_ID cpus=$(awk '/^Cpus_allowed_list/{print $2}' /proc/self/status) "
          "cvd=$CUDA_VISIBLE_DEVICES omp=$OMP_NUM_THREADS gpuperf=$GPUPERF "
          "alloc=$PYTORCH_CUDA_ALLOC_CONF nccl=$(env | grep -c '^NCCL_')\"\n")
GEMM_S = 12


def _py(c, script: str, args: str) -> str:
    return f"{c.torch_python} {c.workloads}/{script} {args}"


def _jobs(c) -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (script, sbatch args): the jobs of the batch, one GPU each (a 1-GPU node runs them in turn)."""
    report = c.layout.out_dir / "task-report.sh"
    report.write_text("#!/bin/sh\n" + REPORT)
    report.chmod(0o755)
    g = "--gres=gpu:1"
    return {
        "gemm": (_py(c, "gemm_bf16.py", f"--seconds {GEMM_S}") + "\n", (g, "-c4")),
        "steps": (f"srun -n1 {_py(c, 'gemm_bf16.py', '--seconds 3')}\nsrun -n1 {_py(c, 'idle.py', '--seconds 3 --gib 1')}\n"
                  f"srun -n1 {report}\n", (g, "-c4")),
        "idle": (_py(c, "idle.py", "--seconds 10 --gib 2") + "\n", (g, "-c2")),
        "cpu": ("python3 -c 'import time\nt=time.time()\nwhile time.time()-t<6: pass'\n", ("-c1",)),
        "fail": (_py(c, "gemm_bf16.py", "--seconds 2") + "\nexit 3\n", (g, "-c2")),
        "cancel": (_py(c, "gemm_bf16.py", "--seconds 120") + "\n", (g, "-c2")),
        "env": (f"srun -n1 {report}\n", (g, "-c4")),
        "env_user": (f"srun -n1 {report}\n", (g, "-c4", "--export=ALL,OMP_NUM_THREADS=3")),
        "off": (f"echo batch gpuperf=$GPUPERF\nsrun -n1 {report}\n", (g, "-c4", "--gpuperf=off")),
    }


def _metrics(c) -> str:
    port = c.gpuperf_config()["daemon"]["metrics_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _live_pids(c, job: int, seconds: float) -> list[dict]:
    """While the job runs: each CUDA process NVML lists, the job its environment names, and the job the
    daemon's own attribution (``Attributor.job_of``, the same procfs reads) gives it."""
    from gpuperf.daemon.attribution import Attributor

    attr = Attributor()

    def describe(pid: int) -> dict:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            named = next((int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"SLURM_JOB_ID=")), None)
        except OSError:
            named = None
        return {"environ_job": named, "attributed_job": attr.job_of(pid)}

    return watch_processes(c, job, seconds, describe)


@pytest.fixture(scope="module")
def batch(gpu_cluster, gpu_results):
    """Submit every job once as the ordinary user; cancel one while it runs; wait for all to end."""
    c = gpu_cluster
    jobs = {}
    t_submit = {}
    for name, (script, args) in _jobs(c).items():
        t_submit[name] = time.time()
        jobs[name] = c.sbatch(script, *args, f"--job-name=gp-{name}", user=c.user)
    live = _live_pids(c, jobs["gemm"], 60)
    c.wait(jobs["cancel"], ("RUNNING",), timeout=300)
    time.sleep(6)
    c.run("scancel", jobs["cancel"], user=c.user)
    states = {n: c.wait(j, timeout=400) for n, j in jobs.items()}
    drains = {n: s for n, s in c.node_states().items() if "drain" in s or "down" in s}
    out = {"jobs": jobs, "states": states, "live_processes": live, "drained_nodes": drains}
    gpu_results["batch"] = out
    return c, jobs, states, live


def test_every_job_ends_as_it_should_and_no_node_drains(batch, gpu_results):
    c, jobs, states, _ = batch
    want = {"fail": "FAILED", "cancel": "CANCELLED"}
    for name, state in states.items():
        assert state == want.get(name, "COMPLETED"), (name, state, c.job_output(jobs[name])[-2000:])
    assert c.sacct(jobs["fail"], ("ExitCode",))["ExitCode"] == "3:0"
    assert not gpu_results["batch"]["drained_nodes"], c.logs()
    gemm = c.job_output(jobs["gemm"])
    tflops = float(re.search(r"tflops=([\d.]+)", gemm).group(1))
    gpu_results["gemm_tflops"] = tflops
    assert tflops > 50, gemm  # a real bf16 GEMM on the GPU, not a CPU fallback
    # the CPU-only job ran beside the GPU jobs on the same node and got no GPU
    assert c.job_record(jobs["cpu"], "prolog")["context"]["gpus"] == []


def test_prolog_live_checks_pass_and_their_latency_is_recorded(batch, gpu_results):
    c, jobs, _, _ = batch
    lat = {}
    for name, job in jobs.items():
        rec = c.job_record(job, "prolog")
        assert rec is not None, name
        assert all(st["ok"] for st in rec["steps"].values()), (name, rec["steps"])
        health = rec["data"].get("health", {})
        assert health.get("status") in ("ok", "warn", None), (name, health)
        lat[name] = {"total_ms": rec.get("ms") or rec.get("duration_ms"),
                     "steps_ms": {k: st.get("ms") for k, st in rec["steps"].items()},
                     "health_source": health.get("source"), "via": rec["data"].get("via")}
    gpu_results["prolog"] = lat


def test_task_pinned_and_environment_as_planned_user_value_kept_off_clean(batch, gpu_results):
    from gpuperf.affinity import plan as aff
    from gpuperf.prolog import affinityplan

    c, jobs, _, _ = batch
    seen = {}
    for name in ("env", "env_user", "off", "steps"):
        out = c.job_output(jobs[name])
        line = next(l for l in out.splitlines() if l.startswith("task "))
        kv = dict(tok.partition("=")[::2] for tok in line.split()[1:])
        seen[name] = kv
        gpus = c.job_record(jobs[name], "prolog")["context"]["gpus"]
        assert kv["cvd"] == ",".join(map(str, range(len(gpus)))) or kv["cvd"] == ",".join(map(str, gpus)), (name, kv)
    gpu_results["tasks"] = seen
    plan = aff.parse_plan_text(affinityplan.plan_path(str(c.run_dir), jobs["env"]).read_text())
    prolog = c.job_record(jobs["env"], "prolog")["data"]["affinity"]
    task_cpus = aff.parse_cpu_list(seen["env"]["cpus"])
    if plan.noop:  # one NUMA node (the 1- and 2-GPU machines): Slurm's own binding stands
        # the prolog no longer asks Slurm for the job's CPUs where no plan can use them ("not needed");
        # the task keeps its -c4 binding from Slurm, which the job's own cgroup shows
        assert prolog["cpus_source"] == "not needed" or task_cpus == aff.parse_cpu_list(prolog["job_cpus"]), prolog
        assert len(task_cpus) == 4, (seen["env"], prolog)
    else:
        assert task_cpus == list(plan.ranks[(1, 0)].cpus), (seen["env"], plan.ranks)
    env = json.loads((c.run_dir / "jobs" / str(jobs["env"]) / "env.json").read_text())
    injected = {v["name"]: v["value"] for v in env["vars"]}
    assert seen["env"]["gpuperf"] != "off"
    # OMP_NUM_THREADS: the task's CPUs divided by its GPUs, decided in the task
    if "OMP_NUM_THREADS" in injected:
        assert seen["env"]["omp"] == str(len(task_cpus)), seen["env"]
    if "PYTORCH_CUDA_ALLOC_CONF" in injected:
        assert seen["env"]["alloc"] == injected["PYTORCH_CUDA_ALLOC_CONF"], seen["env"]
    gpu_results["env_injected"] = injected
    assert seen["env_user"]["omp"] == "3"  # the user's own value wins
    off = c.job_output(jobs["off"])
    assert "batch gpuperf=off" in off and seen["off"]["gpuperf"] == "off"
    off_plan = aff.parse_plan_text(affinityplan.plan_path(str(c.run_dir), jobs["off"]).read_text())
    assert off_plan.noop and not off_plan.ranks


def test_daemon_attributes_each_cuda_process_to_its_job(batch, gpu_results):
    c, jobs, _, live = batch
    mismatches = _metric(_metrics(c), "gpuperf_daemon_attribution_mismatches_total") or \
        _metric(_metrics(c), "gpuperf_daemon_attribution_mismatches") or 0.0
    foreign = {}
    for name in ("gemm", "steps", "idle"):
        a = json.loads((c.run_dir / "jobs" / str(jobs[name]) / "aggregates.json").read_text())
        foreign[name] = [p for g in a["gpus"].values() for p in g.get("foreign_processes", [])]
    gpu_results["attribution"] = {"live_processes": live, "mismatches": mismatches, "foreign": foreign}
    # with several GPUs the batch's other jobs run beside the GEMM job (each on its own GPU): NVML lists their
    # processes too, and each must be attributed to the job its environment names (issue 35, item 7)
    assert [p for p in live if p["environ_job"] == jobs["gemm"]], f"NVML showed no process of the GEMM job: {live}"
    assert all(p["attributed_job"] == p["environ_job"] for p in live), live
    assert mismatches == 0 and not any(foreign.values()), (mismatches, foreign)


def test_admincomment_class_is_the_workloads(batch, gpu_results):
    c, jobs, states, _ = batch
    classes, heads = {}, {}
    for name in ("gemm", "idle", "steps", "fail", "cancel"):
        row = wait_admincomment(c, jobs[name], states[name])
        text = row.get("AdminComment", "")
        m = re.search(r"class=(\w+)", text)
        classes[name] = m.group(1) if m else text[:200]
        heads[name] = text.split(" z=")[0]
    gpu_results["classes"] = classes
    gpu_results["admincomments"] = heads
    # a bf16 GEMM at full tilt: compute-bound, or throttled where it runs into the power cap (H100 at 700 W)
    assert classes["gemm"] in ("compute_bound", "throttled"), heads
    assert classes["idle"] in ("idle", "unused_gpus"), heads


def test_report_as_the_jobs_user_with_series_and_charts_other_user_refused(batch, gpu_results):
    c, jobs, _, _ = batch
    job = jobs["gemm"]
    p = c.run("gpuperf", "report", job, user=c.user)
    assert p.returncode == 0, p.stderr
    js = c.run("gpuperf", "report", job, "--json", user=c.user)
    summary = json.loads(js.stdout)
    html = c.layout.out_dir / f"report-{job}.html"
    h = c.run("gpuperf", "report", job, "--html", html, user=c.user)
    charts = h.returncode == 0 and "plotly" in html.read_text()
    other = c.run("gpuperf", "report", job, user="nobody")
    listed = c.run("gpuperf", "jobs", "--json", "--limit", "0")
    gpu_results["report"] = {"terminal": p.stdout[-3000:], "class": summary["diagnosis"]["class"],
                             "html_charts": charts, "html_error": h.stderr[-500:], "other_user_rc": other.returncode,
                             "other_user_says": (other.stderr or other.stdout)[-300:]}
    assert "Time series" in p.stdout and "Tensor active" in p.stdout, p.stdout  # the job's series, in the terminal
    assert summary["diagnosis"]["class"] == gpu_results.get("classes", {}).get("gemm", summary["diagnosis"]["class"])
    assert charts, h.stderr
    assert other.returncode != 0 and str(job) not in other.stdout
    assert listed.returncode == 0, listed.stderr
    ids = {int(r.get("job_id", 0)) for r in json.loads(listed.stdout)}
    assert {jobs["gemm"], jobs["idle"]} <= ids, ids


def test_doctor_is_clean_on_the_real_node(gpu_cluster, gpu_results):
    c = gpu_cluster
    p = c.run("gpuperf", "doctor", "--role", "both")
    gpu_results["doctor"] = p.stdout[-3000:]
    assert p.returncode == 0, p.stdout + p.stderr


def test_fleet_probe_on_the_idle_node_reaches_gpuperf_fleet(batch, gpu_results):
    c = batch[0]
    state = Path(c.gpuperf_config()["general"]["state_dir"])
    probe_file = state / "fleet-probe.json"
    # the daemon probes the node every fleet.probe_every_s while no job is registered (conftest: 15 s)
    end = time.monotonic() + 150
    while time.monotonic() < end and not probe_file.exists():
        time.sleep(1)
    assert probe_file.exists(), (c.dir / "log" / "daemon.log").read_text(errors="replace")[-3000:]
    probe = json.loads(probe_file.read_text())
    # the figures ride to the controller on the next node summary: one short job carries them
    job = c.sbatch("sleep 1\n", "--gres=gpu:1", user=c.user)
    assert c.wait(job, timeout=120) == "COMPLETED"
    c.wait_sacct(job, fields=("JobID", "AdminComment%80"), timeout=60)
    fleet = c.run("gpuperf", "fleet", "--json", "--limit", "0")
    gpu_results["fleet"] = {"probe": probe, "fleet": fleet.stdout[-4000:]}
    assert fleet.returncode == 0, fleet.stderr
    data = json.loads(fleet.stdout)
    tflops = [g.get("figures", {}).get("probe_tflops") for g in data.get("gpus", [])]
    assert any(isinstance(t, (int, float)) and t > 50 for t in tflops), data
