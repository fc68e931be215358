"""What gpuperf's EpilogSlurmctld costs per job, and how long a job stays COMPLETING with and without gpuperf.

    GPUPERF_TEST_CLUSTER=NAME python benchmarks/controller_epilog_cost.py [--runs 300] [--jobs 8] [--json OUT]

1. The hook as a whole process, as slurmctld runs it: ``gpuperf-epilog-slurmctld`` (POSIX shell:
   sed, printf, mv, mkdir when missing) with a job's environment, ``--runs`` times; wall time of each
   process from fork to exit (p50/p95/max), and for comparison an empty ``/bin/sh -c exit`` and a
   bare Python interpreter (``python -I -S -c pass``), the least a Python hook could cost.
2. On the real test cluster (``tests/cluster``): ``--jobs`` one-second GPU jobs in each of three
   set-ups, the time from the batch script's last command to the first ``scontrol`` poll that no
   longer shows the job RUNNING or COMPLETING (20 ms polls): gpuperf's hooks as installed; the
   EpilogSlurmctld replaced by ``exit 0``; every gpuperf hook replaced by ``exit 0`` ("without gpuperf").
   gpuperf runs as deployed meanwhile: the node daemon (replaying a real recording) and the controller
   service with the real sacctmgr, so the node Epilog finalises and delivers for real.
The machine is shared: its load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import figures as figures_out  # benchmarks/figures.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
PREFIX = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf")


def _walls(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, check=False)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _stats(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(ms[int(len(ms) * 0.95) - 1], 2),
            "max_ms": round(ms[-1], 2)}


def hook_cost(runs: int) -> dict[str, dict[str, float]]:
    """Per-process wall time of the hook and of two references."""
    tmp = Path(tempfile.mkdtemp(prefix="gp-ctrl-hook-"))
    conf = tmp / "gpuperf.toml"
    conf.write_text(f'[general]\nrun_dir = "{tmp}/run"\nstate_dir = "{tmp}/state"\nlog_file = "{tmp}/log"\n'
                    '[controller]\nmerge_wait_s = 30.0\n')
    hook = Path(PREFIX) / "venv" / "bin" / "gpuperf-epilog-slurmctld"
    if not hook.exists():
        hook = ROOT / "packaging" / "bin" / "gpuperf-epilog-slurmctld"
    out = {}
    walls = []
    for i in range(runs):
        env = {"GPUPERF_CONFIG": str(conf), "SLURM_JOB_ID": str(100000 + i), "SLURM_JOB_NODELIST": "gpu[001-004]",
               "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1000", "SLURM_JOB_EXIT_CODE": "0"}
        walls += _walls([str(hook)], env, 1)
    out["gpuperf-epilog-slurmctld"] = _stats(walls)
    out["empty /bin/sh"] = _stats(_walls(["/bin/sh", "-c", "exit 0"], {}, runs))
    out["python -I -S -c pass"] = _stats(_walls([sys.executable, "-I", "-S", "-c", "pass"], {}, runs))
    assert len(list((tmp / "state" / "ended").glob("*.ended"))) == runs, "a notice is missing"
    shutil.rmtree(tmp)
    return out


def completing(c, jobs: int) -> list[float]:
    """ms from each job's last command to the first poll that shows it finished (not RUNNING/COMPLETING)."""
    out = []
    for _ in range(jobs):
        stamp = c.dir / "out" / f"end-{time.time_ns()}"
        job = c.sbatch(f"sleep 1\ndate +%s.%N > {stamp}\n", "--gres=gpu:1")
        while True:
            st = c.run("scontrol", "show", "job", "-o", str(job)).stdout
            state = next((t.split("=", 1)[1] for t in st.split() if t.startswith("JobState=")), "")
            if state and state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") and stamp.exists():
                done = time.time()
                break
            time.sleep(0.02)
        out.append((done - float(stamp.read_text())) * 1000)
        stamp.unlink()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()
    figures: dict = {"load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
                     "hook_process": hook_cost(args.runs)}
    from cluster.slurmcluster import SlurmCluster

    c = SlurmCluster(name=os.environ.get("GPUPERF_TEST_CLUSTER", "pytest"))
    c.up()
    hooks = c.dir / "hooks"
    saved = {p.name: p.read_text() for p in hooks.iterdir()}
    noop = "#!/bin/sh\nexit 0\n"
    # gpuperf as deployed: the node daemon (replaying a real recording) and the controller service
    cfg = c.gpuperf_config()
    rec = sorted((ROOT / "tests" / "data" / "recordings").glob("*.jsonl*"))[0]
    cfg.setdefault("daemon", {}).update(backend=f"replay:{rec}?loop=1", interval_s=0.5, metrics_port=0,
                                        user_socket_dir=str(c.dir / "run" / "daemon-user"))
    c.write_gpuperf_config(cfg)
    venv = Path(PREFIX) / "venv" / "bin"
    procs = [subprocess.Popen([str(venv / "gpuperf"), "daemon"], env=c.env, stderr=subprocess.DEVNULL),
             subprocess.Popen([str(venv / "gpuperf"), "daemon", "--controller"], env=c.env, stderr=subprocess.DEVNULL)]
    time.sleep(5)
    try:
        setups = {"gpuperf hooks": {}, "EpilogSlurmctld = exit 0": {"epilog-slurmctld": noop},
                  "no gpuperf hook (all exit 0)": {name: noop for name in saved}}
        figures["completing"] = {}
        for label, repl in setups.items():
            for name, text in saved.items():
                (hooks / name).write_text(repl.get(name, text))
            completing(c, 1)  # warm-up
            figures["completing"][label] = _stats(completing(c, args.jobs))
    finally:
        for name, text in saved.items():
            (hooks / name).write_text(text)
        for p in procs:
            p.terminate()
            p.wait(20)
        c.reset_gpuperf_config()
    figures["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    figures_out.emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
