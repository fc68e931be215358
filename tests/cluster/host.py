"""What the test cluster needs from this machine: packages, the job user, munged, and its processes.

Machine-wide setup is serialised with a lock file (instances may start together); processes are
recognised by a marker in their environment, so an instance only ever signals its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

# faketime (libfaketime): a slurmctld whose clock is off, for gpuperf doctor's clock check (restart_slurmctld)
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server", "faketime")
TEST_USER = "gpuperf-user"
SBIN = Path("/usr/sbin")
GLOBAL_LOCK = Path("/tmp/gpuperf-slurm-setup.lock")
MARKER = "GPUPERF_TEST_CLUSTER_DIR"  # in every daemon's environment: whose it is


class ClusterError(RuntimeError):
    """The test cluster could not be set up or used; the message says which step."""


def can_run() -> str | None:
    """Why this machine cannot host the test cluster, or None when it can."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root"
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
    with locked(GLOBAL_LOCK):
        missing = [p for p in PACKAGES if "install ok installed" not in
                   sh(["dpkg-query", "-W", "-f=${Status}", p], check=False).stdout]
        if not missing:
            return False
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        sh(["apt-get", "update", "-q"], timeout=600, env=env)
        sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], timeout=900, env=env)
        return True


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
        mu = pwd.getpwnam("munge")
        os.chown(run, mu.pw_uid, mu.pw_gid)
        run.chmod(0o755)
        sh(["runuser", "-u", "munge", "--", SBIN / "munged"])
        wait_for(_munge_ok, 10, "munged to answer")


def _munge_ok() -> bool:
    try:
        enc = subprocess.run(["/usr/bin/munge", "-n"], capture_output=True, timeout=5)
        if enc.returncode != 0:
            return False
        return subprocess.run(["/usr/bin/unmunge"], input=enc.stdout, capture_output=True, timeout=5).returncode == 0
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
