#!/usr/bin/env python3
"""The hooks' whole-process latency side by side with a bare interpreter start, in one interleaved run.

Bars (issue 17): prolog fast path and TaskProlog each p50 <= 25 ms and <= 2x the bare start measured
in the same run; the full prolog path unchanged or faster. Each round runs, one after the other:
  bare       the hooks' interpreter (the console scripts' shebang: the venv's python3, no flags), ``-c pass``
  fast       ``gpuperf-prolog``, daemon up: one request on the hook socket, the daemon runs the steps
  full       ``gpuperf-prolog`` with ``daemon.prolog_fast_path = false``: every step in the process
  task       ``gpuperf-taskprolog`` of a job whose prolog cached its plan (``hgx-h100-2s``, 4 GPUs)
Interleaving puts every row under the same machine load; the ratio to ``bare`` is the figure that
travels between machines. The fastest run of each row (``min``) is the one least disturbed by other
work: on a shared machine, the nearest to what a quiet one gives. Each prolog's job has a cpuset cgroup (a fake tree, ``affinity.cgroup_root``)
as ``PrologFlags=Contain`` gives it on a node, so its CPUs come from there, not from an scontrol call. Also prints each row's child CPU time (user+sys) and the load average.
``--layout v2-sluid`` makes each job's cpuset where Slurm 26.05 puts it (cgroup v2, the job's directory named by
its SLUID, which the prolog's environment carries) instead of cgroup v1's ``slurm/uid_0/job_<id>``; with
``--slurm-conf FILE`` (a running test cluster's slurm.conf) code that misses the cgroup pays a real
``scontrol show job -d`` call, as on a node. ``--baseline DIR`` adds the same hooks run from another checkout (``git archive REV | tar -x -C DIR``),
served by a daemon of that checkout (the daemon declines a hook whose settings differ from its own,
and a newer schema makes the settings differ).

  python3 benchmarks/hook_latency.py [--rounds 40] [--baseline /tmp/gpuperf-base]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from daemon_cpu import BenchDaemon, default_backend  # noqa: E402
from taskprolog_latency import prepare  # noqa: E402

from gpuperf.daemon import client  # noqa: E402

BIN = Path(sys.executable).parent
# what a pip console script does before calling main (``import re``), for hooks run from --baseline
SCRIPT = "import re, sys; from {mod} import main; sys.exit(main())"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str, int]:
    """Run once: (wall ms, child user+sys CPU ms, stdout, exit code)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/")
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = (time.perf_counter() - t0) * 1000
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, (ru.ru_utime + ru.ru_stime) * 1000, out.decode(), p.returncode


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


class Served:
    """The daemon that serves one set of hooks: its config, run directory, finalize and stop."""

    def __init__(self, cfg_path: Path, run_dir: str, finalize, stop):
        self.cfg_path, self.base, self.run_dir = cfg_path, cfg_path.parent, run_dir
        self.finalize, self.stop = finalize, stop


def current_daemon(extra: str) -> Served:
    """A BenchDaemon of this checkout."""
    d = BenchDaemon(default_backend(8), 1.0, extra)
    return Served(d.cfg_path, d.cfg.general.run_dir, lambda job: client.request(d.cfg, "finalize", {"job_id": job}),
                  d.stop)


# runs in its own interpreter: the baseline's modules (its benchmarks/daemon_cpu.py, its gpuperf) may have the
# same names as this checkout's and a different layout (issue 25 moved every root module into a folder)
_BASELINE = r"""
import sys
base, extra = sys.argv[1], sys.argv[2]
sys.path[:0] = [base, base + "/benchmarks"]
from daemon_cpu import BenchDaemon, default_backend
d = BenchDaemon(default_backend(8), 1.0, extra)
print(d.cfg_path, d.cfg.general.run_dir, flush=True)
for line in sys.stdin:
    try:
        d.call("finalize", {"job_id": int(line)})
    except Exception as e:
        print(f"finalize {line.strip()}: {e}", file=sys.stderr)
    print("ok", flush=True)
d.stop()
"""


def baseline_daemon(checkout: Path, extra: str) -> Served:
    """A BenchDaemon running ``checkout``'s code (its own benchmarks/daemon_cpu.py), in a process of its own."""
    proc = subprocess.Popen([sys.executable, "-c", _BASELINE, str(checkout.resolve()), extra], cwd="/",
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first = proc.stdout.readline().split()
    if len(first) != 2:
        proc.kill()
        raise SystemExit(f"the baseline daemon did not start (exit {proc.wait()})")

    def finalize(job: int) -> None:
        proc.stdin.write(f"{job}\n")
        proc.stdin.flush()
        proc.stdout.readline()

    def stop() -> None:
        proc.stdin.close()
        proc.wait(timeout=60)

    return Served(Path(first[0]), first[1], finalize, stop)


def baseline_hook(py: str, checkout: Path, name: str, mod: str) -> list[str]:
    """The baseline's hook as it shipped: its plain script (packaging/bin) where it has one, else what a pip
    console script runs (``import re`` first)."""
    script = checkout / "packaging" / "bin" / name
    return [py, str(script)] if script.exists() else [py, "-c", SCRIPT.format(mod=mod)]


def prolog_env(cfg_path: Path, job: int) -> dict[str, str]:
    """A Slurm prolog's environment (no PATH, FACTS.md) for ``job``."""
    return {"GPUPERF_CONFIG": str(cfg_path), "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": "0",
            "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0,1", "SLURMD_NODENAME": "bench",
            "SLURM_JOB_CPUS_PER_NODE": "8"}


def main() -> int:
    """Run the rounds and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--baseline", help="another checkout whose hooks run beside these (rows marked 'baseline')")
    ap.add_argument("--layout", choices=("v1", "v2-sluid"), default="v1", help="where each job's cpuset is made")
    ap.add_argument("--slurm-conf", help="slurm.conf of a running cluster: scontrol answers the daemons")
    args = ap.parse_args()
    if args.slurm_conf:
        os.environ["SLURM_CONF"] = args.slurm_conf  # the daemons (which run the fast path's steps) inherit it
    py = str(BIN / "python3")
    for exe in ("gpuperf-prolog", "gpuperf-taskprolog"):
        if not (BIN / exe).exists():
            print(f"{BIN / exe} not found: run with the venv's python that has gpuperf installed", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp(prefix="gpuperf-hookbench-"))
    cgroups = tmp / "cgroup"
    # the prolog plans on the two-socket fixture (one NUMA node would need no job CPUs at all)
    from gpuperf.topology import load_node

    topo = tmp / "hgx-h100-2s.json"
    topo.write_text(json.dumps(load_node(str(ROOT / "tests/data/nodes/hgx-h100-2s"), health=False).topology))
    extra = f'[checks]\ndrain = false\n[affinity]\ncgroup_root = "{cgroups}"\ntopology_file = "{topo}"'
    daemons = {"": current_daemon(extra)}
    load0 = os.getloadavg()
    try:
        if args.baseline:
            daemons["baseline"] = baseline_daemon(Path(args.baseline), extra)
        configs = {}
        for which, dd in daemons.items():
            full_cfg = dd.base / "full-path.toml"
            full_cfg.write_text(dd.cfg_path.read_text().replace("[daemon]", "[daemon]\nprolog_fast_path = false", 1))
            configs[which] = {"prolog": dd.cfg_path, "prolog-full": full_cfg}
        # one config (and so one config cache beside it) per checkout: hooks of two versions sharing a config
        # would each find the other's cache key and parse the TOML on every run
        task_envs = {}
        for which in daemons:
            (tmp / (which or "current")).mkdir()
            task_envs[which] = prepare(tmp / (which or "current"), str(ROOT / "tests/data/nodes/hgx-h100-2s"))
        rows: dict[str, tuple[list[str], str]] = {
            "bare": ([py, "-c", "pass"], ""),
            "fast": ([str(BIN / "gpuperf-prolog")], "prolog"),
            "full": ([str(BIN / "gpuperf-prolog")], "prolog-full"),
            "task": ([str(BIN / "gpuperf-taskprolog")], "task"),
        }
        if args.baseline:
            rows["fast (baseline)"] = (baseline_hook(py, Path(args.baseline), "gpuperf-prolog", "gpuperf.prolog"), "prolog")
            rows["full (baseline)"] = (baseline_hook(py, Path(args.baseline), "gpuperf-prolog", "gpuperf.prolog"),
                                       "prolog-full")
            rows["task (baseline)"] = (baseline_hook(py, Path(args.baseline), "gpuperf-taskprolog",
                                                     "gpuperf.prolog.task"), "task")
        wall: dict[str, list[float]] = {k: [] for k in rows}
        cpu: dict[str, list[float]] = {k: [] for k in rows}
        via: dict[str, set[str]] = {k: set() for k in rows}
        steps_ms: dict[str, list[float]] = {k: [] for k in rows}  # the prolog's steps, as its record says
        exports: dict[str, int] = {}
        job = 600000
        for r in range(args.rounds + 3):  # the first 3 rounds warm the page cache
            for label, (argv, kind) in rows.items():
                base = args.baseline if "baseline" in label else None
                dd = daemons["baseline" if base else ""]
                if kind == "task":
                    env = dict(task_envs["baseline" if base else ""])
                elif kind:
                    job += 1
                    env = prolog_env(configs["baseline" if base else ""][kind], job)
                    if args.layout == "v2-sluid":
                        env["SLURM_JOB_SLUID"] = sluid = f"S{job:013d}"
                        cpuset = cgroups / "system.slice" / "bench_slurmstepd.scope" / sluid
                        cpuset.mkdir(parents=True)
                        (cpuset / "cpuset.cpus.effective").write_text("0-7\n")
                    else:
                        cpuset = cgroups / "cpuset" / "slurm" / "uid_0" / f"job_{job}"
                        cpuset.mkdir(parents=True)
                        (cpuset / "cpuset.effective_cpus").write_text("0-7\n")
                else:
                    env = {}
                if base:
                    env["PYTHONPATH"] = base
                w, c, out, rc = timed(argv, env)
                if rc != 0:
                    print(f"{label}: exit {rc}", file=sys.stderr)
                if kind.startswith("prolog"):
                    rec = json.loads((Path(dd.run_dir) / "jobs" / str(job) / "prolog.json").read_text())
                    why = "" if rec["data"].get("via") or kind == "prolog-full" else f' ({rec["data"].get("fast_path")})'
                    via[label].add(f'{rec["data"].get("via") or "process"}{why}, CPUs from '
                                   f'{rec["data"].get("affinity", {}).get("cpus_source")}')
                    dd.finalize(job)
                    if r >= 3:
                        steps_ms[label].append(sum(st.get("ms") or 0.0 for st in rec["steps"].values()))
                elif kind == "task":
                    exports[label] = sum(line.startswith("export ") for line in out.splitlines())
                if r >= 3:
                    wall[label].append(w)
                    cpu[label].append(c)
    finally:
        for dd in daemons.values():
            dd.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    bare, bare_min = statistics.median(wall["bare"]), min(wall["bare"])
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"interpreter {py}; load average {load0[0]:.2f} at start, {load1[0]:.2f} at end; {args.rounds} rounds")
    print("| what | p50 ms | p95 ms | p50 / bare | min ms | min / bare | CPU p50 ms | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for label in rows:
        note = ", ".join(sorted(via[label])) and f"steps ran in: {', '.join(sorted(via[label]))}"
        if label in exports:
            note = f"{exports[label]} exports per task"
        if steps_ms[label]:
            note += f"; the steps p50 {statistics.median(steps_ms[label]):.1f} ms"
        p50 = statistics.median(wall[label])
        fastest = min(wall[label])
        print(f"| {label} | {p50:.1f} | {pct(wall[label], 0.95):.1f} | {p50 / bare:.2f}x | {fastest:.1f} | "
              f"{fastest / bare_min:.2f}x | {statistics.median(cpu[label]):.1f} | {note} |")
    if args.baseline:
        print("\nPaired, round by round (this checkout / the baseline): geometric mean and 95% interval, of the wall "
              "time and of the hook process's CPU time (user+sys: less moved by other work on the machine)")
        print("| hook | wall ratio | 95% interval | CPU ratio | 95% interval | rounds |")
        print("|---|---|---|---|---|---|")
        for hook in ("fast", "full", "task"):
            cells = []
            for xs in (wall, cpu):
                logs = [math.log(a / b) for a, b in zip(xs[hook], xs[f"{hook} (baseline)"]) if a > 0 and b > 0]
                m, h = statistics.fmean(logs), 1.96 * statistics.stdev(logs) / math.sqrt(len(logs))
                cells += [f"{math.exp(m):.3f}", f"[{math.exp(m - h):.3f}, {math.exp(m + h):.3f}]"]
            print(f"| {hook} | {' | '.join(cells)} | {len(wall[hook])} |")
    print(f"\nWhat the fast prolog adds to a bare interpreter start, paired per round (ms, {args.layout} cgroup layout):")
    print("| hook | mean ms | 95% interval | rounds |")
    print("|---|---|---|---|")
    for label in [k for k in rows if k.startswith("fast")]:
        d = [a - b for a, b in zip(wall[label], wall["bare"])]
        h = 1.96 * statistics.stdev(d) / math.sqrt(len(d))
        print(f"| {label} | {statistics.fmean(d):.1f} | [{statistics.fmean(d) - h:.1f}, {statistics.fmean(d) + h:.1f}] | {len(d)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
