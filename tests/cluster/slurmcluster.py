"""A real Slurm cluster on this machine for gpuperf's integration tests (root, Debian bookworm).

``SlurmCluster(name).up()`` installs what is missing, then starts munged (shared), a MariaDB,
slurmdbd, slurmctld and one slurmd per node, all of the instance's own (directory
``/tmp/gpuperf-slurm-<name>``, ports derived from the name), with gpuperf's hooks wired in.
``down()`` stops only the daemons this instance started (pid files, checked against the
process's environment). Several instances run side by side. See README.md.

    python tests/cluster/slurmcluster.py up|down|status [NAME] [--nodes N] [--purge]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, Iterable, Sequence

try:
    from . import slurmconf as sc
    from . import suiteroot
    from .host import (BIN, MARKER, PREFIX_MODE, SBIN, SLURM_PREFIX, SLURM_SUITE, TEST_USER, ClusterError, can_run, can_run_multi, cgroup_v1,
                       cgroup_v2, enable_cgroup_v2, ensure_munge, ensure_packages, ensure_stepd_link, ensure_user,
                       lib_dirs, locked, marked, owned, plugin_dir, read_pid, remove_stepd_link, sh, terminate, timed,
                       wait_for, write_file)
except ImportError:  # run as a script: python tests/cluster/slurmcluster.py
    import slurmconf as sc  # type: ignore[no-redef]
    import suiteroot  # type: ignore[no-redef]
    from host import (BIN, MARKER, PREFIX_MODE, SBIN, SLURM_PREFIX, SLURM_SUITE, TEST_USER, ClusterError, can_run,  # type: ignore
                      can_run_multi, cgroup_v1, cgroup_v2, enable_cgroup_v2, ensure_munge, ensure_packages,
                      ensure_stepd_link, ensure_user, lib_dirs, locked, marked, owned, plugin_dir, read_pid, remove_stepd_link, sh,
                      terminate, timed, wait_for, write_file)

__all__ = ["ClusterError", "SlurmCluster", "TERMINAL", "can_run", "can_run_multi"]
SLURM_BIN = BIN  # /usr/bin, or the prefix's (host.SLURM_PREFIX)
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED", "REQUEUED")
REPO = Path(__file__).resolve().parents[2]
DEFAULT_NODE_ROOT = REPO / "tests" / "data" / "nodes" / "pcie-l40s-2s"


def real_gpu_files(dev: Path = Path("/dev")) -> tuple[str, ...]:
    """This machine's NVIDIA GPUs as device files (/dev/nvidia0, 1, ...; not nvidiactl, nvidia-uvm)."""
    found = [f for f in dev.glob("nvidia*") if f.name[6:].isdigit() and f.is_char_device()]
    return tuple(str(f) for f in sorted(found, key=lambda f: int(f.name[6:])))


class SlurmCluster:
    """One named test-cluster instance; see README.md for the API."""

    def __init__(self, name: str = "pytest", nodes: int = 1, gpus: int = 4, node_root: str | None = None,
                 cpus: int = 16, extra_conf: str = "", real_gpus: bool = False):
        gpu_files: tuple[str, ...] = ()
        if real_gpus:  # the machine's own GPUs, CPUs and topology (gpuperf reads the real node)
            gpu_files = real_gpu_files()
            if not gpu_files:
                raise ClusterError("real_gpus: no /dev/nvidiaN on this machine")
            node_root, cpus = "", os.cpu_count() or cpus
        if node_root is None:
            node_root = str(DEFAULT_NODE_ROOT) if DEFAULT_NODE_ROOT.is_dir() else ""
        v1 = cgroup_v1()
        self.layout = sc.make_layout(name, socket.gethostname().split(".")[0], nodes=nodes, gpus=gpus, cpus=cpus,
                                     node_root=node_root, extra_conf=extra_conf, cgroup_v1=v1,
                                     cgroup_v2=not v1 and cgroup_v2(), gpu_files=gpu_files,
                                     plugin_dir=plugin_dir(), slurm_bin=str(SLURM_BIN),
                                     lib_path=":".join(lib_dirs()))
        self.real_gpus = real_gpus
        self.name = name
        self.dir = self.layout.dir
        self.user = TEST_USER
        self.timings: dict[str, float] = {}

    @classmethod
    def existing(cls, name: str) -> "SlurmCluster":
        """The instance as it was last brought up (its instance.json), for down/status from the CLI."""
        check = sc.check_name(name)
        meta = sc.ROOT / f"gpuperf-slurm-{check}" / "instance.json"
        try:
            kw = json.loads(meta.read_text())
        except (OSError, ValueError):
            kw = {}
        return cls(name, **{k: kw[k] for k in ("nodes", "gpus", "node_root", "cpus", "extra_conf", "real_gpus")
                            if k in kw})

    # ---- facts about the instance -------------------------------------------------------------

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.layout.nodes]

    @property
    def cluster_name(self) -> str:
        return self.layout.cluster_name

    @property
    def run_dir(self) -> Path:
        return self.layout.run_dir

    @property
    def gpuperf_config_path(self) -> Path:
        return self.layout.gpuperf_conf

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm or gpuperf command needs to talk to this instance."""
        env = {"SLURM_CONF": str(self.layout.slurm_conf), "GPUPERF_CONFIG": str(self.layout.gpuperf_conf),
               "PATH": ":".join(dict.fromkeys([str(sc.VENV_BIN), str(SBIN), str(SLURM_BIN), "/usr/sbin", "/usr/bin",
                                               "/sbin", "/bin"]))}
        if lib_dirs():  # Slurm unpacked in a prefix: its libraries (libslurmfull, libmunge, ...)
            env["LD_LIBRARY_PATH"] = ":".join(lib_dirs())
        return env

    def _daemon_env(self) -> dict[str, str]:
        env = _outside_env()
        env.update(self.env)
        env[MARKER] = str(self.dir)
        env["MYSQL_UNIX_PORT"] = str(self.layout.db_socket)
        return env

    def _pidfiles(self) -> dict[str, Path]:
        p = self.layout.pid_dir
        out = {"mariadbd": self.layout.db_run / "mariadbd.pid", "slurmdbd": p / "slurmdbd.pid",
               "slurmctld": p / "slurmctld.pid"}
        out.update({f"slurmd-{n}": p / f"slurmd-{n}.pid" for n in self.node_names})
        return out

    def daemons(self) -> dict[str, int | None]:
        """Each daemon of this instance and its pid when running (None: not running)."""
        out = {}
        for name, pf in self._pidfiles().items():
            pid = read_pid(pf)
            out[name] = pid if pid and owned(pid, str(self.dir)) else None
        return out

    # ---- up -------------------------------------------------------------------------------------

    def up(self, timeout: float = 60) -> dict[str, float]:
        """Start every daemon not running yet and wait for idle nodes; returns seconds per phase.

        Daemons running with an older configuration (ports, nodes) are stopped and started again.
        """
        why = can_run()
        if why:
            raise ClusterError(why)
        with locked(self._lock_path()):
            return self._up(timeout)

    def _lock_path(self) -> Path:
        # beside the directory: it exists before the directory does and survives a purge
        return self.dir.with_name(self.dir.name + ".lock")

    def _stale(self) -> bool:
        """Daemons run, but from files that no longer say what this object would write."""
        l = self.layout
        for path, text in ((l.slurm_conf, sc.slurm_conf(l)), (l.dir / "gres.conf", sc.gres_conf(l)),
                           (l.dir / "slurmdbd.conf", sc.slurmdbd_conf(l))):
            try:
                if path.read_text() != text:
                    return True
            except OSError:
                return True
        return False

    def _up(self, timeout: float) -> dict[str, float]:
        t = self.timings = {}
        t0 = time.monotonic()
        t["install_s"] = timed(ensure_packages)
        ensure_user()
        ensure_munge()
        if self.layout.cgroup_v2:
            t["cgroup_changes"] = len(enable_cgroup_v2())
        if any(self.daemons().values()) and self._stale():
            self._down(purge=False, timeout=15, restart=True)
        self._write_files()
        ensure_stepd_link()  # after the stale instance's down, which takes it away
        self._network_up()
        t["files_s"] = time.monotonic() - t0
        running = self.daemons()
        t1 = time.monotonic()
        if not running["mariadbd"]:
            self._start_mariadb()
        if not running["slurmdbd"]:
            self._start_slurmdbd()
        self._ensure_accounts()
        t["db_s"] = time.monotonic() - t1
        t2 = time.monotonic()
        if not running["slurmctld"]:
            self._start(["slurmctld"], "slurmctld")
        for n in self.layout.nodes:
            if not running[f"slurmd-{n.name}"]:
                argv = [str(SBIN / "slurmd"), "-N", n.name]
                if SLURM_SUITE:
                    argv = suiteroot.stepd_argv(SLURM_PREFIX, argv)
                if n.netns:
                    argv = ["/usr/bin/nsenter", f"--net=/run/netns/{n.netns}", *argv]
                self._start(argv, f"slurmd-{n.name}")
        wait_for(self._ctld_up, timeout, "slurmctld to answer (log/slurmctld.log)")
        self.resume_all()
        wait_for(self._nodes_idle, timeout, f"nodes {','.join(self.node_names)} idle (log/slurmd-*.log)", 0.2)
        t["slurm_s"] = time.monotonic() - t2
        t["up_s"] = time.monotonic() - t0
        return dict(t)

    def _write_files(self) -> None:
        l = self.layout
        for d, mode in ((l.dir, 0o755), (l.dir / "spool" / "ctld", 0o700), (l.log_dir, 0o755),
                        (l.pid_dir, 0o755), (l.hook_dir, 0o755), (l.run_dir, 0o755), (l.state_dir, 0o755),
                        (l.out_dir, 0o1777)):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(mode)
        for n in l.nodes:
            n.spool.mkdir(parents=True, exist_ok=True)
            n.devdir.mkdir(parents=True, exist_ok=True)
            for i in range(0 if l.real_gpus else l.gpus):
                dev = n.devdir / f"nvidia{i}"
                if not dev.is_char_device():
                    dev.unlink(missing_ok=True)
                    os.mknod(dev, 0o666 | 0o020000, os.makedev(195, i))
        write_file(l.slurm_conf, sc.slurm_conf(l))
        write_file(l.dir / "gres.conf", sc.gres_conf(l))
        write_file(l.dir / "cgroup.conf", sc.cgroup_conf(l))
        write_file(l.dir / "slurmdbd.conf", sc.slurmdbd_conf(l), 0o600)
        if not (l.dir / "plugstack.conf").exists():
            write_file(l.dir / "plugstack.conf", "# SPANK plugins of this test cluster\n")
        for hook in sc.HOOKS:
            write_file(l.hook_dir / hook, sc.hook_script(l, hook), 0o755)
        if l.gpuperf_conf.exists():
            self.write_gpuperf_config(l.gpuperf_conf.read_text())  # refreshes the nodes' copies
        else:
            self.reset_gpuperf_config()
        log = l.log_dir / "gpuperf.log"
        if not log.exists():
            log.touch()
        log.chmod(0o666)  # the TaskProlog logs as the job user
        write_file(l.dir / "instance.json", json.dumps({
            "nodes": len(l.nodes), "gpus": l.gpus, "node_root": l.node_root, "cpus": l.cpus,
            "extra_conf": l.extra_conf, "real_gpus": l.real_gpus}))

    def _start(self, argv: list[str], name: str) -> None:
        """Start a daemon that forks and writes its pid file, and wait for that file."""
        pf = self._pidfiles()[name]
        pf.unlink(missing_ok=True)
        if not argv[0].startswith("/"):
            argv = [str(SBIN / argv[0]), *argv[1:]]
        sh(argv, env=self._daemon_env(), timeout=60)
        wait_for(lambda: (pid := read_pid(pf)) is not None and owned(pid, str(self.dir)), 20,
              f"{name} to write {pf} (log/{name}.log)")

    def restart_slurmctld(self, wrapper: Sequence[str] = (), timeout: float = 60) -> None:
        """Stop this instance's slurmctld and start it again (its state is kept: StateSaveLocation), run
        by ``wrapper`` when given (``["/usr/bin/faketime", "-f", "+600s"]``: a controller whose clock is
        off); waits until it answers and the nodes are idle again. ``restart_slurmctld()`` undoes it."""
        with locked(self._lock_path()):
            pid = self.daemons()["slurmctld"]
            if pid:
                terminate([pid], str(self.dir), 15)
            self._start([*wrapper, str(SBIN / "slurmctld")], "slurmctld")
            wait_for(self._ctld_up, timeout, "slurmctld to answer after its restart (log/slurmctld.log)")
            self.resume_all()
            wait_for(self._nodes_idle, timeout, "nodes idle after slurmctld's restart", 0.2)

    def _start_mariadb(self) -> None:
        l = self.layout
        try:
            my = pwd.getpwnam("mysql")
            user, uid, gid = "mysql", my.pw_uid, my.pw_gid
        except KeyError:  # prefix mode on a machine without MariaDB's user: the server runs as root
            user, uid, gid = "root", 0, 0
        for d in (l.db_dir, l.db_run):
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, uid, gid)
        # a suite's root: this machine's MariaDB server (the root's 11.8 server, run from there, failed
        # slurmdbd 24.11's first query: "Number of columns in result (=1) exceeds maximum (=0)")
        prefix = PREFIX_MODE and not SLURM_SUITE
        sbin, bin_ = (SBIN, SLURM_BIN) if prefix else (Path("/usr/sbin"), Path("/usr/bin"))
        base = [f"--basedir={SLURM_PREFIX / 'usr'}"] if prefix else []
        if not (l.db_dir / "mysql").is_dir():
            sh([str(bin_ / "mariadb-install-db"), "--no-defaults", *base, f"--datadir={l.db_dir}", f"--user={user}",
                "--auth-root-authentication-method=socket", "--skip-test-db", "--skip-name-resolve"], timeout=120,
               env=self._daemon_env())
        if prefix:
            base.append(f"--lc-messages-dir={SLURM_PREFIX / 'usr' / 'share' / 'mysql'}")
        (l.db_run / "mariadbd.pid").unlink(missing_ok=True)
        log = open(l.log_dir / "mariadb.log", "ab")
        # setsid -f: the server outlives this process and is nobody's zombie
        subprocess.run(["/usr/bin/setsid", "-f", str(sbin / "mariadbd"), "--no-defaults", *base, f"--datadir={l.db_dir}",
                        f"--socket={l.db_socket}", f"--pid-file={l.db_run / 'mariadbd.pid'}", "--skip-networking",
                        f"--user={user}", f"--log-error={l.log_dir / 'mariadb.log'}", "--innodb-buffer-pool-size=64M",
                        "--performance-schema=OFF", "--skip-name-resolve"],
                       stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self._daemon_env(), check=True)
        log.close()
        wait_for(self._db_ok, 60, "MariaDB to answer on its socket (log/mariadb.log)", 0.2)

    def _db_ok(self) -> bool:
        """The server greets on its socket (a MySQL handshake packet: protocol version 10); no client
        program needed (prefix mode carries none)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(str(self.layout.db_socket))
                head = s.recv(5)
        except OSError:
            return False
        return len(head) == 5 and head[4] == 10

    def _start_slurmdbd(self) -> None:
        self._start(["slurmdbd"], "slurmdbd")
        wait_for(lambda: self.run("sacctmgr", "-n", "-P", "show", "cluster", timeout=10).returncode == 0, 30,
              "slurmdbd to answer (log/slurmdbd.log)", 0.2)

    def _ensure_accounts(self) -> None:
        """The cluster, an account and the test user's association (AccountingStorageEnforce=associations)."""
        cn = self.cluster_name
        have = self.run("sacctmgr", "-n", "-P", "show", "assoc", "format=cluster,account,user", timeout=20).stdout
        rows = {tuple(line.split("|")) for line in have.splitlines()}
        if not any(r[0] == cn for r in rows):
            self.run("sacctmgr", "-i", "add", "cluster", cn, check=True, timeout=20)
        if (cn, "gpuperf", "") not in rows:
            self.run("sacctmgr", "-i", "add", "account", "gpuperf", f"cluster={cn}", "description=tests",
                     "organization=gpuperf", timeout=20)
        for user in ("root", self.user):
            if (cn, "gpuperf", user) not in rows:
                self.run("sacctmgr", "-i", "add", "user", user, "account=gpuperf", f"cluster={cn}", timeout=20)

    def _ctld_up(self) -> bool:
        return "is UP" in self.run("scontrol", "ping", timeout=10).stdout

    def _nodes_idle(self) -> bool:
        states = self.node_states()
        return len(states) == len(self.node_names) and all(s.rstrip("*~#") == "idle" for s in states.values())

    # ---- network namespaces of a multi-node instance -----------------------------------------------

    def _network_up(self) -> None:
        l = self.layout
        if not l.subnet:
            return
        if sh(["ip", "link", "show", l.bridge], check=False).returncode != 0:
            sh(["ip", "link", "add", l.bridge, "type", "bridge"])
            sh(["ip", "addr", "add", f"{l.ctld_addr}/24", "dev", l.bridge])
        sh(["ip", "link", "set", l.bridge, "up"])
        for i, n in enumerate(l.nodes, 1):
            if not Path(f"/run/netns/{n.netns}").exists():
                sh(["ip", "netns", "add", n.netns])
            host_if = f"{l.bridge.replace('gpbr', 'gpv')}{i}"
            if sh(["ip", "link", "show", host_if], check=False).returncode != 0:
                sh(["ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", n.netns])
                sh(["ip", "-n", n.netns, "addr", "add", f"{n.addr}/24", "dev", "eth0"])
            sh(["ip", "link", "set", host_if, "master", l.bridge, "up"])
            sh(["ip", "-n", n.netns, "link", "set", "eth0", "up"])
            sh(["ip", "-n", n.netns, "link", "set", "lo", "up"])

    def _network_down(self) -> None:
        l = self.layout
        if not l.subnet:
            return
        for i, n in enumerate(l.nodes, 1):
            # a process left in the namespace keeps it (and the veth pair) alive: delete the pair first
            sh(["ip", "link", "del", f"{l.bridge.replace('gpbr', 'gpv')}{i}"], check=False)
            if Path(f"/run/netns/{n.netns}").exists():
                sh(["ip", "netns", "del", n.netns], check=False)
        sh(["ip", "link", "del", l.bridge], check=False)

    # ---- down ---------------------------------------------------------------------------------------

    def down(self, purge: bool = False, timeout: float = 15) -> float:
        """Cancel jobs and stop this instance's daemons (never anyone else's); returns seconds taken."""
        with locked(self._lock_path()):
            return self._down(purge, timeout)

    def _down(self, purge: bool, timeout: float, restart: bool = False) -> float:
        t0 = time.monotonic()
        running = self.daemons()
        if running.get("slurmctld"):
            jobs = self.run("squeue", "-h", "-o", "%A", timeout=10).stdout.split()
            if jobs:
                self.run("scancel", *jobs, timeout=10)
                # let the epilogs run: a slurmd stopped mid-cancel leaves its slurmstepd behind
                with contextlib.suppress(ClusterError):
                    wait_for(lambda: not self.run("squeue", "-h", "-o", "%A", timeout=10).stdout.split(), timeout,
                          "cancelled jobs to leave", 0.2)
        # slurmctld and slurmd first: slurmctld's last messages to slurmdbd can still land
        first = [p for k, p in running.items() if p and (k == "slurmctld" or k.startswith("slurmd-"))]
        terminate(first, str(self.dir), timeout)
        terminate([p for k, p in running.items() if p and k in ("slurmdbd", "mariadbd")], str(self.dir), timeout)
        # what is left with our marker is a slurmstepd of ours (it ignores SIGTERM)
        terminate(marked(str(self.dir)), str(self.dir), 0, sig=signal.SIGKILL)
        self._network_down()
        if not restart:
            remove_stepd_link()
        if purge and self.dir.is_dir():
            sh(["rm", "-rf", "--one-file-system", str(self.dir)], check=False)
        self.timings["down_s"] = time.monotonic() - t0
        return self.timings["down_s"]

    # ---- using the cluster ----------------------------------------------------------------------------

    def run(self, tool: str, *args: Any, user: str | None = None, check: bool = False, timeout: float = 60,
            input: str | None = None, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
        """Run a Slurm CLI tool (or a gpuperf command) against this instance, optionally as ``user``."""
        if tool.startswith("/"):
            exe = tool
        elif tool.startswith("gpuperf"):
            exe = str(sc.VENV_BIN / tool)
        else:
            exe = str(SLURM_BIN / tool)
        argv = [exe, *map(str, args)]
        env = _outside_env()
        env.update(self.env)
        if user and user != "root":
            argv = ["/usr/sbin/runuser", "-u", user, "--", "/usr/bin/env", *(f"{k}={v}" for k, v in self.env.items()),
                    *argv]
        if SLURM_SUITE:
            argv = suiteroot.client_argv(SLURM_PREFIX, argv)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, input=input,
                           cwd=str(cwd) if cwd else None)
        if check and p.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()}")
        return p

    def sbatch(self, script_text: str, *args: Any, user: str | None = None) -> int:
        """Submit a batch script (text) with sbatch options; returns the job id. Output: out/slurm-<id>.out."""
        if not script_text.startswith("#!"):
            script_text = "#!/bin/sh\n" + script_text
        p = self.run("sbatch", "--parsable", *args, user=user, input=script_text, cwd=self.layout.out_dir)
        if p.returncode != 0:
            raise ClusterError(f"sbatch {' '.join(map(str, args))} failed: {p.stderr.strip()}")
        return int(p.stdout.strip().split(";")[0])

    def job_info(self, job_id: int) -> dict[str, str]:
        """``scontrol show job`` as a dict (empty once the controller forgot the job)."""
        p = self.run("scontrol", "-o", "show", "job", job_id, timeout=10)
        return _parse_kv(p.stdout) if p.returncode == 0 else {}

    def job_state(self, job_id: int) -> str | None:
        """The job's state from the controller, else from accounting; None when unknown."""
        info = self.job_info(job_id)
        if info:
            state = info.get("JobState", "")
            if state == "PENDING" and int(info.get("Restarts", "0") or 0) > 0:
                return "REQUEUED"  # requeued (and held): it will not run again by itself
            return state
        return self.sacct(job_id, ("State",)).get("State", "").split(" ")[0] or None

    def wait(self, job_id: int, states: Iterable[str] = TERMINAL, timeout: float = 60) -> str:
        """Wait until the job is in one of ``states`` (COMPLETING is not COMPLETED); returns the state."""
        want = set(states)
        end = time.monotonic() + timeout
        state = None
        while time.monotonic() < end:
            state = self.job_state(job_id)
            if state in want:
                return state
            time.sleep(0.2)
        raise ClusterError(f"job {job_id} still {state} after {timeout:.0f} s (wanted {sorted(want)})\n"
                           f"{self.logs(lines=30)}")

    def sacct(self, job_id: int, fields: Sequence[str] = ("JobID", "State", "ExitCode", "User")) -> dict[str, str]:
        """The job's allocation line in accounting, ``{field: value}`` ({} when not there yet)."""
        p = self.run("sacct", "-j", job_id, "-X", "-n", "-P", "-o", ",".join(fields), timeout=20)
        lines = [x for x in p.stdout.splitlines() if x.strip()]
        if p.returncode != 0 or not lines:
            return {}
        return dict(zip((f.split("%")[0] for f in fields), lines[-1].split("|")))

    def wait_sacct(self, job_id: int, state: str = "COMPLETED", timeout: float = 20,
                   fields: Sequence[str] = ("JobID", "State", "ExitCode", "User")) -> dict[str, str]:
        """Wait until accounting shows the job in ``state`` (it lags the controller); returns the row."""
        row: dict[str, str] = {}
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            row = self.sacct(job_id, tuple(dict.fromkeys(("State", *fields))))
            if row.get("State", "").split(" ")[0] == state:
                return row
            time.sleep(0.3)
        raise ClusterError(f"sacct never showed job {job_id} {state} in {timeout:.0f} s: {row}")

    def job_output(self, job_id: int) -> str:
        """The batch job's stdout (default output file in the instance's out/ dir)."""
        try:
            return (self.layout.out_dir / f"slurm-{job_id}.out").read_text()
        except OSError:
            return ""

    def node_config(self, node: str) -> dict:
        """The gpuperf config a node's hooks read (parsed; {} when not valid TOML)."""
        try:
            return tomllib.loads(sc.node_gpuperf_conf(self.layout, node).read_text())
        except (OSError, tomllib.TOMLDecodeError):
            return {}

    def node_run_dir(self, node: str | None = None) -> Path:
        """gpuperf's run_dir as a node's hooks see it (None: the controller's, ``run_dir``)."""
        if node is None or len(self.node_names) == 1:
            return self.run_dir
        return Path(self.node_config(node).get("general", {}).get("run_dir", f"{self.run_dir}/{node}"))

    def node_env(self, node: str) -> dict[str, str]:
        """``env`` for a gpuperf command acting as that node (its own config)."""
        return dict(self.env, GPUPERF_CONFIG=str(sc.node_gpuperf_conf(self.layout, node)))

    def node_cmd(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run in the node's network namespace (unchanged on a single node)."""
        ns = next(n.netns for n in self.layout.nodes if n.name == node)
        return ["/usr/bin/nsenter", f"--net=/run/netns/{ns}", *argv] if ns else list(argv)

    def _record_dir(self, job_id: int, node: str | None, hook: str) -> Path:
        if hook in ("epilog-slurmctld", "merge"):  # the controller's (merge: the EpilogSlurmctld's worker)
            node = None
        elif node is None:
            node = self.node_names[0]
        return self.node_run_dir(node) / "jobs" / str(job_id)

    def job_record(self, job_id: int, hook: str, node: str | None = None) -> dict | None:
        """What gpuperf's hook ``hook`` recorded (``<run_dir>/jobs/<id>/<hook>.json``); node hooks of a
        multi-node instance: that node's (default: the first)."""
        try:
            return json.loads((self._record_dir(job_id, node, hook) / f"{hook}.json").read_text())
        except (OSError, ValueError):
            return None

    def job_records(self, job_id: int, node: str | None = None) -> dict[str, dict]:
        """Every hook record of the job on ``node`` (default: the first) and the controller's, by file
        stem (``prolog``, ``taskprolog.<pid>``, ``epilog-slurmctld``, ...)."""
        out = {}
        dirs = dict.fromkeys((self._record_dir(job_id, node, "prolog"), self._record_dir(job_id, None,
                                                                                          "epilog-slurmctld")))
        for d in dirs:
            for f in sorted(d.glob("*.json")):
                with contextlib.suppress(OSError, ValueError):
                    out[f.stem] = json.loads(f.read_text())
        return out

    def wait_record(self, job_id: int, hook: str, timeout: float = 15, node: str | None = None) -> dict:
        """Wait for a hook's record (EpilogSlurmctld finishes after the job shows COMPLETED)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rec = self.job_record(job_id, hook, node)
            if rec is not None:
                return rec
            time.sleep(0.2)
        raise ClusterError(f"no {hook} record for job {job_id} after {timeout:.0f} s; gpuperf log:\n"
                           f"{self.gpuperf_log()[-3000:]}")

    def node_states(self) -> dict[str, str]:
        """``{node: sinfo state}`` (idle, alloc, drain, down*, ...)."""
        p = self.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10)
        return dict(line.split(None, 1) for line in p.stdout.splitlines() if " " in line)

    def node_reason(self, node: str) -> str:
        """The node's Reason= (drain reason), '' when none."""
        info = _parse_kv(self.run("scontrol", "-o", "show", "node", node, timeout=10).stdout)
        return "" if info.get("Reason") in (None, "(null)") else info.get("Reason", "")

    def resume_all(self) -> None:
        """Return drained or down nodes to service (a test that drained one cleans up with this)."""
        for node, state in self.node_states().items():
            if any(s in state for s in ("drain", "down", "drng", "fail")):
                self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", timeout=10)

    def write_gpuperf_config(self, config: str | dict) -> None:
        """Replace the instance's gpuperf config (TOML text, or a dict of sections); hooks re-read it.

        On a multi-node instance each node gets a copy whose run_dir, state_dir and daemon
        socket_dir end in ``/<node>`` (re-rendered TOML; TOML that does not parse is copied as is).
        """
        text = config if isinstance(config, str) else sc.to_toml(config)
        write_file(self.layout.gpuperf_conf, text)
        if len(self.node_names) == 1:
            return
        try:
            data = config if isinstance(config, dict) else tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            data = None
        for node in self.node_names:
            path = sc.node_gpuperf_conf(self.layout, node)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, text if data is None else sc.to_toml(sc.for_node(data, node)))

    def reset_gpuperf_config(self) -> None:
        """Back to the instance's default gpuperf config (every path inside the instance dir)."""
        self.write_gpuperf_config(sc.gpuperf_defaults(self.layout))

    def gpuperf_config(self) -> dict:
        """The gpuperf config as currently written (parsed TOML; {} when not valid TOML)."""
        try:
            return tomllib.loads(self.layout.gpuperf_conf.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            return {}

    def gpuperf_log(self) -> str:
        """gpuperf's log file of this instance."""
        try:
            return (self.layout.log_dir / "gpuperf.log").read_text()
        except OSError:
            return ""

    def logs(self, lines: int = 40) -> str:
        """The last lines of every log of this instance (printed when something fails)."""
        out = []
        for f in sorted(self.layout.log_dir.glob("*.log")):
            try:
                tail = f.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"==> {f} <==\n" + "\n".join(tail))
        return "\n".join(out)

    def status(self) -> dict[str, Any]:
        """Daemons (pid or None), node states and where things are."""
        running = self.daemons()
        nodes = self.node_states() if running.get("slurmctld") else {}
        return {"name": self.name, "dir": str(self.dir), "cluster": self.cluster_name, "daemons": running,
                "nodes": nodes, "slurm_conf": str(self.layout.slurm_conf),
                "ports": {"slurmctld": self.layout.ctld_port, "slurmd": self.layout.slurmd_port,
                          "slurmdbd": self.layout.dbd_port}}


def _outside_env() -> dict[str, str]:
    """This process's environment as Slurm's daemons and jobs get it: no SLURM_* of an enclosing job, and
    no PYTHONPATH of the test runner (hooks and jobs import the installed gpuperf, as on a real node; a
    checkout on PYTHONPATH made every hook on the GPU machine compile gpuperf from source)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "PYTHONPATH"}


def _parse_kv(text: str) -> dict[str, str]:
    """scontrol -o output: Key=Value pairs separated by spaces (values without spaces)."""
    out = {}
    for tok in text.split():
        k, sep, v = tok.partition("=")
        if sep:
            out.setdefault(k, v)
    return out


def main(argv: list[str] | None = None) -> int:
    """cluster.sh up|down|status [NAME]."""
    ap = argparse.ArgumentParser(prog="cluster.sh", description="gpuperf's Slurm test cluster on this machine")
    ap.add_argument("action", choices=("up", "down", "status"))
    ap.add_argument("name", nargs="?", default=os.environ.get("GPUPERF_TEST_CLUSTER", "pytest"))
    ap.add_argument("--nodes", type=int, default=None, help="up: number of slurmd (default 1, or as last up)")
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--purge", action="store_true", help="down: also delete the instance directory")
    ap.add_argument("--real-gpus", action="store_true",
                    help="up: gres from this machine's /dev/nvidiaN, gpuperf on the real node (its CPUs, NVML)")
    a = ap.parse_args(argv)
    if a.action == "up" and (a.nodes is not None or a.real_gpus):
        c = SlurmCluster(a.name, nodes=a.nodes or 1, gpus=a.gpus, real_gpus=a.real_gpus)
    else:
        c = SlurmCluster.existing(a.name)
    try:
        if a.action == "up":
            t = c.up()
            print(json.dumps({k: round(v, 2) for k, v in t.items()}))
            print(f"export SLURM_CONF={c.layout.slurm_conf} GPUPERF_CONFIG={c.gpuperf_config_path}")
        elif a.action == "down":
            print(f"down in {c.down(purge=a.purge):.2f} s")
        else:
            print(json.dumps(c.status(), indent=1))
    except ClusterError as e:
        print(f"error: {e}\n{c.logs()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
