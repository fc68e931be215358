"""The quick-start demo: a real single-node Slurm cluster with gpuperf wired in, sample jobs, their reports.

Run by ``packaging/demo.sh`` after the install. The node has 4 fake GPUs (character devices); the
node daemon replays GPU recordings made on real H100/H200 GPUs (``tests/data/recordings/``), one
recording per job, so each job shows a different bottleneck. Everything else is real: Slurm's
Prolog/TaskProlog/Epilog/EpilogSlurmctld run gpuperf, the SPANK plugin pins tasks, the summary
travels to the controller's collector authenticated with munge and lands in sacct's AdminComment.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "cluster"))

from slurmcluster import SlurmCluster  # noqa: E402

GPUPERF = "/opt/gpuperf/venv/bin/gpuperf"
RECORDINGS = REPO / "tests" / "data" / "recordings"
# (job name, recording, GPUs): what each sample job "did" on its GPUs
JOBS = [
    ("train-matmul", "matmul_bf16", 1),
    ("stencil-memory", "membound", 1),
    ("tiny-kernels", "tiny_kernels", 1),
    ("slow-loader", "input_bound", 1),
    ("forgot-the-gpu", "idle", 1),
    ("allreduce-4gpu", "allreduce", 4),
]
JOB_SECONDS = 25


def banner(text: str) -> None:
    print(f"\n\033[1m=== {text}\033[0m", flush=True)


def show(c: SlurmCluster, *argv: str, user: str | None = None) -> None:
    """Run a command with the demo cluster's environment and print it like a terminal would."""
    who = f"{user}$" if user else "#"
    print(f"{who} {' '.join(a if a.startswith(('/', '-')) or ' ' not in a else repr(a) for a in argv)}", flush=True)
    cmd = list(argv)
    if user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    subprocess.run(cmd, env=c.env, check=False)


def start_daemon(c: SlurmCluster, backend: str) -> subprocess.Popen:
    """The node daemon with a replay backend; waits until it answers."""
    log = open(c.dir / "log" / "demo-daemon.log", "a")
    p = subprocess.Popen([GPUPERF, "daemon", "--foreground", "--backend", backend], env=c.env,
                         stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = subprocess.run([GPUPERF, "top", "--once"], env=c.env, capture_output=True, text=True)
        if r.returncode == 0:
            return p
        if p.poll() is not None:
            raise SystemExit(f"gpuperf daemon exited; see {c.dir}/log/demo-daemon.log")
        time.sleep(0.5)
    return p


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()


def main() -> int:
    c = SlurmCluster("demo")
    banner("starting a single-node Slurm 22.05 cluster (munge, MariaDB, slurmdbd, slurmctld, slurmd) on loopback")
    t = c.up()
    print(f"up in {sum(t.values()):.1f} s; SLURM_CONF={c.env['SLURM_CONF']} GPUPERF_CONFIG={c.env['GPUPERF_CONFIG']}")
    cfg = c.gpuperf_config()
    cfg.setdefault("daemon", {}).update(user_socket_dir=str(c.dir / "run" / "daemon-user"), metrics_port=0)
    cfg.setdefault("controller", {}).update(merge_wait_s=10.0)
    c.write_gpuperf_config(cfg)
    plugstack = c.dir / "plugstack.conf"
    spank = Path("/opt/gpuperf/lib/gpuperf_spank.so")
    if spank.exists() and str(spank) not in plugstack.read_text():
        plugstack.write_text(plugstack.read_text() + f"optional {spank} run_dir={c.run_dir}\n")

    banner("the node gpuperf sees (a recorded 2-socket node with 4 L40S GPUs)")
    show(c, GPUPERF, "topology")
    banner("its health checks (what the prolog runs before every job)")
    show(c, GPUPERF, "check")
    banner("the environment a job gets there, and why")
    show(c, GPUPERF, "env", "--explain")

    collector = subprocess.Popen([GPUPERF, "daemon", "--controller"], env=c.env,
                                 stdout=open(c.dir / "log" / "demo-collector.log", "a"), stderr=subprocess.STDOUT)
    jobs: list[tuple[str, int]] = []
    try:
        for name, workload, gpus in JOBS:
            files = sorted(glob.glob(str(RECORDINGS / f"{workload}-*.jsonl.gz")))
            if not files:
                print(f"(no recording for {workload}; skipped)")
                continue
            banner(f"job {name}: sbatch --gres=gpu:{gpus} as {c.user}; the daemon replays {Path(files[0]).name}")
            daemon = start_daemon(c, f"replay:{files[0]}?loop=1&gpus=4")
            try:
                job = c.sbatch(f"#!/bin/sh\necho \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES "
                               f"NCCL/OMP: $OMP_NUM_THREADS $PYTORCH_CUDA_ALLOC_CONF\"\n"
                               f"grep Cpus_allowed_list /proc/self/status\nsleep {JOB_SECONDS}\n",
                               f"--gres=gpu:{gpus}", f"--job-name={name}", user=c.user)
                jobs.append((name, job))
                time.sleep(8)
                print(f"live, while job {job} runs:")
                show(c, GPUPERF, "top", "--once")
                state = c.wait(job, timeout=JOB_SECONDS + 60)
                print(f"job {job} {state}; its output:\n{c.job_output(job)}")
            finally:
                stop(daemon)
        time.sleep(3)
        ids = ",".join(str(j) for _, j in jobs)
        banner("the accounting records: sacct -o AdminComment (written after each job by gpuperf)")
        for _, job in jobs:
            c.wait_sacct(job, fields=("JobID", "AdminComment%80"), timeout=30)
        show(c, "/usr/bin/sacct", "-X", "-j", ids, "-o", "JobID,JobName%15,User,State,AdminComment%110")
        for name, job in jobs:
            banner(f"gpuperf report {job}   ({name})")
            show(c, GPUPERF, "report", str(job), user=c.user)
        html = Path("/tmp/gpuperf-demo-report.html")
        show(c, GPUPERF, "report", str(jobs[0][1]), "--html", str(html))
        banner("the admin's list of jobs, by wasted GPU-hours")
        show(c, GPUPERF, "jobs", "--sort", "waste")
        print(f"\nHTML report with charts: {html}\nCluster left running: SLURM_CONF={c.env['SLURM_CONF']}; "
              f"stop it with: tests/cluster/cluster.sh down demo")
    finally:
        stop(collector)
    return 0


if __name__ == "__main__":
    sys.exit(main())
