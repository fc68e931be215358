"""Which frameworks a job's CUDA processes run, from the libraries they mapped (``/proc/PID/maps``): pure.

The evidence a recommendation in a framework's own terms needs (issue 35: ``torch.compile`` and DataLoader
workers only where PyTorch is in evidence). ``from_maps(text)`` reads the pathname column of a maps file, at most
``MAX_BYTES`` of it and ``MAX_LINES`` lines (a process maps a few thousand regions; the read is the caller's, with
its own bound and deadline), and names what it finds:

- ``torch``: ``libtorch_cuda.so`` / ``libc10_cuda.so`` (PyTorch's CUDA build), or ``libtorch*.so`` beside CUDA;
- ``jax``: jaxlib's XLA extension or a ``jax_plugins`` CUDA plugin, ``libxla*``;
- ``tensorflow``: ``libtensorflow_framework.so``;
- ``cupy``: a module under ``cupy/`` or ``cupy_backends/``;
- ``numba``: a module under ``numba/`` with CUDA mapped;
- ``cuda``: CUDA's runtime or driver library and none of the above (a plain CUDA program, or one whose framework
  gpuperf does not name).

``summary["frameworks"]``: the sorted union over the job's CUDA processes; None where nothing was read (the
diagnosis then words its advice neutrally).
"""

from __future__ import annotations

import re
from typing import Iterable

MAX_BYTES = 4 << 20     # maps of a large PyTorch process: ~1-2 MB (a few thousand regions of ~150 bytes)
MAX_LINES = 50000
KNOWN = ("torch", "jax", "tensorflow", "cupy", "numba", "cuda")

_RULES: tuple[tuple[str, re.Pattern], ...] = (
    ("torch", re.compile(r"/lib(?:torch_cuda|c10_cuda)\.so|/torch/lib/libtorch\w*\.so")),
    ("jax", re.compile(r"/jaxlib/|/jax_plugins/|/libxla\w*\.so|xla_extension\.so")),
    ("tensorflow", re.compile(r"/libtensorflow(?:_framework|_cc)?\.so")),
    ("cupy", re.compile(r"/cupy(?:_backends)?/")),
    ("numba", re.compile(r"/numba/")),
)
_CUDA = re.compile(r"/lib(?:cudart|cuda|nvrtc|cublas)\.so")


def from_maps(text: str) -> list[str]:
    """The frameworks one process's ``/proc/PID/maps`` text names (``KNOWN``, sorted); [] when it maps no CUDA
    library and no framework."""
    found: set[str] = set()
    cuda = False
    for i, line in enumerate(text[:MAX_BYTES].splitlines()):
        if i >= MAX_LINES:
            break
        # address perms offset dev inode pathname: the path is the sixth field, and may hold spaces
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5]
        for name, rx in _RULES:
            if name not in found and rx.search(path):
                found.add(name)
        cuda = cuda or bool(_CUDA.search(path))
    if "numba" in found and not cuda:
        found.discard("numba")          # numba without CUDA is CPU code
    if not found and cuda:
        found.add("cuda")
    return sorted(found)


def union(lists: Iterable[list[str] | None]) -> list[str] | None:
    """The frameworks of several processes (or nodes) as one sorted list; None when none of them was read."""
    read = [x for x in lists if isinstance(x, list)]
    if not read:
        return None
    out = {str(n) for x in read for n in x if n in KNOWN}
    if len(out) > 1:
        out.discard("cuda")             # a helper process without a framework beside one with it
    return sorted(out)


def of(summary: dict) -> list[str] | None:
    """A summary's frameworks (``summary["frameworks"]``), None when not known."""
    fw = summary.get("frameworks")
    return [x for x in fw if isinstance(x, str)] if isinstance(fw, list) else None
