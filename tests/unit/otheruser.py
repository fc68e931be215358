"""Run Python as another user (``nobody``) from wherever the checkout is (issue 24).

A checkout in a private directory (a CI workspace under a 0700 home, ``mktemp -d``) or a venv built
from a root-only interpreter cannot be read by that user. ``python_for`` gives it its own world-readable
temporary copy of what it imports (the ``gpuperf`` package of this checkout and the named third-party
packages) and an interpreter it may run: the base interpreter behind this venv (Debian's
``/usr/bin/python3.11``: ``packaging/install.sh`` builds every venv from ``/usr/bin/python3``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import gpuperf


def reachable_by_others(path: str) -> bool:
    """Whether any user can reach and read (or run) ``path``: o+x on every directory above it, o+r on it."""
    p = Path(path).resolve()
    for d in p.parents:
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(p).st_mode
    return bool(mode & stat.S_IROTH) and (not p.is_file() or bool(mode & stat.S_IXOTH) or p.suffix == ".py")


def interpreter() -> str:
    """The base interpreter of this venv when others may run it, else /usr/bin/python3 of the same version."""
    for exe in (os.path.realpath(sys.executable), f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"):
        if os.path.exists(exe) and reachable_by_others(exe):
            return exe
    raise RuntimeError(f"no python{sys.version_info[0]}.{sys.version_info[1]} other users may run "
                       f"({os.path.realpath(sys.executable)} is private): install Debian's python3")


def _package_dirs(name: str) -> list[Path]:
    """A top-level package's directory and its ``<dist>.libs`` sibling (vendored shared libraries)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(name)
    d = Path(list(spec.submodule_search_locations)[0])
    return [d] + sorted(d.parent.glob(f"py{name}.libs")) + sorted(d.parent.glob(f"{name}.libs"))


class OtherUserPython:
    """A world-readable copy of ``gpuperf`` (+ ``packages``) and the interpreter to run it with; a context."""

    def __init__(self, packages: tuple[str, ...] = ()):
        self.dir = Path(tempfile.mkdtemp(prefix="gpuperf-otheruser-"))
        for src in [Path(gpuperf.__file__).parent] + [d for name in packages for d in _package_dirs(name)]:
            shutil.copytree(src, self.dir / src.name, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
        for d, dirs, files in os.walk(self.dir):
            os.chmod(d, 0o755)
            for f in files:
                p = os.path.join(d, f)
                if not os.path.islink(p):
                    os.chmod(p, 0o755 if os.stat(p).st_mode & stat.S_IXUSR else 0o644)
        self.python = interpreter()
        # -s: no user site of whoever runs it; PYTHONPATH: only the copy, never the private checkout
        self.argv = [self.python, "-s"]
        self.env = {"PYTHONPATH": str(self.dir), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}

    def __enter__(self) -> "OtherUserPython":
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
