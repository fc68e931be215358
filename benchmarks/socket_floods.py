"""Socket floods against the real node daemon and controller service, each under its unit's memory limit
(issue 28, findings 5 to 8).

``gpuperf daemon`` (replaying a real recording as the node's 4 GPUs) and ``gpuperf daemon --controller``
run as processes of their own, each in a memory cgroup (v1 ``memory.limit_in_bytes`` or v2 ``memory.max``)
set to its unit's ``MemoryMax`` (256 MiB, 512 MiB; ``packaging/*.service``), with the default soft file limit
1,024 (systemd's). The daemon sends its node summaries to the controller through the real munged. Phases,
each while 8 jobs are registered, finalised and delivered through the daemon (every one must reach the
controller's store):

- ``user-more``    (finding 5) a local user speaks ZeroMQ to the user socket: 4 connections x 256 MiB of
                   60 KiB frames all flagged MORE (raw ZMTP: libzmq's own client never flushes them);
- ``user-conns``   (finding 6) 1,100 idle connections to the user socket from 25 users, held 5 s;
- ``ctl-more``     (finding 7) an unauthenticated network peer: the same ZMTP flood, 4 x 256 MiB, at the
                   collector, plus 300 idle connections from 10 addresses and 4 parts claiming 1 GiB;
- ``metrics-loris`` (finding 8) 2,000 slow-loris connections to /metrics, one byte per second each.

Reported per phase: the process's peak RSS (VmHWM) and its cgroup's peak, its growth over the phase,
whether it survived (not OOM-killed nor aborted), its peak descriptors and threads, jobs delivered.
The floods are ``tests/unit/floods.py``'s, the cgroups and limits ``tests/cluster/unitlimits.py``'s (read
from the unit files): tests/integration/test_hostile_files_slurm.py runs the same floods, smaller, on the
Slurm test cluster while jobs run (benchmarks/results/security_cluster.md).

    sudo python3 benchmarks/socket_floods.py [--tree DIR] [--out FILE]

``--tree`` runs another checkout's gpuperf (e.g. the code before issue 28) with the same floods.
Needs root (cgroups, munged, users' uids) and munge; leaves no process or cgroup behind.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from cluster.unitlimits import Cgroup, Watch, proc_status, unit_memory_max  # noqa: E402
from floods import collector_flood, held_connections, metrics_loris, user_socket_flood  # noqa: E402

RECORDING = ROOT / "tests" / "data" / "recordings" / "matmul_bf16-h100-80gb-hbm3.jsonl.gz"
DAEMON_MAX = unit_memory_max("gpuperf-daemon.service")
CONTROLLER_MAX = unit_memory_max("gpuperf-collector.service")
JOBS_PER_PHASE = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A gpuperf process (``gpuperf daemon [--controller]``) in its cgroup, with the default file limit."""

    def __init__(self, tree: Path, conf: Path, args: list[str], cg: Cgroup, log: Path):
        env = dict(os.environ, PYTHONPATH=str(tree), GPUPERF_CONFIG=str(conf))
        self.log = open(log, "ab")
        self.p = subprocess.Popen([sys.executable, "-c", "import sys; from gpuperf.cli import main; sys.exit(main())",
                                   "daemon", *args], env=env, stdout=self.log, stderr=self.log, cwd=str(tree),
                                  preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096)))
        cg.add(self.p.pid)
        self.cg = cg

    def status(self, key: str) -> int:
        return proc_status(self.p.pid, key)

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class Bench:
    def __init__(self, tree: Path, base: Path):
        from cluster.slurmcluster import ensure_munge, ensure_user

        ensure_munge()
        ensure_user()
        self.tree, self.base = tree, base
        self.ctl_port, self.metrics_port = free_port(), free_port()
        conf = {
            "general": {"run_dir": str(base / "run"), "state_dir": str(base / "state"), "log_file": ""},
            "daemon": {"socket_dir": str(base / "sock"), "user_socket_dir": str(base / "usock"),
                       "backend": f"replay:{RECORDING}?loop=1&gpus=4", "interval_s": 0.5,
                       "metrics_port": self.metrics_port, "metrics_address": "127.0.0.1",
                       "request_timeout_s": 5.0},
            "controller": {"address": f"127.0.0.1:{self.ctl_port}", "port": self.ctl_port, "bind": "0.0.0.0",
                           "store": str(base / "state" / "cluster.sqlite")},
            "report": {"admin_comment": False},
        }
        os.chmod(base, 0o755)
        from gpuperf.files import config, tomlw

        self.conf = base / "gpuperf.toml"
        self.conf.write_text("".join(f"[{sec}]\n" + "".join(f"{k} = {tomlw.value(v)}\n" for k, v in keys.items())
                                     for sec, keys in conf.items()))
        self.cfg = config.load(str(self.conf))
        tag = f"gpuperf-floods-{os.getpid()}"
        self.cg_d, self.cg_c = Cgroup(tag + "-daemon", DAEMON_MAX), Cgroup(tag + "-ctl", CONTROLLER_MAX)
        self.daemon = self.ctl = None
        self.next_job = 1000

    def start(self) -> None:
        if self.ctl is None or not self.ctl.alive():
            self.ctl = Proc(self.tree, self.conf, ["--controller"], self.cg_c, self.base / "controller.log")
            self._wait(lambda: _connects("127.0.0.1", self.ctl_port))
        if self.daemon is None or not self.daemon.alive():
            self.daemon = Proc(self.tree, self.conf, [], self.cg_d, self.base / "daemon.log")
            self._wait(self._daemon_up)

    def _wait(self, pred, timeout: float = 60.0) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if pred():
                return
            time.sleep(0.2)
        raise RuntimeError("did not start: see the logs in " + str(self.base))

    def _daemon_up(self) -> bool:
        from gpuperf.daemon import client

        try:
            return bool(client.call(self.cfg, "ping", timeout_s=1.0, channel="control")["ok"])
        except client.DaemonUnavailable:
            return False

    def jobs(self, n: int, stop: threading.Event) -> tuple[list[int], list[str]]:
        """Register, run ~1 s, finalise and deliver ``n`` jobs, one after another; (their ids, errors)."""
        from gpuperf.daemon import client

        ids, errors = [], []
        for _ in range(n):
            j = self.next_job
            self.next_job += 1
            ids.append(j)
            try:
                client.request(self.cfg, "register", {"job_id": j, "uid": 0, "user": "root", "gpus": [j % 4],
                                                      "start": time.time()}, timeout_s=10, channel="control")
                time.sleep(1.0)
                client.request(self.cfg, "finalize", {"job_id": j, "end": time.time(), "deliver": True},
                               timeout_s=10, channel="control")
            except Exception as e:  # noqa: BLE001 - counted as not delivered
                errors.append(f"job {j}: {type(e).__name__}: {e}")
            if stop.is_set():
                break
        return ids, errors

    def delivered(self, ids: list[int], timeout: float = 60.0) -> int:
        """How many of ``ids`` the controller's store holds within ``timeout``."""
        import sqlite3

        end = time.time() + timeout
        got: set[int] = set()
        while time.time() < end:
            try:
                db = sqlite3.connect(f"file:{self.cfg.controller.store}?mode=ro", uri=True, timeout=5)
                rows = db.execute(f"SELECT DISTINCT job_id FROM node_summaries WHERE job_id IN "
                                  f"({','.join(map(str, ids))})").fetchall()
                db.close()
                got = {r[0] for r in rows}
            except sqlite3.Error:
                pass
            if len(got) == len(ids):
                break
            time.sleep(0.5)
        return len(got)

    def phase(self, name: str, target: str, flood) -> dict:
        self.start()
        proc, cg = (self.daemon, self.cg_d) if target == "daemon" else (self.ctl, self.cg_c)
        cg.reset_peak()
        oom_before = cg.oom_kills()
        rss0 = proc.status("VmRSS")
        watch = Watch(proc.p.pid)
        stop = threading.Event()
        out: dict = {}
        ft = threading.Thread(target=lambda: out.update(flood() or {}), daemon=True)
        t0 = time.time()
        ft.start()
        time.sleep(0.5)
        ids, errors = self.jobs(JOBS_PER_PHASE, stop)
        ft.join()
        took = time.time() - t0
        alive_d, alive_c = self.daemon.alive(), self.ctl.alive()
        delivered = self.delivered(ids, 30 if alive_d and alive_c else 5)
        watch.stop()
        row = {"phase": name, "target": target, "flood_s": round(took, 1), **out,
               "rss_before_mib": round(rss0 / 1024, 1), "rss_peak_mib": round(watch.rss_kib / 1024, 1),
               "rss_growth_mib": round((watch.rss_kib - rss0) / 1024, 1),
               "cgroup_peak_mib": round(cg.peak() / 2**20, 1), "limit_mib": cg.limit >> 20,
               "oom_kills": cg.oom_kills() - oom_before, "survived": proc.alive(),
               "exit": proc.p.returncode, "peak_fds": watch.fds, "peak_threads": watch.threads,
               "jobs": len(ids), "delivered": delivered, "job_errors": errors[:3]}
        print(json.dumps(row), flush=True)
        return row

    # floods (tests/unit/floods.py) ------------------------------------------------------------------------
    def user_more(self) -> dict:
        return user_socket_flood(str(self.base / "usock" / "user.sock"), 4, 256 << 20)

    def user_conns(self) -> dict:
        return held_connections(str(self.base / "usock" / "user.sock"), range(62000, 62025), 44, 5.0)

    def ctl_more(self) -> dict:
        return collector_flood("127.0.0.1", self.ctl_port)

    def metrics_loris(self) -> dict:
        return metrics_loris("127.0.0.1", self.metrics_port)

    def close(self) -> None:
        for p in (self.daemon, self.ctl):
            if p is not None:
                p.stop()
        self.cg_d.remove()
        self.cg_c.remove()


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=str(ROOT), help="checkout whose gpuperf runs the daemon and controller")
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--phases", default="user-more,user-conns,ctl-more,metrics-loris")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))
    base = Path(tempfile.mkdtemp(prefix="gpuperf-floods-", dir="/tmp"))
    b = Bench(Path(a.tree), base)
    rows = []
    try:
        plan = {"user-more": ("daemon", b.user_more), "user-conns": ("daemon", b.user_conns),
                "ctl-more": ("controller", b.ctl_more), "metrics-loris": ("daemon", b.metrics_loris)}
        for name in a.phases.split(","):
            target, fn = plan[name]
            rows.append(b.phase(name, target, fn))
    finally:
        b.close()
        shutil.rmtree(base, ignore_errors=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\n{'phase':14} {'target':10} {'survived':8} {'rss MiB before/peak':>20} {'cgroup peak/limit':>18} "
          f"{'fds':>5} {'thr':>4} {'delivered':>9}")
    for r in rows:
        print(f"{r['phase']:14} {r['target']:10} {str(r['survived']):8} {r['rss_before_mib']:>9}/{r['rss_peak_mib']:<10} "
              f"{r['cgroup_peak_mib']:>8}/{r['limit_mib']:<9} {r['peak_fds']:>5} {r['peak_threads']:>4} "
              f"{r['delivered']:>4}/{r['jobs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
