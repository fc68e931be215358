"""One root object for every sysfs/procfs read, so a recorded node (``DIR/sys``, ``DIR/proc``) can stand in.

Readers never raise on a missing, unreadable or truncated file: they return ``None`` and the
caller reports the value as unknown. When a ``log`` callable is given, every access is reported
to it (``kind``, live absolute path) so the recorder can copy exactly what discovery read.
"""

from __future__ import annotations

import os
import re
from typing import Callable

# kind is one of: "file", "dir" (listed), "link" (readlink/realpath), "exists"
AccessLog = Callable[[str, str], None]

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def is_bdf(name: str) -> bool:
    """True for a PCI address in sysfs form (``0000:18:00.0``)."""
    return bool(_BDF.match(name))


class Root:
    """A filesystem root holding ``sys/`` (and ``proc/``): ``/`` for the live node or a recorded DIR."""

    def __init__(self, base: str = "/", log: AccessLog | None = None):
        self.base = os.path.abspath(base or "/")
        self.live = self.base == "/"
        self._prefix = "" if self.live else self.base
        self._log = log

    def path(self, *parts: str) -> str:
        """Absolute path of ``parts`` (e.g. ``"sys/class/net"``) under this root."""
        # plain concatenation: this runs for every read (hundreds per prolog), os.path.join is 3x slower
        return self._prefix + "/" + "/".join(parts).lstrip("/")

    def _note(self, kind: str, p: str) -> None:
        if self._log is not None:
            self._log(kind, p)

    def read_bytes(self, *parts: str) -> bytes | None:
        """Raw bytes of a file, or None when it cannot be read."""
        p = self.path(*parts)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError:
            return None
        self._note("file", p)
        return data

    def read(self, *parts: str) -> str | None:
        """A text file stripped of surrounding whitespace, or None (missing, unreadable, not text)."""
        data = self.read_bytes(*parts)
        if data is None:
            return None
        try:
            return data.decode("utf-8").strip()
        except UnicodeDecodeError:
            return None

    def read_int(self, *parts: str, base: int = 10) -> int | None:
        """A file holding one integer (decimal, or ``0x..`` with base 16), or None."""
        text = self.read(*parts)
        if text is None:
            return None
        try:
            return int(text, base)
        except ValueError:
            return None

    def listdir(self, *parts: str) -> list[str]:
        """Sorted entries of a directory; empty when it does not exist."""
        p = self.path(*parts)
        try:
            names = sorted(os.listdir(p))
        except OSError:
            return []
        self._note("dir", p)
        return names

    def exists(self, *parts: str) -> bool:
        """Whether the path exists (followed through links)."""
        p = self.path(*parts)
        ok = os.path.exists(p)
        if ok:
            self._note("exists", p)
        return ok

    def realpath(self, *parts: str) -> str | None:
        """Resolved path of a link inside this root, or None when there is no such link."""
        p = self.path(*parts)
        if not os.path.lexists(p):
            return None
        real = os.path.realpath(p)
        # a recorded target directory may be missing (git keeps no empty directories): the link still tells where
        if not (self.live or real == self.base or real.startswith(self.base + "/")):
            return None
        if self.live and not os.path.exists(real):
            return None
        self._note("link", p)
        return real

    def link_name(self, *parts: str) -> str | None:
        """Basename of where a link points (``device/driver`` -> ``nvidia``), or None."""
        p = self.path(*parts)
        try:
            target = os.readlink(p)
        except OSError:
            return None
        self._note("link", p)
        return os.path.basename(target.rstrip("/")) or None

    def rel(self, abspath: str) -> str:
        """``abspath`` relative to this root, without a leading slash (``sys/devices/...``)."""
        return os.path.relpath(abspath, self.base)


def parse_cpulist(text: str | None) -> list[int] | None:
    """Kernel CPU list format (``0-3,8,10-11``) -> sorted ints; None for missing or malformed text."""
    if text is None:
        return None
    text = text.strip()
    if text == "":
        return []
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                a, b = int(lo), int(hi)
                if a > b or b - a > 65536:
                    return None
                cpus.update(range(a, b + 1))
            else:
                cpus.add(int(part))
    except ValueError:
        return None
    return sorted(cpus)


def numa_or_none(value: int | None) -> int | None:
    """sysfs ``numa_node``: -1 (no NUMA information) and missing become None."""
    return value if value is not None and value >= 0 else None
