"""The test cluster on this machine's real GPUs with gpuperf wired in as an admin would (shared by the GPU
acceptance suite, tests/gpu/, and benchmarks/gpu_job_cost.py): the node daemon on the ``nvml`` backend,
the controller service (collector), the SPANK plugin, the fleet probe; and why a machine cannot run it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

try:
    from cluster.host import can_run
    from cluster.slurmcluster import ClusterError, SlurmCluster, real_gpu_files
except ImportError:  # tests/ became a package
    from tests.cluster.host import can_run
    from tests.cluster.slurmcluster import ClusterError, SlurmCluster, real_gpu_files

REPO = Path(__file__).resolve().parents[2]
PREFIX = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf")
GPUPERF = f"{PREFIX}/venv/bin/gpuperf"

def torch_python() -> str | None:
    """A Python with PyTorch and CUDA for the jobs: $GPUPERF_TORCH_PYTHON, else the first that imports torch."""
    cands = [os.environ.get("GPUPERF_TORCH_PYTHON", ""), "/opt/torch/.venv/bin/python3", shutil.which("python3") or ""]
    for py in filter(None, cands):
        try:
            p = subprocess.run([py, "-c", "import torch; assert torch.cuda.is_available()"], capture_output=True,
                               timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0:
            return py
    return None


def why_no_gpu() -> str | None:
    """Why the GPU suite cannot run here, or None when it can."""
    if not real_gpu_files():
        return "no NVIDIA GPU on this machine (no /dev/nvidiaN): the GPU acceptance suite runs on the GPU machines"
    smi = shutil.which("nvidia-smi")
    if not smi or subprocess.run([smi, "-L"], capture_output=True, timeout=60).returncode != 0:
        return "nvidia-smi -L fails: no working NVIDIA driver"
    return can_run()


def _wait_answer(c: SlurmCluster, p: subprocess.Popen, argv: list[str], what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if p.poll() is not None:
            raise ClusterError(f"{what} exited {p.returncode}; {c.dir}/log/{what}.log:\n"
                               + (c.dir / "log" / f"{what}.log").read_text(errors="replace")[-3000:])
        if subprocess.run(argv, env=c.env, capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(0.5)
    raise ClusterError(f"{what} did not answer in {timeout:.0f} s")


def wait_admincomment(c: SlurmCluster, job: int, state: str, timeout: float = 60.0) -> dict[str, str]:
    """The job's sacct row once its AdminComment is written (the collector writes it after the merge, which
    can be seconds after accounting shows the job ended); the last row read when the time runs out."""
    end = time.monotonic() + timeout
    row = c.wait_sacct(job, state=state, fields=("JobID", "AdminComment%400"), timeout=timeout)
    while "class=" not in row.get("AdminComment", "") and time.monotonic() < end:
        time.sleep(0.5)
        row = c.sacct(job, ("State", "JobID", "AdminComment%400"))
    return row


def configure(c: SlurmCluster, py: str, probe_every_s: float = 0.0) -> None:
    """gpuperf as an admin sets it up on a GPU node: NVML sampling, the collector, the fleet probe."""
    cfg = c.gpuperf_config()
    cfg["daemon"].update(backend="nvml", interval_s=0.5, user_socket_dir=str(c.dir / "run" / "daemon-user"))
    # the job's summary reaches the controller before EpilogSlurmctld writes AdminComment
    cfg["controller"]["merge_wait_s"] = 15.0
    cfg["fleet"] = {"probe_python": py, "probe_every_s": probe_every_s, "probe_timeout_s": 120.0}
    c.write_gpuperf_config(cfg)


def start_services(c: SlurmCluster) -> list[subprocess.Popen]:
    """The controller service and the node daemon, each answering before this returns."""
    procs = []
    for what, argv, probe in (("collector", [GPUPERF, "daemon", "--controller"], None),
                              ("daemon", [GPUPERF, "daemon", "--foreground"], [GPUPERF, "top", "--once"])):
        log = open(c.dir / "log" / f"{what}.log", "ab")
        p = subprocess.Popen(argv, env=c.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        if probe:
            _wait_answer(c, p, probe, what)
        else:
            time.sleep(2)
            if p.poll() is not None:
                raise ClusterError(f"{what} exited {p.returncode}: see {c.dir}/log/{what}.log")
    return procs


def stop_services(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def with_spank(c: SlurmCluster) -> str:
    """plugstack.conf with gpuperf's SPANK plugin (the installed one); returns the text it replaced."""
    plugstack = c.dir / "plugstack.conf"
    saved = plugstack.read_text()
    spank = Path(PREFIX) / "lib" / "gpuperf_spank.so"
    if not spank.exists():
        raise ClusterError(f"{spank} missing: packaging/build-spank.sh builds it")
    plugstack.write_text(saved + f"required {spank} run_dir={c.run_dir}\n")
    return saved


def bring_up(name: str, py: str, probe_every_s: float = 0.0) -> tuple[SlurmCluster, str, list[subprocess.Popen]]:
    """Cluster up on the real GPUs, SPANK plugin in, gpuperf configured, the workloads where the job user reads
    them, daemon and collector answering; returns (cluster, plugstack text to restore, services)."""
    c = SlurmCluster(name, real_gpus=True)
    c.up()
    saved = with_spank(c)
    configure(c, py, probe_every_s)
    work = c.layout.out_dir / "workloads"  # readable by the job user wherever the checkout is
    shutil.copytree(REPO / "benchmarks" / "workloads", work, dirs_exist_ok=True)
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
    c.torch_python = py  # type: ignore[attr-defined]
    c.workloads = work  # type: ignore[attr-defined]
    return c, saved, start_services(c)


def tear_down(c: SlurmCluster, saved_plugstack: str, procs: list[subprocess.Popen]) -> None:
    """Services stopped, plugstack and gpuperf config back; the cluster down unless GPUPERF_KEEP_CLUSTER=1."""
    stop_services(procs)
    (c.dir / "plugstack.conf").write_text(saved_plugstack)
    c.reset_gpuperf_config()
    if os.environ.get("GPUPERF_KEEP_CLUSTER") != "1":
        c.down()


def nvml_processes() -> list[tuple[int, int]]:
    """(GPU index, pid) of every compute process NVML lists now (what the daemon's sampler sees)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out += [(i, int(p.pid)) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
        return out
    finally:
        pynvml.nvmlShutdown()


def watch_processes(c: SlurmCluster, job: int, seconds: float, describe: Callable[[int], dict]) -> list[dict]:
    """While ``job`` runs (at most ``seconds``): each new GPU process, ``describe(pid)`` plus its GPU."""
    seen: dict[int, dict] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end and c.job_state(job) in ("PENDING", "CONFIGURING", "RUNNING"):
        for gpu, pid in nvml_processes():
            if pid not in seen:
                seen[pid] = {"pid": pid, "gpu": gpu, **describe(pid)}
        time.sleep(1)
    return list(seen.values())
