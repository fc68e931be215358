"""Record the live node into DIR: exactly the sysfs/procfs entries discovery reads, plus gpus.json and net.json.

Discovery runs once against the live root with an access log; every file, directory listing and
link it touched is mirrored into ``DIR`` (links stay relative links, so ``DIR/sys`` resolves like
``/sys``). Standard library and NVML only: it must run on a bare GPU machine.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from gpuperf import __version__
from gpuperf.topology import GPUS_JSON, netaddr, nvmlsnap
from gpuperf.topology.discover import discover
from gpuperf.topology.sysfs import Root


class RecordError(Exception):
    """The destination cannot take a recording."""


class _Mirror:
    """Copies live paths into ``dest``, keeping directory structure and symbolic links."""

    def __init__(self, dest: str):
        self.dest = os.path.abspath(dest)
        self.done: set[tuple[str, str]] = set()

    def out(self, live: str) -> str:
        return self.dest + live

    def add(self, kind: str, live: str) -> None:
        if (kind, live) in self.done:
            return
        self.done.add((kind, live))
        real = self._walk(live)
        if kind == "file":
            self._copy(real)
        elif kind == "dir":
            os.makedirs(self.out(real), exist_ok=True)
            for child in os.listdir(real):
                c = os.path.join(real, child)
                if os.path.islink(c):
                    self._link(c)
                elif os.path.isdir(c):
                    os.makedirs(self.out(c), exist_ok=True)
        elif os.path.isdir(real):
            os.makedirs(self.out(real), exist_ok=True)

    def _walk(self, live: str) -> str:
        """Mirror every link along ``live``; the resolved live path."""
        cur = "/"
        for comp in live.strip("/").split("/"):
            nxt = os.path.join(cur, comp)
            if os.path.islink(nxt):
                self._link(nxt)
                cur = os.path.realpath(nxt)
            else:
                cur = nxt
        return cur

    def _link(self, link: str) -> None:
        dst = self.out(link)
        if not os.path.lexists(dst):
            target = os.readlink(link)
            if os.path.isabs(target):
                target = os.path.relpath(target, os.path.dirname(link))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.symlink(target, dst)
        real = os.path.realpath(link)
        os.makedirs(self.out(real) if os.path.isdir(real) else os.path.dirname(self.out(real)), exist_ok=True)

    def _copy(self, real: str) -> None:
        try:
            with open(real, "rb") as f:
                data = f.read()
        except OSError:
            return
        os.makedirs(os.path.dirname(self.out(real)), exist_ok=True)
        with open(self.out(real), "wb") as f:
            f.write(data)


def _write_json(path: str, obj: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def record(dest: str) -> dict[str, Any]:
    """Record the live node into ``dest`` (absent or empty directory); returns the topology it saw."""
    dest = os.path.abspath(dest)
    if os.path.isdir(dest) and os.listdir(dest):
        raise RecordError(f"{dest} is not empty; record into a new directory")
    os.makedirs(dest, exist_ok=True)
    mirror = _Mirror(dest)
    accesses: list[tuple[str, str]] = []
    host = socket.gethostname()
    snap = nvmlsnap.snapshot(health=True, how=f"gpuperf {__version__} topology --record on {host}")
    topo = discover(Root("/", log=lambda kind, p: accesses.append((kind, p))), snap, source="live")
    for kind, p in accesses:
        try:
            mirror.add(kind, p)
        except OSError:
            continue  # a file that vanished or cannot be read stays out; discovery reports it unknown
    _write_json(os.path.join(dest, GPUS_JSON), snap)
    _write_json(os.path.join(dest, netaddr.NET_JSON), {"ipv4": netaddr.ipv4_live()})
    return topo
