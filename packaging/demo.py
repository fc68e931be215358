"""The quick-start demo: a real single-node Slurm cluster with gpuperf wired in, sample jobs, their reports.

Run by ``packaging/demo.sh`` after the install. On a machine with NVIDIA GPUs and a Python with PyTorch
(``GPUPERF_TORCH_PYTHON``, else the first ``python3`` that has it) the cluster's gres are the real GPUs,
the daemon samples them through NVML and the sample jobs are real workloads
(``benchmarks/workloads/``, ``real_plan``). Elsewhere, as before: the node is the recorded 4x H200 VM
(``tests/data/nodes/h200x4-vm``) with 4 fake GPUs (character devices); the node daemon replays GPU
recordings made on real H200s (``tests/data/recordings/``), one per job and only on the GPUs the job
holds, so each job shows a different diagnosis and the node's GPU model is the recordings'. Everything else is real: Slurm's
Prolog/TaskProlog/Epilog/EpilogSlurmctld run gpuperf, the SPANK plugin pins tasks, the summary
travels to the controller's collector authenticated with munge and lands in sacct's AdminComment.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "cluster"), str(REPO / "tests"), str(REPO / "tests" / "gpu")]

from slurmcluster import SlurmCluster, real_gpu_files  # noqa: E402

PREFIX = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf")
GPUPERF = f"{PREFIX}/venv/bin/gpuperf"
RECORDINGS = REPO / "tests" / "data" / "recordings"
NODE_ROOT = REPO / "tests" / "data" / "nodes" / "h200x4-vm"
# (job name, recording's workload, GPUs the job asks for): what each sample job "did" on its GPUs
JOBS = [
    ("train-step", "train_step", 1),
    ("fp32-gemm", "gemm_fp32", 1),
    ("one-of-two-gpus", "one_busy", 2),
    ("allreduce-sockets", "allreduce_sockets", 2),
    ("allreduce-4gpu", "allreduce", 4),
]
JOB_SECONDS = 25
# real GPUs: (job name, workload script and arguments, GPUs the job asks for)
REAL_JOBS = [
    ("train-step", "train_step.py", 1),
    ("fp32-gemm", "gemm_fp32.py", 1),
    ("idle-holding-a-gpu", "idle.py --gib 2", 1),
    ("one-of-two-gpus", "one_busy.py", 2),
    ("memory-bound", "membound.py", 1),
]


def real_plan(gpus: int) -> list[tuple[str, str, int]]:
    """The real workloads that fit a node of ``gpus`` GPUs (jobs run one at a time)."""
    return [j for j in REAL_JOBS if j[2] <= gpus]


def torch_python() -> str | None:
    """A Python with PyTorch and CUDA for real workloads, or None (then the demo uses recordings)."""
    from gpunode import torch_python as find

    return find()


def node_model(root: Path = NODE_ROOT) -> str:
    """The GPU model of the demo node (its recorded NVML snapshot)."""
    return json.loads((root / "gpus.json").read_text())["gpus"][0]["name"]


def recording_model(path: Path) -> str | None:
    """The GPU model a recording was made on (its header)."""
    from gpuperf.samplers.replay import load_recording

    gpus = load_recording(str(path)).header.get("gpus") or [{}]
    return gpus[0].get("name")


def plan(model: str, recordings: Path = RECORDINGS) -> list[tuple[str, Path, int, str]]:
    """(job name, recording, GPUs, replay backend) per demo job whose workload was recorded on ``model``.

    The replay plays exactly the job's GPUs (jobs run one at a time, so Slurm gives them GPUs 0..N-1):
    no activity shows on GPUs no job holds, and a 1-GPU workload recorded on a 2-GPU machine plays
    its working GPU only.
    """
    out = []
    for name, workload, gpus in JOBS:
        files = [f for f in sorted(recordings.glob(f"{workload}-*.jsonl*")) if recording_model(f) == model]
        if files:
            out.append((name, files[0], gpus, f"replay:{files[0]}?loop=1&gpus={gpus}"))
    return out


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


def real_demo(c: SlurmCluster, py: str) -> list[tuple[str, int]]:
    """The sample jobs as real workloads on the real GPUs; the daemon samples them through NVML."""
    work = c.layout.out_dir / "workloads"  # readable by the job user wherever the checkout is
    subprocess.run(["cp", "-r", str(REPO / "benchmarks" / "workloads") + "/.", str(work)], check=False)
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=False)
    jobs: list[tuple[str, int]] = []
    daemon = start_daemon(c, "nvml")
    try:
        for name, workload, gpus in real_plan(len(c.layout.gpu_files)):
            banner(f"job {name}: sbatch --gres=gpu:{gpus} as {c.user}: {workload} on the real GPU(s)")
            job = c.sbatch(f"#!/bin/sh\necho \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES OMP_NUM_THREADS=$OMP_NUM_THREADS\"\n"
                           f"{py} {work}/{workload} --seconds {JOB_SECONDS}\n",
                           f"--gres=gpu:{gpus}", "-c4", f"--job-name={name}", user=c.user)
            jobs.append((name, job))
            time.sleep(12)
            print(f"live, while job {job} runs:")
            show(c, GPUPERF, "top", "--once")
            state = c.wait(job, timeout=JOB_SECONDS + 120)
            print(f"job {job} {state}; its output:\n{c.job_output(job)}")
    finally:
        stop(daemon)
    return jobs


def recorded_demo(c: SlurmCluster) -> list[tuple[str, int]]:
    """The sample jobs on fake GPUs, the daemon replaying a recording made on real H200s for each."""
    jobs: list[tuple[str, int]] = []
    for name, rec, gpus, backend in plan(node_model()):
        banner(f"job {name}: sbatch --gres=gpu:{gpus} as {c.user}; the daemon replays {rec.name} on its GPUs")
        daemon = start_daemon(c, backend)
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
    return jobs


def main() -> int:
    py = torch_python() if real_gpu_files() else None
    cname = os.environ.get("GPUPERF_TEST_CLUSTER", "demo")
    if py:
        c = SlurmCluster(cname, real_gpus=True)
        print(f"demo on this machine's real GPUs ({', '.join(c.layout.gpu_files)}), jobs run PyTorch from {py}")
    else:
        why = "no NVIDIA GPU here" if not real_gpu_files() else "no Python with PyTorch and CUDA here"
        print(f"demo on fake GPUs with recordings made on real H200s ({why})")
        c = SlurmCluster(cname, node_root=str(NODE_ROOT))
    banner("starting a single-node Slurm 22.05 cluster (munge, MariaDB, slurmdbd, slurmctld, slurmd) on loopback")
    t = c.up()
    print(f"up in {t['up_s']:.1f} s; SLURM_CONF={c.env['SLURM_CONF']} GPUPERF_CONFIG={c.env['GPUPERF_CONFIG']}")
    cfg = c.gpuperf_config()
    cfg.setdefault("daemon", {}).update(user_socket_dir=str(c.dir / "run" / "daemon-user"), metrics_port=0)
    cfg.setdefault("controller", {}).update(merge_wait_s=10.0)
    c.write_gpuperf_config(cfg)
    plugstack = c.dir / "plugstack.conf"
    spank = Path(f"{PREFIX}/lib/gpuperf_spank.so")
    if spank.exists() and str(spank) not in plugstack.read_text():
        plugstack.write_text(plugstack.read_text() + f"optional {spank} run_dir={c.run_dir}\n")

    banner("the node gpuperf sees" + ("" if py else f" (a recorded VM with 4 {node_model()} GPUs)"))
    show(c, GPUPERF, "topology")
    banner("its health checks (what the prolog runs before every job)")
    show(c, GPUPERF, "check")
    banner("the environment a job gets there, and why")
    show(c, GPUPERF, "env", "--explain")

    collector = subprocess.Popen([GPUPERF, "daemon", "--controller"], env=c.env,
                                 stdout=open(c.dir / "log" / "demo-collector.log", "a"), stderr=subprocess.STDOUT)
    try:
        jobs = real_demo(c, py) if py else recorded_demo(c)
        time.sleep(3)
        ids = ",".join(str(j) for _, j in jobs)
        banner("the accounting records: sacct -o AdminComment (written after each job by gpuperf)")
        for _, job in jobs:
            with contextlib.suppress(Exception):  # a job that failed has its own state: show what is there
                c.wait_sacct(job, fields=("JobID", "AdminComment%80"), timeout=30)
        show(c, str(Path(c.layout.slurm_bin) / "sacct"),
             "-X", "-j", ids, "-o", "JobID,JobName%18,User,State,AdminComment%110")
        for name, job in jobs:
            banner(f"gpuperf report {job}   ({name})")
            show(c, GPUPERF, "report", str(job), user=c.user)
        html = Path("/tmp/gpuperf-demo-report.html")
        show(c, GPUPERF, "report", str(jobs[0][1]), "--html", str(html))
        banner("the admin's list of jobs, by wasted GPU-hours")
        show(c, GPUPERF, "jobs", "--sort", "waste")
        print(f"\nHTML report with charts: {html}\nCluster left running: SLURM_CONF={c.env['SLURM_CONF']}; "
              f"stop it with: tests/cluster/cluster.sh down {cname}")
    finally:
        stop(collector)
    return 0


if __name__ == "__main__":
    sys.exit(main())
