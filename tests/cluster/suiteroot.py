"""Slurm of a newer Debian suite for the test cluster: a root made with debootstrap from Debian's registry.

``GPUPERF_SLURM_SUITE=trixie`` (Slurm 24.11) or ``sid`` (26.05): the suite's slurmctld, slurmd, slurmdbd,
clients, munge, MariaDB and libslurm-dev (the SPANK plugin's headers) are installed into
``<checkout>/build/slurm-roots/<suite>`` (``debootstrap --variant=minbase``, then that suite's apt in the
root; FACTS.md). Their binaries need that suite's C library, newer than this machine's, so the cluster's
binaries are rewritten once (patchelf) to load the root's own dynamic loader and libraries: every daemon
and client then runs on this machine beside the hooks, gpuperf and the tests, with no chroot and nothing
on LD_LIBRARY_PATH (a job or hook of this machine's C library would break with it). slurmd runs
slurmstepd from its built-in path (/usr/sbin/slurmstepd): each such slurmd runs in a mount namespace of
its own where the root's slurmstepd is bound over the machine's (``stepd_argv``), so a 22.05 cluster runs
beside it. The root is built by the test run itself, once, and kept (a stamp file says it is whole).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SUITES = {"trixie": "24.11", "sid": "26.05"}  # the Slurm release each suite ships (FACTS.md)
MIRROR = os.environ.get("GPUPERF_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server", "libslurm-dev")
# the packages whose programs and libraries the cluster runs from the root
PATCHED_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server", "mariadb-server-core",
                    "mariadb-client", "mariadb-client-core", "slurm-wlm-basic-plugins", "slurm-wlm-mysql-plugin")
LIB_DIRS = ("usr/lib/x86_64-linux-gnu/slurm-wlm", "usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
STAMP = ".gpuperf-root-ready"
# a suite's Release file can be older than its Valid-Until on a machine whose clock runs ahead (seen for sid)
APT = ("apt-get", "-o", "Acquire::Check-Valid-Until=false", "-q")


class RootError(RuntimeError):
    """The suite's root could not be made; the message names the step and its output."""


def root_dir(suite: str, checkout: Path | None = None) -> Path:
    """Where the suite's root lives: under build/ of this checkout (never /etc or /var/lib)."""
    if suite not in SUITES:
        raise RootError(f"GPUPERF_SLURM_SUITE={suite!r}: one of {', '.join(SUITES)}")
    checkout = checkout or Path(__file__).resolve().parents[2]
    return checkout / "build" / "slurm-roots" / suite


def _sh(argv: list[str], timeout: float = 900, **kw) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if p.returncode != 0:
        raise RootError(f"{' '.join(argv[:6])} ... exited {p.returncode}: {(p.stderr or p.stdout)[-1500:]}")
    return p.stdout


def ready(root: Path) -> bool:
    """Whether the root was made whole (its stamp is written last)."""
    return (root / STAMP).exists()


def ensure(suite: str, root: Path | None = None) -> bool:
    """Make the suite's root when it is not whole; True when it was made now."""
    root = root or root_dir(suite)
    if ready(root):
        return False
    if not shutil.which("debootstrap") or not shutil.which("patchelf"):
        _sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap", "patchelf"],
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if root.exists():
        shutil.rmtree(root)  # a root left half made by a killed run
    root.parent.mkdir(parents=True, exist_ok=True)
    _sh(["debootstrap", "--variant=minbase", suite, str(root), MIRROR], timeout=1200)
    policy = root / "usr/sbin/policy-rc.d"  # no service starts inside the root
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    _sh(["chroot", str(root), *APT, "update"], env=env)
    _sh(["chroot", str(root), *APT, "install", "-y", "--no-install-recommends", *PACKAGES], env=env, timeout=1800)
    files = _sh(["chroot", str(root), "dpkg", "-L", *PATCHED_PACKAGES], env=env).split()
    patch(root, files)
    (root / STAMP).write_text(_sh(["chroot", str(root), "dpkg-query", "-W", "slurmctld"], env=env))
    return True


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def patch(root: Path, files: list[str]) -> None:
    """Point the packages' programs at the root's loader and libraries, and their plugins at its libraries;
    links through /etc/alternatives (absolute: the machine's) made relative inside the root."""
    interp = str(root / "lib64/ld-linux-x86-64.so.2")
    programs: list[Path] = []
    rpath = ":".join(str(root / d) for d in LIB_DIRS)
    # update-alternatives' links (slurmd -> /etc/alternatives/slurmd -> slurmd-wlm) are in no package's list
    for d in ("usr/bin", "usr/sbin"):
        for p in (root / d).iterdir():
            if p.is_symlink() and os.readlink(p).startswith("/etc/alternatives/"):
                real = os.readlink(root / os.readlink(p).lstrip("/"))
                p.unlink()
                p.symlink_to(os.path.relpath(root / real.lstrip("/"), p.parent))
    for name in files:
        p = root / name.lstrip("/")
        is_program = "/bin/" in name or "/sbin/" in name
        if p.is_symlink() or not p.is_file():
            continue
        if not _is_elf(p):
            if is_program and os.access(p, os.X_OK):
                programs.append(p)  # a script (mariadb-install-db): this machine's interpreter runs it
            continue
        argv = ["patchelf", "--force-rpath", "--set-rpath", rpath]
        if is_program:
            argv += ["--set-interpreter", interp]
        _sh([*argv, str(p)], timeout=60)
        if is_program:
            programs.append(p)
    # the programs the cluster runs, alone in one directory: the root's other programs (sed, sh ...) are not
    # rewritten and must never come first on a PATH
    links = bin_dir(root)
    if links.exists():
        shutil.rmtree(links)
    links.mkdir()
    for p in programs:
        (links / p.name).symlink_to(p)
    for alias in ("slurmd", "slurmctld", "slurmstepd"):
        if not (links / alias).exists():
            (links / alias).symlink_to(root / "usr/sbin" / f"{alias}-wlm")
    # the plugins' own libraries (libslurmfull, the root's libjson-c, hwloc, munge ...) resolve in the root too
    for lib in (root / LIB_DIRS[0]).glob("*.so*"):
        if lib.is_file() and not lib.is_symlink() and _is_elf(lib):
            _sh(["patchelf", "--force-rpath", "--set-rpath", rpath, str(lib)], timeout=60)


def bin_dir(root: Path) -> Path:
    """The directory of links to the root's rewritten programs (daemons and clients): the cluster's SBIN and BIN."""
    return root.with_name(root.name + ".bin")


CLIENTS = ("srun", "sbatch", "salloc", "scontrol", "squeue", "sinfo", "sacct", "sacctmgr", "scancel", "sstat", "sattach")


def stepd_argv(root: Path, argv: list[str]) -> list[str]:
    """``argv`` (a slurmd) run in a mount namespace of its own where the root's slurmstepd is bound over the
    machine's /usr/sbin/slurmstepd (slurmd execs it from that built-in path), and the root's clients over the
    machine's /usr/bin ones (a job's ``/usr/bin/srun`` and the hooks then talk to this release)."""
    pairs = [(root / "usr/sbin/slurmstepd-wlm", os.path.realpath("/usr/sbin/slurmstepd"))]
    pairs += [(bin_dir(root) / c, os.path.realpath(f"/usr/bin/{c}")) for c in CLIENTS
              if (bin_dir(root) / c).exists() and os.path.exists(f"/usr/bin/{c}")]
    binds = " && ".join(f'mount --bind "{src}" "{dst}"' for src, dst in pairs)
    return ["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c", f'{binds} && exec "$0" "$@"', *argv]


def client_argv(root: Path, argv: list[str]) -> list[str]:
    """``argv`` as a test runs it (``SlurmCluster.run``) in the same view: a program that calls
    ``/usr/bin/sacct`` itself (gpuperf with its default ``slurm_bin_dir``, a test's ``SacctWriter('/usr/bin')``)
    then talks to this release, as on a node that runs it."""
    return stepd_argv(root, argv)
