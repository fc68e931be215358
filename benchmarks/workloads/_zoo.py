"""Shared loop of the zoo workloads (``zoo_*.py``, issue 30): time a step, count its own work, report it.

Each zoo workload declares ``LABEL`` (what it is: expected class, datatype, kernel kind, framework,
advice that would contradict it; read by ``benchmarks/zoo_matrix.py`` without importing the script)
and reports what it did through ``_common.report``: ``tflops`` (tera operations/s it issued: FLOPs, or
integer ops for int8), ``gbps`` (DRAM bytes it read and wrote itself, counted once), ``pcie_gbps``
(host<->device bytes), and the timed loop's window ``t_start``/``t_end`` (``t_switch`` where a start-up
phase precedes the timed work, ``t_proc`` the script's own start).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from _common import args, report, window

T_PROC = time.time()       # the job's own start, before its imports


def cli(doc: str, **extra: tuple[type, object, str]):
    """``--seconds`` (timed work) plus workload options."""
    return args(doc, **extra)


def timed(name: str, seconds: float, step: Callable[[], Any], sync: Callable[[Any], None], *,
          flops: float = 0.0, nbytes: float = 0.0, pcie_bytes: float = 0.0, batch: int = 1, warm: int = 2,
          **extra: Any) -> dict[str, float]:
    """Run ``step`` in batches for ``seconds`` (after ``warm`` warm-up steps), syncing after each batch.

    ``flops``/``nbytes``/``pcie_bytes`` are the work of one step; the report gives their rates over the
    timed window. Returns the figures reported.
    """
    out = None
    for _ in range(warm):
        out = step()
    sync(out)
    t0, w0, n = time.monotonic(), time.time(), 0
    while time.monotonic() - t0 < seconds:
        for _ in range(batch):
            out = step()
        sync(out)
        n += batch
    dt, w1 = time.monotonic() - t0, time.time()
    figs: dict[str, Any] = {"steps": n}
    if flops:
        figs["tflops"] = round(flops * n / dt / 1e12, 3)
    if nbytes:
        figs["gbps"] = round(nbytes * n / dt / 1e9, 2)
    if pcie_bytes:
        figs["pcie_gbps"] = round(pcie_bytes * n / dt / 1e9, 2)
    figs.update(extra)
    figs.update(window(w0, w1))
    figs["t_proc"] = round(T_PROC, 3)
    report(name, **figs)
    return figs


def torch_sync(_: Any = None) -> None:
    """Wait for the GPU (PyTorch)."""
    import torch

    torch.cuda.synchronize()


def cupy_sync(_: Any = None) -> None:
    """Wait for the GPU (CuPy)."""
    import cupy

    cupy.cuda.Device().synchronize()


def jax_sync(x: Any) -> None:
    """Wait for a JAX result."""
    if x is not None:
        x.block_until_ready()


def module_macs(model: Any, *inputs: Any) -> int:
    """Multiply-accumulates of ``model``'s Conv2d and Linear layers in one forward pass on ``inputs``, counted by
    forward hooks from each layer's output size (out elements x in-channels/groups x kernel area; a layer a
    fused path bypasses is not seen, so count such models by formula)."""
    import torch

    total = [0]

    def hook(mod: Any, _inp: Any, out: Any) -> None:
        if isinstance(mod, torch.nn.Conv2d):
            kh, kw = mod.kernel_size
            total[0] += out.numel() * (mod.in_channels // mod.groups) * kh * kw
        else:
            total[0] += out.numel() * mod.in_features

    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return total[0]


def cpu_busy(seconds: float) -> float:
    """Burn one CPU for ``seconds`` the way start-up does (imports, parsing, data preparation)."""
    end, acc = time.monotonic() + seconds, 0.0
    while time.monotonic() < end:
        acc += sum(i * 0.5 for i in range(2000))
    return acc
