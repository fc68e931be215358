"""What gpuperf costs a job on a real GPU node under real Slurm (issue 27), and what a profiler beside it does.

The same bf16 GEMM job (``workloads/gemm_bf16.py``, one GPU) runs with gpuperf fully on (Prolog,
TaskProlog, Epilog, EpilogSlurmctld, the SPANK plugin, the node daemon sampling NVML, the collector) and
fully off (hooks do nothing, plugstack.conf empty, daemon and collector stopped), in paired rounds whose
order alternates (on-off, off-on, ...). Per pair: the ratio on/off of the job's own TFLOP/s and of its
wall time from ``sbatch`` to COMPLETED (polled every 0.1 s); per job, the time each hook took. The hooks
run through a timing shell wrapper in both modes (off: the wrapper alone), so "added at start" is
Prolog + TaskProlog on minus off, and "added at end" is Epilog on minus off (EpilogSlurmctld runs on the
controller after the job's end and is shown apart). Intervals: 95% t-intervals over the pairs.

``--job allreduce`` (issue 29, a node with 2+ GPUs): the job is a communicating one instead, ``srun -n2``
running ``workloads/zoo_comm_allreduce_nvlink_bf16.py`` one task per GPU (``--gres=gpu:2``); its throughput
is its own bus bandwidth (``busbw_gbps``) and the same on/off pairs give the interval of its ratio.

Each job's way from sbatch to COMPLETED is also cut into consecutive segments (``job_timeline.py``: queue wait,
Prolog, batch launch, srun and TaskProlog, the ranks' start-up, the timed loop, tear-down, Epilog), so the paired
on-off difference of each says where gpuperf's cost lands and where the noise comes from; the wall-time ratio is
given three ways: with the queue wait (sbatch to COMPLETED), the job's own (its start to COMPLETED) and the node's
(Prolog start to Epilog end). ``--pool RUN...`` (no GPU) takes earlier runs' pairs together, and each run as one
observation too (``by_run``).

``--ncu``: a job runs Nsight Compute (``ncu``) on its GEMM while the daemon samples: the job's state, and
what the daemon recorded for its GPU over that time (kept for the report's test fixture).

    bash tests/gpu/node.sh BUNDLE run python3 benchmarks/gpu_job_cost.py --pairs 8 --json OUT.json [--ncu]
    bash tests/gpu/node.sh BUNDLE run python3 benchmarks/gpu_job_cost.py --job allreduce --pairs 8 --json OUT.json
    python3 benchmarks/gpu_job_cost.py --job allreduce --pool RUN1.json RUN2.json --json POOLED.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "gpu"), str(REPO / "benchmarks")]

from figures import emit  # noqa: E402
from job_timeline import SEGMENTS, filled, hook_points, hook_spans, output_points, segments  # noqa: E402
from gpunode import (bring_up, real_gpu_files, start_services, stop_services, tear_down, torch_python,
                     watch_processes, why_no_gpu)  # noqa: E402

# job kind -> (workload, sbatch arguments, srun tasks (0: no srun), the figure that is its throughput)
JOBS = {"gemm": ("gemm_bf16.py", ("--gres=gpu:1", "-c4"), 0, "tflops"),
        "allreduce": ("zoo_comm_allreduce_nvlink_bf16.py", ("--gres=gpu:2", "-n2", "-c4"), 2, "busbw_gbps")}
HOOKS = {"Prolog": "prolog", "Epilog": "epilog", "TaskProlog": "taskprolog", "EpilogSlurmctld": "epilog-slurmctld"}
# two-sided 95% t quantiles by degrees of freedom
T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.16, 14: 2.145, 15: 2.131, 16: 2.12, 19: 2.093, 24: 2.064, 29: 2.045}


def interval(xs: list[float]) -> dict[str, float]:
    """Mean and 95% t-interval of ``xs``."""
    n = len(xs)
    m = statistics.fmean(xs)
    if n < 2:
        return {"mean": m, "lo": m, "hi": m, "n": n}
    t = T95.get(n - 1) or T95[max(k for k in T95 if k <= n - 1)]
    h = t * statistics.stdev(xs) / math.sqrt(n)
    return {"mean": round(m, 5), "lo": round(m - h, 5), "hi": round(m + h, 5), "n": n}


def timing_hooks(c, bench: Path) -> Path:
    """Wrap each gpuperf hook in a timing shell: it runs the hook only while ``bench/on`` exists."""
    (bench / "hooks").mkdir(parents=True, exist_ok=True)
    log = bench / "timing.log"
    log.touch()
    log.chmod(0o666)  # the TaskProlog runs as the job's user
    for hook in HOOKS.values():
        w = bench / "hooks" / hook
        w.write_text(f"#!/bin/sh\nt0=$(date +%s%N)\nrc=0\nif [ -e {bench}/on ]; then {c.layout.hook_dir / hook} \"$@\"; rc=$?; fi\n"
                     f"t1=$(date +%s%N)\necho \"$SLURM_JOB_ID {hook} $t0 $t1 $rc\" >> {log}\nexit $rc\n")
        w.chmod(0o755)
    return log


def point_slurm_conf(c, hook_dir: Path | None) -> None:
    """slurm.conf's hook lines to ``hook_dir``'s scripts (None: the cluster's own), read with reconfigure."""
    text = c.layout.slurm_conf.read_text()
    for key, hook in HOOKS.items():
        target = (hook_dir or c.layout.hook_dir) / hook
        text = re.sub(rf"^{key}=.*$", f"{key}={target}", text, flags=re.M)
    c.layout.slurm_conf.write_text(text)
    c.run("scontrol", "reconfigure", check=True)
    time.sleep(2)


def hook_ms(log_text: str, job: int) -> dict[str, float]:
    """Milliseconds each hook took for ``job`` (TaskProlog: summed over its tasks)."""
    out: dict[str, float] = {}
    for hook, t0_ns, t1_ns in hook_spans(log_text, job):
        out[hook] = out.get(hook, 0.0) + (t1_ns - t0_ns) / 1e6
    return out


def run_job(c, seconds: float, log: Path, kind: str = "gemm") -> dict:
    """One job of ``kind`` (JOBS) as the test user: its throughput, submit->COMPLETED wall time, hook times,
    and where its wall time went (``job_timeline.segments``)."""
    script_name, sargs, tasks, metric = JOBS[kind]
    script = f"{c.torch_python} {c.workloads}/{script_name} --seconds {seconds}\n"
    if tasks:
        script = f"srun -n{tasks} {script}"
    script = f"echo gp-t script0 $(date +%s.%N)\n{script}echo gp-t script1 $(date +%s.%N)\n"
    t0 = time.time()
    job = c.sbatch(script, *sargs, "--job-name=gp-cost", user=c.user)
    points = {"submit": t0, "submitted": time.time()}
    state = None
    while time.time() - t0 < seconds + 120:
        state = c.job_state(job)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            break
        time.sleep(0.1)
    points["completed"] = time.time()
    wall = points["completed"] - t0
    out = c.job_output(job)
    m = re.search(rf"\b{metric}=([\d.]+)", out)
    time.sleep(0.5)  # EpilogSlurmctld's line lands after COMPLETED
    log_text = log.read_text()
    points.update(hook_points(log_text, job))
    points.update(output_points(out))
    return {"job": job, "state": state, "wall_s": round(wall, 3), metric: float(m.group(1)) if m else None,
            "hooks_ms": hook_ms(log_text, job), "segments_s": segments(points),
            "store_wait_s": points.get("wait"), "points": points}


def summarise(rows: list[dict], metric: str = "tflops") -> dict:
    """The figures of paired on/off rounds: 95% intervals of the throughput and wall-time ratios, the
    milliseconds gpuperf's hooks add at start and at end (pairs where either job measured nothing are left out)."""
    ok = [r for r in rows if r["on"].get(metric) and r["off"].get(metric)]

    def added(r: dict, hooks: tuple[str, ...]) -> float:
        return sum(r["on"]["hooks_ms"].get(h, 0.0) for h in hooks) - sum(r["off"]["hooks_ms"].get(h, 0.0) for h in hooks)

    if not ok:
        return {"pairs_used": 0, "pairs_failed": len(rows)}
    # each timed pair's (on, off) segments, walls filled in once; per name, the pairs where both jobs have it
    segs = [(filled(r["on"]["segments_s"]), filled(r["off"]["segments_s"])) for r in ok
            if r["on"].get("segments_s") and r["off"].get("segments_s")]
    both = {name: [(on[name], off[name]) for on, off in segs if on.get(name) is not None and off.get(name) is not None]
            for name in [n for n, _, _ in SEGMENTS] + ["run_wall", "node_wall"]}
    out = {"pairs_used": len(ok), "pairs_failed": len(rows) - len(ok),
           f"{metric}_ratio_on_off": interval([r["on"][metric] / r["off"][metric] for r in ok]),
           "wall_ratio_on_off": interval([r["on"]["wall_s"] / r["off"]["wall_s"] for r in ok])}
    if both["node_wall"]:
        # the job's own wall time (its start to COMPLETED) and the node's (Prolog start to Epilog end): the
        # queue wait before the start is the scheduler's, not gpuperf's (0-1 s, evenly spread, in both modes on a
        # 2x H100: benchmarks/results/multi_gpu/README.md)
        for name in ("run_wall", "node_wall"):
            out[f"{name}_ratio_on_off"] = interval([on / off for on, off in both[name]])
        out["segments_on_minus_off_ms"] = {name: interval([1000 * (on - off) for on, off in both[name]])
                                           for name, _, _ in SEGMENTS if both[name]}
        out["segments_off_ms"] = {name: interval([1000 * off for _, off in both[name]])
                                  for name, _, _ in SEGMENTS if both[name]}
    return {**out,
            "added_start_ms": interval([added(r, ("prolog", "taskprolog")) for r in ok]),
            "added_end_ms": interval([added(r, ("epilog",)) for r in ok]),
            "epilog_slurmctld_on_ms": interval([r["on"]["hooks_ms"].get("epilog-slurmctld", 0.0) for r in ok]),
            f"{metric}_on": interval([r["on"][metric] for r in ok]),
            f"{metric}_off": interval([r["off"][metric] for r in ok])}


def set_mode(c, bench: Path, on: bool, saved_plugstack: str, spank_text: str, procs: list,
             settle_s: float = 0.0) -> list:
    """gpuperf fully on (hooks run, SPANK plugin, daemon + collector) or fully off. A daemon just started
    gets ``settle_s`` more: on a node it has been running for days, not seconds, when a job comes."""
    flag = bench / "on"
    if on:
        flag.touch()
        (c.dir / "plugstack.conf").write_text(spank_text)
        if not procs:
            procs = start_services(c)
            time.sleep(settle_s)
    else:
        flag.unlink(missing_ok=True)
        (c.dir / "plugstack.conf").write_text(saved_plugstack)
        stop_services(procs)
        procs = []
    time.sleep(1)
    return procs


def gpu_processes(c, job: int, seconds: float) -> list[dict]:
    """While the job runs: the processes NVML lists on the GPUs, their command and the environment a
    profiler leaves there (the daemon reads the same /proc files)."""
    def describe(pid: int) -> dict:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return {}
        pairs = [e.decode(errors="replace").split("=", 1) for e in env if b"=" in e]
        return {"cmd": cmd[:300], "env_names": sorted(n for n, _ in pairs),
                "env": {n: v[:200] for n, v in pairs
                        if any(k in n for k in ("INJECTION", "NV_", "NSIGHT", "PRELOAD", "CUPTI", "TPS"))}}

    return watch_processes(c, job, seconds, describe)


def ncu_job(c, seconds: float) -> dict:
    """A job that profiles its own GEMM with Nsight Compute while the daemon samples its GPU."""
    ncu = shutil.which("ncu") or next(iter(sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu"))), None) \
        or next(iter(sorted(Path("/usr/local").glob("cuda*/bin/ncu"))), None)
    if not ncu:
        return {"skipped": "no ncu on this machine"}
    metrics = "sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    script = (f"{ncu} --metrics {metrics} --launch-count 100000 --csv --log-file {c.layout.out_dir}/ncu-$SLURM_JOB_ID.csv "
              f"{c.torch_python} {c.workloads}/gemm_bf16.py --seconds {seconds}\necho ncu exit $?\n")
    job = c.sbatch(script, "--gres=gpu:1", "-c4", "--job-name=gp-ncu", user=c.user)
    procs = gpu_processes(c, job, seconds + 120)
    state = c.wait(job, timeout=seconds + 300)
    c.wait_sacct(job, state=state, fields=("JobID", "AdminComment%200"), timeout=60)
    rep = c.run("gpuperf", "report", job, user=c.user)
    js = c.run("gpuperf", "report", job, "--json", user=c.user)
    agg_path = c.run_dir / "jobs" / str(job) / "aggregates.json"
    daemon_log = (c.dir / "log" / "daemon.log").read_text(errors="replace")
    return {"job": job, "state": state, "gpu_processes": procs, "output": c.job_output(job)[-1500:],
            "report": rep.stdout[-4000:],
            "report_rc": rep.returncode, "summary": json.loads(js.stdout) if js.returncode == 0 else js.stderr[-1000:],
            "aggregates": json.loads(agg_path.read_text()) if agg_path.exists() else None,
            "daemon_log_tail": daemon_log[-3000:]}


def pooled_pairs(paths: list[str]) -> list[dict]:
    """The pairs of earlier runs: a run's ``--json`` file (its ``pairs``) or its log (a pair's JSON per line,
    what a run cut off before its summary leaves)."""
    rows: list[dict] = []
    for path in paths:
        text = Path(path).read_text()
        try:
            rows += [dict(r, source=path) for r in json.loads(text).get("pairs", [])]
            continue
        except (json.JSONDecodeError, AttributeError):
            pass
        for line in text.splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(r, dict) and "on" in r and "off" in r:
                rows.append(dict(r, source=path))
    return rows


def by_run(rows: list[dict], metric: str) -> dict:
    """Each pooled run's ratio means, and the 95% interval over those means: a run is then one observation,
    so a drift between runs (machines, hours) that the pairs of one run do not see is in the interval."""
    runs: dict[str, dict] = {}
    for source in dict.fromkeys(r.get("source", "") for r in rows):
        f = summarise([r for r in rows if r.get("source", "") == source], metric)
        runs[source] = {k: f[k]["mean"] for k in f if k.endswith("_ratio_on_off")} | {"pairs": f["pairs_used"]}
    keys = [k for k in next(iter(runs.values()), {}) if k.endswith("_ratio_on_off")]
    over = {k: interval([v[k] for v in runs.values() if k in v]) for k in keys
            if sum(k in v for v in runs.values()) >= 2}
    return {"each": runs, "over_runs": over}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=8, help="paired rounds (on+off each)")
    ap.add_argument("--job", choices=sorted(JOBS), default="gemm",
                    help="gemm: one GPU, TFLOP/s; allreduce: srun one task per GPU on 2 GPUs, bus bandwidth")
    ap.add_argument("--seconds", type=float, default=6.0, help="GEMM loop of each job, seconds")
    ap.add_argument("--ncu", action="store_true", help="also run one job under Nsight Compute")
    ap.add_argument("--budget", type=float, default=0.0,
                    help="seconds for the pairs: no block of two pairs (on-off, off-on) starts that would end past it "
                         "(0: no limit)")
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds a just-started daemon runs before the next job (it samples from its first second)")
    ap.add_argument("--ncu-only", action="store_true", help="only the Nsight Compute job")
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--pool", nargs="+", metavar="RUN",
                    help="no jobs: the figures of these runs' pairs together (their --json files or logs)")
    a = ap.parse_args()
    if a.pool:
        rows = pooled_pairs(a.pool)
        emit({"pooled": a.pool, "args": vars(a), "pairs": rows, **summarise(rows, JOBS[a.job][3]),
              "runs": by_run(rows, JOBS[a.job][3])}, a.json)
        return 0
    why = why_no_gpu()
    need = JOBS[a.job][2] or 1
    if not why and len(real_gpu_files()) < need:
        why = f"--job {a.job} needs {need} GPUs, this machine has {len(real_gpu_files())}"
    py = torch_python()
    if why or not py:
        print(f"gpu_job_cost: cannot run here: {why or 'no Python with PyTorch and CUDA'}", file=sys.stderr)
        return 2
    c, saved, procs = bring_up(os.environ.get("GPUPERF_TEST_CLUSTER", "gpu"), py)
    spank_text = (c.dir / "plugstack.conf").read_text()
    bench = c.dir / "bench"
    figures: dict = {"machine": {"gpus": list(c.layout.gpu_files), "cpus": c.layout.cpus},
                     "args": vars(a), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        smi = os.popen("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader").read().strip()
        figures["machine"]["nvidia_smi"] = smi
        if not a.ncu_only:
            log = timing_hooks(c, bench)
            point_slurm_conf(c, bench / "hooks")
            run_job(c, 2, log, a.job)  # warm-up: CUDA context, cuBLAS, page cache (not counted)
            rows = []
            t_pairs = time.monotonic()
            for i in range(a.pairs):
                spent = time.monotonic() - t_pairs
                # whole blocks only, so as many pairs ran on-first as off-first
                if a.budget and i and i % 2 == 0 and spent + 2 * spent / i > a.budget:
                    figures["budget_stopped_after_pairs"] = i
                    break
                pair = {}
                for on in ((True, False) if i % 2 == 0 else (False, True)):
                    procs = set_mode(c, bench, on, saved, spank_text, procs, a.settle)
                    pair["on" if on else "off"] = run_job(c, a.seconds, log, a.job)
                rows.append(pair)
                print(json.dumps(pair), flush=True)
            procs = set_mode(c, bench, True, saved, spank_text, procs)
            point_slurm_conf(c, None)
            figures["pairs"] = rows
            figures.update(summarise(rows, JOBS[a.job][3]))
        if a.ncu or a.ncu_only:
            figures["ncu"] = ncu_job(c, a.seconds)
    finally:
        tear_down(c, saved, procs)
    emit(figures, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
