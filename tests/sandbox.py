"""Run a command as root in a throw-away copy of this machine: an overlay of / in a private mount
namespace, chrooted. Package tests install, upgrade and purge the .deb there, so they never change
the machine's /opt, /etc, /var or dpkg database (the overlay's upper directory is all they write)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path


def why_not() -> str | None:
    """Why no sandbox can be made here (None: it can)."""
    if not shutil.which("unshare") or not shutil.which("chroot"):
        return "unshare/chroot missing"
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if p.returncode == 0 else f"no mount namespace: {p.stderr.strip()}"


class Sandbox:
    """A copy-on-write root in ``base``; ``put`` copies a file in, ``run`` runs a shell command inside."""

    def __init__(self, base: Path):
        self.upper, self.work, self.root = base / "upper", base / "work", base / "root"
        for d in (self.upper, self.work, self.root):
            d.mkdir(parents=True, exist_ok=True)

    def put(self, src: str | Path, dest: str) -> str:
        """Make ``src`` appear at ``dest`` inside (written into the upper layer)."""
        target = self.upper / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        return dest

    def path(self, inside: str) -> Path:
        """Where a file the sandbox wrote or changed lies outside (the upper layer)."""
        return self.upper / inside.lstrip("/")

    def run(self, command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``sh -c command`` in the sandbox; its changes stay in the upper layer."""
        r = shlex.quote(str(self.root))
        script = (f"mount -t overlay overlay -o lowerdir=/,upperdir={shlex.quote(str(self.upper))},"
                  f"workdir={shlex.quote(str(self.work))} {r} && "
                  f"mount --bind /proc {r}/proc && mount --bind /dev {r}/dev && mount -t tmpfs tmpfs {r}/run && "
                  f"chroot {r} /bin/sh -c {shlex.quote(command)}")
        return subprocess.run(["unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script],
                              capture_output=True, text=True, timeout=timeout,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"})
