"""Which NCCL a job will load, as far as a hook can see: cheap file-name checks, no library loading."""

from __future__ import annotations

import glob
import os
import re
from typing import Mapping

from gpuperf.env.policy import parse_version

# where a node's own NCCL lives (Debian/Ubuntu, RHEL, CUDA toolkit, NVIDIA's tarball)
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/cuda/lib64", "/usr/local/nccl/lib", "/opt/nccl/lib")
_SONAME = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")
_DISTINFO = re.compile(r"nvidia_nccl_cu\d+-(\d+\.\d+\.\d+)")
Version = tuple[int, int, int]


def nccl_in_dirs(dirs: list[str], label: str) -> tuple[Version | None, str | None]:
    """The newest ``libnccl.so.X.Y.Z`` in these directories, and where it was found."""
    best: tuple[Version, str] | None = None
    for d in dirs:
        for path in glob.glob(os.path.join(glob.escape(d), "libnccl.so.*")):
            m = _SONAME.search(path)
            v = parse_version(m.group(1)) if m else None
            if v and (best is None or v > best[0]):
                best = (v, f"{label} {path}")
    return best if best else (None, None)


def nccl_from_env(environ: Mapping[str, str]) -> tuple[Version | None, str | None]:
    """The job's NCCL as its environment shows it: NCCL_VERSION (NGC images), LD_LIBRARY_PATH, conda, venv wheel.

    Best effort: a NCCL inside a container image, or in a venv activated only later by the job
    script, cannot be seen from a TaskProlog.
    """
    v = parse_version(environ.get("NCCL_VERSION"))
    if v:
        return v, "NCCL_VERSION in the job's environment"
    dirs = [d for d in (environ.get("LD_LIBRARY_PATH") or "").split(":") if d]
    if dirs:
        v, src = nccl_in_dirs(dirs, "LD_LIBRARY_PATH:")
        if v:
            return v, src
    if environ.get("CONDA_PREFIX"):
        v, src = nccl_in_dirs([os.path.join(environ["CONDA_PREFIX"], "lib")], "conda:")
        if v:
            return v, src
    venv = environ.get("VIRTUAL_ENV")
    if venv:
        pat = os.path.join(glob.escape(venv), "lib", "python3*", "site-packages", "nvidia_nccl_cu*.dist-info")
        for path in sorted(glob.glob(pat), reverse=True):
            m = _DISTINFO.search(os.path.basename(path))
            if m:
                return parse_version(m.group(1)), f"venv wheel {os.path.basename(path)}"
    return None, None


def nccl_system() -> tuple[Version | None, str | None]:
    """The node's own NCCL (what a prolog can see; a job may bring another)."""
    return nccl_in_dirs(list(SYSTEM_LIB_DIRS), "system")
