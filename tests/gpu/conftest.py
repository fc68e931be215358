"""The GPU acceptance suite's cluster: the test cluster (tests/cluster/) on this machine's real GPUs.

Skipped, with the reason, where there is no NVIDIA GPU (CI, the dev VMs) or no CUDA-capable Python
(PyTorch) for the jobs. ``gpu_cluster`` (module scope) is a single-node Slurm whose gres are the real
``/dev/nvidiaN``, with gpuperf wired in as an admin would (``gpunode.py``). Figures the tests measure
go to ``gpu_results`` and, at the end, to ``$GPUPERF_GPU_RESULTS`` (JSON) when set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpunode import bring_up, tear_down, torch_python, why_no_gpu


@pytest.fixture(scope="session")
def gpu_results():
    """Figures the suite measures, {test: {...}}; written to $GPUPERF_GPU_RESULTS at the end."""
    out: dict = {}
    yield out
    path = os.environ.get("GPUPERF_GPU_RESULTS")
    if path and out:
        Path(path).write_text(json.dumps(out, indent=1, sort_keys=True, default=str))


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


@pytest.fixture(scope="module")
def gpu_cluster(gpu_results):
    """The test cluster on the real GPUs, gpuperf fully on; torn down (machine as found) afterwards."""
    why = why_no_gpu()
    if why:
        pytest.skip(why)
    py = torch_python()
    if py is None:
        pytest.skip("no Python with PyTorch and CUDA for the jobs (set GPUPERF_TORCH_PYTHON)")
    # the daemon probes the idle node every 15 s (test_fleet_probe_...)
    c, saved, procs = bring_up(os.environ.get("GPUPERF_TEST_CLUSTER", "gpu"), py, probe_every_s=15.0)
    gpu_results.setdefault("cluster", {}).update(up_s=c.timings, gpus=list(c.layout.gpu_files), cpus=c.layout.cpus,
                                                 cgroup="v2" if c.layout.cgroup_v2 else ("v1" if c.layout.cgroup else "none"))
    try:
        yield c
    finally:
        tear_down(c, saved, procs)
