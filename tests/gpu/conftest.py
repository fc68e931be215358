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
