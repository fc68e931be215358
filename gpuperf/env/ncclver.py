"""Which NCCL a job will load, as far as a hook can see: cheap file-name checks, no library loading."""

from __future__ import annotations

import os

# parse_version from env.plan, not env.policy; no glob, re or typing for the libnccl.so.* names: the
# TaskProlog asks in every task whose LD_LIBRARY_PATH is set, and those imports would double its cost
from gpuperf.env.plan import parse_version

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# where a node's own NCCL lives (Debian/Ubuntu, RHEL, CUDA toolkit, NVIDIA's tarball)
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/cuda/lib64", "/usr/local/nccl/lib", "/opt/nccl/lib")
SONAME_PREFIX = "libnccl.so."
_DISTINFO = r"nvidia_nccl_cu\d+-(\d+\.\d+\.\d+)"
Version = tuple[int, int, int]


def soname_version(name: str) -> Version | None:
    """(X, Y, Z) of a file named ``libnccl.so.X.Y.Z`` (digits only); None for any other name."""
    if not name.startswith(SONAME_PREFIX):
        return None
    parts = name.rpartition(SONAME_PREFIX)[2].split(".")  # the last one, as the regex search it replaced
    if len(parts) != 3 or not all(p.isdecimal() for p in parts):
        return None
    return parse_version(".".join(parts))


def nccl_in_dirs(dirs: list[str], label: str, listing: Listing | None = None) -> tuple[Version | None, str | None]:
    """The newest ``libnccl.so.X.Y.Z`` in these directories, and where it was found."""
    best: tuple[Version, str] | None = None
    for d in dirs:
        try:
            names = listing.listdir(d) if listing is not None else os.listdir(d)
        except OSError:  # absent, not a directory, unreadable: nothing found there
            continue
        for name in names:
            v = soname_version(name)
            if v and (best is None or v > best[0]):
                best = (v, f"{label} {os.path.join(d, name)}")
    return best if best else (None, None)


def nccl_from_env(environ: Mapping[str, str], listing: Listing | None = None) -> tuple[Version | None, str | None]:
    """The job's NCCL as its environment shows it: NCCL_VERSION (NGC images), LD_LIBRARY_PATH, conda, venv wheel.

    Best effort: a NCCL inside a container image, or in a venv activated only later by the job
    script, cannot be seen from a TaskProlog. ``listing``: what the task itself saw in those directories
    (the daemon answering a TaskProlog's request must not list what a root process may read and the
    job's user may not); None: list them here.
    """
    v = parse_version(environ.get("NCCL_VERSION"))
    if v:
        return v, "NCCL_VERSION in the job's environment"
    dirs = [d for d in (environ.get("LD_LIBRARY_PATH") or "").split(":") if d]
    if dirs:
        v, src = nccl_in_dirs(dirs, "LD_LIBRARY_PATH:", listing)
        if v:
            return v, src
    if environ.get("CONDA_PREFIX"):
        v, src = nccl_in_dirs([os.path.join(environ["CONDA_PREFIX"], "lib")], "conda:", listing)
        if v:
            return v, src
    venv = environ.get("VIRTUAL_ENV")
    if venv:
        import re  # a venv's wheels (the rarer case)

        names = listing.wheels if listing is not None else venv_wheels(venv)
        for name in sorted(names, reverse=True):
            m = re.search(_DISTINFO, name)
            if m:
                return parse_version(m.group(1)), f"venv wheel {name}"
    return None, None


def venv_wheels(venv: str) -> list[str]:
    """Names of the NCCL wheels' dist-info directories in a venv's site-packages."""
    import glob  # a pattern over two directory levels

    pat = os.path.join(glob.escape(venv), "lib", "python3*", "site-packages", "nvidia_nccl_cu*.dist-info")
    return [os.path.basename(p) for p in glob.glob(pat)]


class Listing:
    """What a task listed itself: directory -> its ``libnccl.so.*`` names, and its venv's NCCL wheels."""

    __slots__ = ("dirs", "wheels")

    def __init__(self, dirs: Mapping[str, list[str]], wheels: list[str]):
        self.dirs, self.wheels = dict(dirs), list(wheels)

    def listdir(self, d: str) -> list[str]:
        """The names seen in ``d``; OSError when the task could not list it."""
        if d not in self.dirs:
            raise FileNotFoundError(d)
        return self.dirs[d]


def nccl_system() -> tuple[Version | None, str | None]:
    """The node's own NCCL (what a prolog can see; a job may bring another)."""
    return nccl_in_dirs(list(SYSTEM_LIB_DIRS), "system")
