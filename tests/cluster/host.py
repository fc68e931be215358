"""What the test cluster needs from this machine: packages, the job user, munged, and its processes.

Machine-wide setup is serialised with a lock file (instances may start together); processes are
recognised by a marker in their environment, so an instance only ever signals its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

try:
    from . import suiteroot
except ImportError:  # run as a script (cluster.sh)
    import suiteroot  # type: ignore[no-redef]

# faketime (libfaketime): a slurmctld whose clock is off, for gpuperf doctor's clock check (restart_slurmctld)
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server", "faketime")
TEST_USER = "gpuperf-user"
# Prefix mode (machines without Debian or a package registry, e.g. the GPU machines): the same Debian
# packages as .debs in GPUPERF_SLURM_DEBS, unpacked with dpkg -x into GPUPERF_SLURM_PREFIX (FACTS.md,
# "Real Slurm on the GPU machines"). Unset: apt installs them into / on Debian.
SLURM_PREFIX = Path(os.environ.get("GPUPERF_SLURM_PREFIX") or "/")
SLURM_DEBS = os.environ.get("GPUPERF_SLURM_DEBS", "")
# Suite mode: GPUPERF_SLURM_SUITE=trixie (24.11) or sid (26.05), Slurm from a debootstrap root of that
# Debian suite under build/ (suiteroot.py): prefix mode on that root, without LD_LIBRARY_PATH
SLURM_SUITE = os.environ.get("GPUPERF_SLURM_SUITE", "")
if SLURM_SUITE:
    SLURM_PREFIX = suiteroot.root_dir(SLURM_SUITE)
PREFIX_MODE = SLURM_PREFIX != Path("/")
SBIN = suiteroot.bin_dir(SLURM_PREFIX) if SLURM_SUITE else SLURM_PREFIX / "usr" / "sbin"
BIN = SBIN if SLURM_SUITE else SLURM_PREFIX / "usr" / "bin"
# slurmd runs slurmstepd from the path it was built with, whatever its own path
STEPD_LINK = Path("/usr/sbin/slurmstepd")
GLOBAL_LOCK = Path("/tmp/gpuperf-slurm-setup.lock")
MARKER = "GPUPERF_TEST_CLUSTER_DIR"  # in every daemon's environment: whose it is


class ClusterError(RuntimeError):
    """The test cluster could not be set up or used; the message says which step."""


def can_run() -> str | None:
    """Why this machine cannot host the test cluster, or None when it can."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root"
    if SLURM_SUITE:
        return None if suiteroot.ready(SLURM_PREFIX) or shutil.which("apt-get") else "no apt-get to make the suite's root"
    if PREFIX_MODE:
        if (SBIN / "slurmd-wlm").exists() or (SLURM_DEBS and list(Path(SLURM_DEBS).glob("slurmd_*.deb"))):
            return None
        return f"GPUPERF_SLURM_PREFIX={SLURM_PREFIX}: no Slurm there and no slurmd .deb in GPUPERF_SLURM_DEBS"
    try:
        osr = Path("/etc/os-release").read_text()
    except OSError:
        return "no /etc/os-release: not Debian"
    if "ID=debian" not in osr:
        return "the Slurm test cluster needs Debian (bookworm packages)"
    return None


def can_run_multi() -> str | None:
    """Why this machine cannot run a multi-node instance (network namespaces), or None when it can."""
    why = can_run()
    if why:
        return why
    probe = f"gpuperf-probe-{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        return f"cannot create network namespaces (ip netns add: {p.stderr.strip()})"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def cgroup_v1() -> bool:
    """cgroup v1 controllers are mounted (this VM: hybrid); Slurm's cgroup plugins work there."""
    return all(Path(f"/sys/fs/cgroup/{c}/cgroup.procs").exists() for c in ("freezer", "devices", "cpuset"))


def cgroup_v2(root: Path = Path("/sys/fs/cgroup")) -> bool:
    """The unified hierarchy is mounted read-write at /sys/fs/cgroup (the GPU machines); Slurm's
    cgroup/v2 plugin works there without systemd once the controllers are on (``enable_cgroup_v2``)."""
    return (root / "cgroup.controllers").exists() and os.access(root / "cgroup.subtree_control", os.W_OK)


CGROUP_V2_CONTROLLERS = ("cpuset", "cpu", "memory", "pids")


def enable_cgroup_v2(root: Path = Path("/sys/fs/cgroup")) -> list[str]:
    """Turn on the controllers slurmd's cgroup/v2 needs for child cgroups; returns what it changed.

    A cgroup with processes cannot hand controllers to children ("no internal processes"), so the
    root's processes move to ``init`` first (FACTS.md); where the controllers are on already
    (the H200 machines) nothing changes.
    """
    done: list[str] = []
    want = set(CGROUP_V2_CONTROLLERS)
    have = set((root / "cgroup.subtree_control").read_text().split())
    if not want <= have:
        init = root / "init"
        init.mkdir(exist_ok=True)
        for pid in (root / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # kernel threads stay in the root
                (init / "cgroup.procs").write_text(pid)
        (root / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(want - have)))
        done.append(f"moved the root cgroup's processes to {init}; enabled {sorted(want - have)} for children")
    sl = root / "system.slice"
    if not sl.is_dir():
        sl.mkdir()
        done.append(f"made {sl}")
    have = set((sl / "cgroup.subtree_control").read_text().split())
    if not want <= have:
        (sl / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(want - have)))
    return done


@contextlib.contextmanager
def locked(path: Path):
    """Serialise machine-wide setup (apt, useradd, munged) between instances starting together."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def sh(argv: Sequence[str], check: bool = True, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run a command, output captured; ``check``: a non-zero exit is a ClusterError with its stderr."""
    p = subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise ClusterError(f"{' '.join(map(str, argv))} exited {p.returncode}: {(p.stderr or p.stdout).strip()[-2000:]}")
    return p


def ensure_packages() -> bool:
    """Install the Debian packages that are missing; True when something was installed."""
    if PREFIX_MODE and not SLURM_SUITE:
        return ensure_prefix()
    with locked(GLOBAL_LOCK):
        made = suiteroot.ensure(SLURM_SUITE, SLURM_PREFIX) if SLURM_SUITE else False
        # a suite's root runs Slurm; munged and the MariaDB server are this machine's
        missing = [p for p in (("munge", "mariadb-server") if SLURM_SUITE else PACKAGES) if "install ok installed" not in
                   sh(["dpkg-query", "-W", "-f=${Status}", p], check=False).stdout]
        if not missing:
            return made
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        sh(["apt-get", "update", "-q"], timeout=600, env=env)
        sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], timeout=900, env=env)
        return True


def lib_dirs(prefix: Path = SLURM_PREFIX) -> list[str]:
    """The unpacked packages' library directories (prefix mode; none for a Debian install, nor for a suite's
    root, whose programs name their libraries themselves)."""
    if prefix == Path("/") or SLURM_SUITE:
        return []
    return [str(prefix / d) for d in ("usr/lib/x86_64-linux-gnu/slurm-wlm", "usr/lib/x86_64-linux-gnu",
                                      "lib/x86_64-linux-gnu")]


def plugin_dir(prefix: Path = SLURM_PREFIX) -> str:
    """Slurm's PluginDir in the prefix ('' for a Debian install: Slurm's built-in path)."""
    return "" if prefix == Path("/") else str(prefix / "usr/lib/x86_64-linux-gnu/slurm-wlm")


def ensure_prefix(prefix: Path = SLURM_PREFIX, debs: str = SLURM_DEBS) -> bool:
    """Prefix mode: ``dpkg -x`` every .deb of ``debs`` into ``prefix`` once and name the daemons as Slurm
    calls them. True when something was unpacked."""
    with locked(GLOBAL_LOCK):
        unpacked = False
        if not (prefix / "usr/sbin/slurmd-wlm").exists():
            files = sorted(Path(debs).glob("*.deb")) if debs else []
            if not files:
                raise ClusterError(f"no Slurm in {prefix} and no .debs in GPUPERF_SLURM_DEBS={debs!r}")
            prefix.mkdir(parents=True, exist_ok=True)
            for f in files:
                sh(["dpkg", "-x", f, prefix], timeout=300)
            unpacked = True
        for name in ("slurmd", "slurmctld", "slurmstepd"):  # Debian's alternatives, in the prefix
            link = prefix / "usr/sbin" / name
            if not link.exists():
                link.symlink_to(f"{name}-wlm")
        return unpacked


def ensure_stepd_link(prefix: Path = SLURM_PREFIX) -> None:
    """Prefix mode: link /usr/sbin/slurmstepd to the prefix's when the machine has none (slurmd runs it
    from its built-in path); ``remove_stepd_link`` takes it away."""
    if PREFIX_MODE and not SLURM_SUITE and not os.path.lexists(STEPD_LINK):
        STEPD_LINK.symlink_to(prefix / "usr/sbin/slurmstepd-wlm")


def remove_stepd_link(prefix: Path = SLURM_PREFIX) -> None:
    """Take away the /usr/sbin/slurmstepd link ``ensure_stepd_link`` made (never one it did not make)."""
    if PREFIX_MODE and STEPD_LINK.is_symlink() and os.readlink(STEPD_LINK) == str(prefix / "usr/sbin/slurmstepd-wlm"):
        STEPD_LINK.unlink()


def ensure_user(name: str = TEST_USER) -> pwd.struct_passwd:
    """The non-root job user (uid >= 1000), created when missing."""
    with locked(GLOBAL_LOCK):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            sh(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", "-K", "UID_MIN=1000", name])
            return pwd.getpwnam(name)


def ensure_munge() -> None:
    """One munged for every instance (the key is the machine's); started when not answering."""
    with locked(GLOBAL_LOCK):
        if _munge_ok():
            return
        run = Path("/run/munge")
        run.mkdir(parents=True, exist_ok=True)
        run.chmod(0o755)
        if PREFIX_MODE and not SLURM_SUITE:
            _start_prefix_munged()
        else:
            mu = pwd.getpwnam("munge")
            os.chown(run, mu.pw_uid, mu.pw_gid)
            sh(["runuser", "-u", "munge", "--", "/usr/sbin/munged"])
        wait_for(_munge_ok, 10, "munged to answer")


def _start_prefix_munged() -> None:
    """munged of the prefix, as root, its key and files in the prefix; socket at the default path
    (/run/munge, which libmunge's clients ask: Slurm, gpuperf's collector)."""
    etc, var = SLURM_PREFIX / "etc/munge", SLURM_PREFIX / "var/munge"
    for d in (etc, var):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
    key = etc / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
    # --force: the prefix's directories are not the ones munged vets (group-writable /tmp parents)
    sh([SBIN / "munged", "--force", f"--key-file={key}", f"--seed-file={var}/munged.seed",
        f"--log-file={var}/munged.log", f"--pid-file={var}/munged.pid"], env=prefix_env())


def prefix_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the prefix's libraries on LD_LIBRARY_PATH (prefix mode)."""
    env = dict(os.environ if env is None else env)
    dirs = lib_dirs()
    if dirs:
        env["LD_LIBRARY_PATH"] = ":".join([*dirs, *filter(None, [env.get("LD_LIBRARY_PATH", "")])])
    return env


def _munge_ok() -> bool:
    try:
        env = prefix_env()
        enc = subprocess.run([BIN / "munge", "-n"], capture_output=True, timeout=5, env=env)
        if enc.returncode != 0:
            return False
        return subprocess.run([BIN / "unmunge"], input=enc.stdout, capture_output=True, timeout=5,
                              env=env).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def wait_for(pred: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``pred`` until true; a ClusterError naming ``what`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(interval)
    raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")


def read_pid(path: Path) -> int | None:
    """The pid in a pid file; None when absent or garbled."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie, exited and not yet reaped by its parent, has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def owned(pid: int, marker: str) -> bool:
    """The process is alive and was started by this instance (its environment carries the marker)."""
    if not alive(pid):
        return False
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{MARKER}={marker}".encode() in env


def write_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file whole (tmp + rename): a daemon or hook never reads half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def timed(fn) -> float:
    """Seconds ``fn()`` took."""
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def marked(marker: str) -> list[int]:
    """Every live process started by the instance whose marker this is (daemons and their slurmstepd)."""
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and owned(int(d.name), marker)]


def terminate(pids: list[int], marker: str, timeout: float, sig: int = signal.SIGTERM) -> None:
    """Signal these processes (ours only), wait, then SIGKILL what is left."""
    pids = [p for p in pids if owned(p, marker)]
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)
    end = time.monotonic() + timeout
    while pids and time.monotonic() < end:
        pids = [p for p in pids if owned(p, marker)]
        time.sleep(0.05)
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
