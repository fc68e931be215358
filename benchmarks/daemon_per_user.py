"""What one ordinary user can cost the real node daemon (issue 36): root's log, another user's prolog, a stuck
read of a process's memory, and a sweep of 8 GPUs and 64 jobs. Renders ``benchmarks/results/security_daemon_work.md``.

``gpuperf daemon`` (replaying a real H100 recording) runs as a process of its own in the unit's limits
(``packaging/gpuperf-daemon.service``: a memory cgroup at ``MemoryMax``, a CPU cgroup at ``CPUQuota``), its
log at ``<base>/gpuperf.log`` (root's log). Root's prologs are the real ``prolog`` op over ``hook.sock`` (the
daemon runs the health, register, env and affinity steps; the job is finalised after, untimed). Parts:

- ``flood``  the job user (``tests/cluster/host.py``'s TEST_USER) sends hostile ``taskenv`` requests on
             ``user.sock`` at the rate limit (20/s), cycling findings 1, 3 and 5: its finished job's
             ``env.json`` holding a 900,000-character key, a 5,000-digit ``SLURM_CPUS_PER_TASK``, a step id
             naming ``/../../``; 12 rounds of 5 s blocks: flood, decoy (the same requests at a second
             daemon: the machine's load alike), quiet (60 s of flood), while root runs prologs back to back
             (a 50 ms pause between). Root's log growth over the flood; prolog p99 in flood vs quiet blocks.
- ``stuck``  a process of the job user whose ``/proc/PID/environ`` never answers: a FIFO bind-mounted over it
             in the daemon's mount namespace (a stand-in for a FUSE page the kernel waits on); one job
             registered, so the host scan reads every process's environment. 30 s: sweeps done, prologs on
             ``hook.sock`` and pings on ``user.sock`` answered (2 s timeout), and their latency.
- ``sweep``  two daemons of the same code side by side, each replaying 8 GPUs at 1 Hz: A with 64 jobs
             registered (8 per GPU), B with none; root's prologs alternate A, B, A, B (paired). p99 of A
             minus p99 of B, with a bootstrap 95% interval: what a sweep of 8 GPUs and 64 jobs costs a prolog.
- ``slow``   the same pairing in one process of the tree's (``SLOW``), where sampling 8 GPUs takes 30 ms (as
             NVML's reads do; a sleep) and A sweeps at 10 Hz: a prolog that arrived during a sweep waited for
             all of it before issue 36.

    python3 benchmarks/daemon_per_user.py [--tree DIR] [--only flood,stuck,sweep] [--out FILE.json]
    python3 benchmarks/daemon_per_user.py --render NEW.json [OLD.json [CLUSTER.json]]
    python3 benchmarks/daemon_per_user.py --render benchmarks/results/security_daemon_work.json   (the three kept)

``--tree`` runs another checkout's gpuperf (e.g. the code before issue 36) with the same parts. Needs root
(cgroups, a user's uid, ``unshare``/``mount``); leaves no process, mount or cgroup behind. Over 400 lines: the
three parts share the daemon's set-up in its limits, and the page renders the three.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from cluster.host import TEST_USER, ensure_user  # noqa: E402
from cluster.unitlimits import Cgroup, stop as stop_process, unit_memory_max, unit_setting  # noqa: E402

RECORDING = ROOT / "tests" / "data" / "recordings" / "matmul_bf16-h100-80gb-hbm3.jsonl.gz"
UNIT = "gpuperf-daemon.service"
TIMEOUT_S = 2.0

# the hostile user's client: plain framing (a 4-byte length and JSON), no gpuperf import, one request a connection
FLOODER = r'''
import json, socket, struct, sys, time
path, source, digest, seconds, rate = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
kinds = [{"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"},
         {"SLURM_JOB_ID": "78", "SLURM_STEP_ID": "0", "SLURM_CPUS_PER_TASK": "9" * 5000},
         {"SLURM_JOB_ID": "78", "SLURM_STEP_ID": "/../../../../var/lib/gpuperf/daemon"}]
sent = answered = 0
end, i = time.monotonic() + seconds, 0
while time.monotonic() < end:
    env = kinds[i % 3]
    i += 1
    body = json.dumps({"v": 1, "op": "taskenv", "job": {"env": env, "config": {"source": source, "digest": digest},
                                                          "cpus": 4, "pid": 4242}}).encode()
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(path)
            s.sendall(struct.pack(">I", len(body)) + body)
            head = s.recv(4)
            sent += 1
            answered += len(head) == 4
    except OSError:
        sent += 1
    time.sleep(max(0.0, 1.0 / rate - 0.001))
print(json.dumps({"sent": sent, "answered": answered}))
'''


# the ``slow`` part, in a process of the tree's own: two daemons in-process, sampling 8 GPUs in 30 ms as NVML
# does (a sleep), A sweeping at 10 Hz with 64 jobs, B not sweeping; root's prologs on hook.sock alternate A, B
SLOW = r'''
import json, shutil, sys, tempfile, threading, time
sys.path.insert(0, sys.argv[1])
from gpuperf.daemon import hooksock
from gpuperf.daemon.server import Daemon
from gpuperf.files import config
from gpuperf.prolog import indaemon
from gpuperf.samplers.base import GpuSample

class Slow:
    name = "slow"
    def __init__(self, delay): self.delay = delay
    def gpu_count(self): return 8
    def sample(self):
        time.sleep(self.delay)
        t = time.time()
        return [GpuSample(gpu=i, t=t, util_gpu_pct=50.0, power_w=200.0, mem_used_mib=1000.0, mem_total_mib=81559.0)
                for i in range(8)]
    def read_energy(self): return {i: 1000.0 for i in range(8)}
    def describe(self): return []
    def close(self): pass

def start(interval):
    base = tempfile.mkdtemp(prefix="gpuperf-slow-")
    cfg = config.defaults()
    cfg.data["general"].update(run_dir=base + "/run", state_dir=base + "/state", log_file="")
    cfg.data["daemon"].update(socket_dir=base + "/sock", user_socket_dir=base + "/usock", metrics_port=0,
                              interval_s=interval)
    ok = [{"code": "gpu_missing", "status": "ok", "detail": "8 GPUs", "ms": 1.0}]
    d = Daemon(cfg, Slow(0.03), node="bench", health_fn=lambda: ok, metrics=False, send_summaries=False,
               xid_source=None, prolog=indaemon.run)
    threading.Thread(target=d.run, daemon=True).start()
    d.ready.wait(30)
    bases.append(base)
    return d, cfg

bases = []

def prolog(cfg, job):
    env = {"SLURM_JOB_ID": str(job), "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0,1",
           "SLURMD_NODENAME": "bench", "SLURM_JOB_CPUS_PER_NODE": "8", "CUDA_VISIBLE_DEVICES": "0,1"}
    t = time.perf_counter()
    r = hooksock.call(cfg.daemon.socket_dir, "prolog", {"env": env, "config": {"source": cfg.source,
                                                                               "digest": config.digest(cfg)}}, 5.0)
    ms = 1000 * (time.perf_counter() - t)
    hooksock.call(cfg.daemon.socket_dir, "finalize", {"job_id": job}, 5.0)
    return ms if r.get("done") else None

(a, ca), (b, cb) = start(0.1), start(3600.0)
for j in range(64):
    hooksock.call(ca.daemon.socket_dir, "register", {"job_id": 1000 + j, "uid": 0, "user": "root", "gpus": [j % 8],
                                                     "cpus": 1}, 5.0)
time.sleep(2)
out = {"with_sweeps": [], "without": [], "n": int(sys.argv[2])}
for i in range(out["n"]):
    for cfg, key in ((ca, "with_sweeps"), (cb, "without")) if i % 2 == 0 else ((cb, "without"), (ca, "with_sweeps")):
        ms = prolog(cfg, 300000 + i)
        if ms is not None:
            out[key].append(ms)
    time.sleep(0.013)
out["sweeps_a"], out["sweep_s_a"] = a.stats["sweeps"], a.stats["sweep_s"]
out["sweeps_b"], out["running_a"] = b.stats["sweeps"], len(a.running)
a.stop(); b.stop()
time.sleep(1)
for base in bases:
    shutil.rmtree(base, ignore_errors=True)
print(json.dumps(out))
'''


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def boot_diff(a: list[float], b: list[float], q: float = 0.99, n: int = 2000) -> tuple[float, float, float]:
    """q-quantile of a minus that of b, and a bootstrap 95% interval of it."""
    rng = random.Random(36)
    d = sorted(pct(rng.choices(a, k=len(a)), q) - pct(rng.choices(b, k=len(b)), q) for _ in range(n))
    return pct(a, q) - pct(b, q), d[int(0.025 * n)], d[int(0.975 * n)]


class CpuCgroup:
    """A CPU cgroup at the unit's ``CPUQuota`` (v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``)."""

    def __init__(self, name: str, quota_pct: float):
        v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        self.dir = Path("/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/cpu") / name
        self.dir.mkdir(exist_ok=True)
        if v2:
            (self.dir / "cpu.max").write_text(f"{int(quota_pct * 1000)} 100000")
        else:
            (self.dir / "cpu.cfs_period_us").write_text("100000")
            (self.dir / "cpu.cfs_quota_us").write_text(str(int(quota_pct * 1000)))

    def add(self, pid: int) -> None:
        (self.dir / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.dir.rmdir()
                return
            except OSError:
                time.sleep(0.1)


class Daemon:
    """``gpuperf daemon`` of ``tree`` in the unit's limits; ``bind``: (FIFO, /proc/PID/environ) mounted over in its namespace."""

    def __init__(self, tree: Path, tag: str, speed: float = 1.0, bind: tuple[str, str] | None = None):
        from gpuperf.files import config

        self.base = Path(tempfile.mkdtemp(prefix=f"gpuperf-peruser-{tag}-"))
        os.chmod(self.base, 0o755)
        self.conf = self.base / "gpuperf.toml"
        self.conf.write_text(f"""[general]
run_dir = "{self.base}/run"
state_dir = "{self.base}/state"
log_file = "{self.base}/gpuperf.log"
[daemon]
backend = "replay:{RECORDING}?loop=1&gpus=8"
replay_speed = {speed}
socket_dir = "{self.base}/sock"
user_socket_dir = "{self.base}/usock"
metrics_port = 0
host_interval_s = 1.0
[checks]
drain = false
[report]
admin_comment = false
""")
        self.cfg = config.load(str(self.conf))
        # the hook's settings as that tree's code digests them (another checkout may add config keys)
        self.digest = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                      "from gpuperf.files import config; print(config.digest(config.load(sys.argv[2])))",
                                      str(tree), str(self.conf)], capture_output=True, text=True, check=True).stdout.strip()
        self.log = self.base / "gpuperf.log"
        py = f"import sys; sys.path.insert(0, {str(tree)!r}); from gpuperf.cli import main; sys.exit(main())"
        argv = [sys.executable, "-c", py, "daemon"]
        if bind:
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    f'mount --bind "{bind[0]}" "{bind[1]}" && exec "$@"', "sh", *argv]
        env = dict(os.environ, GPUPERF_CONFIG=str(self.conf), PYTHONPATH=str(tree))
        self.mem = Cgroup(f"gpuperf-peruser-{tag}-{os.getpid()}", unit_memory_max(UNIT))
        self.cpu = CpuCgroup(f"gpuperf-peruser-{tag}-{os.getpid()}", float(unit_setting(UNIT, "CPUQuota").rstrip("%")))
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(tree))
        self.mem.add(self.p.pid)
        self.cpu.add(self.p.pid)
        end = time.time() + 60
        while time.time() < end:
            if self.p.poll() is not None:
                raise SystemExit(f"daemon exited {self.p.returncode}")
            if self.ping() is not None:
                return
            time.sleep(0.2)
        raise SystemExit("daemon did not answer in 60 s")

    def pid(self) -> int:
        """The daemon's own pid (under ``unshare``/``sh`` it is their exec'd child: the same pid)."""
        return self.p.pid

    def ping(self) -> dict | None:
        from gpuperf.daemon import usersock

        try:
            return usersock.call(self.cfg.daemon.user_socket_dir, "ping", None, TIMEOUT_S)
        except Exception:  # noqa: BLE001 - unanswered
            return None

    def control(self, op: str, job: dict) -> dict | None:
        from gpuperf.daemon import hooksock

        try:
            return hooksock.call(self.cfg.daemon.socket_dir, op, job, TIMEOUT_S)
        except Exception:  # noqa: BLE001
            return None

    def prolog(self, job_id: int, uid: int = 0, user: str = "root") -> float | None:
        """ms of one real prolog op over hook.sock (None: unanswered in 2 s or not done); the job finalised after."""
        env = {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": str(uid), "SLURM_JOB_USER": user,
               "SLURM_JOB_GPUS": "0,1", "SLURMD_NODENAME": "bench", "SLURM_JOB_CPUS_PER_NODE": "8",
               "CUDA_VISIBLE_DEVICES": "0,1"}
        t = time.perf_counter()
        r = self.control("prolog", {"env": env, "config": {"source": self.cfg.source, "digest": self.digest}})
        ms = 1000 * (time.perf_counter() - t)
        self.control("finalize", {"job_id": job_id})
        return ms if r is not None and r.get("done") else None

    def cpu_s(self) -> float:
        f = Path(f"/proc/{self.p.pid}/stat").read_text()
        rest = f[f.rfind(")") + 2:].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        stop_process(self.p)
        self.mem.remove()
        self.cpu.remove()
        shutil.rmtree(self.base, ignore_errors=True)


def _job_dir(d: Daemon, job: int, plan: dict, uid: int) -> None:
    jd = Path(d.cfg.general.run_dir) / "jobs" / str(job)
    jd.mkdir(parents=True, exist_ok=True)
    p = jd / "env.json"
    p.write_text(json.dumps(plan))
    os.chown(p, uid, uid)
    os.chmod(p, 0o600)


def flood(tree: Path, blocks: int = 12, block_s: float = 5.0) -> dict:
    """Blocks of ``block_s``: flood (the user's requests at the measured daemon), decoy (the same requests at a
    second daemon: the machine's load the same, the measured daemon's none), quiet; root's prologs throughout."""
    user = ensure_user()
    d, decoy = Daemon(tree, "flood"), None
    try:
        decoy = Daemon(tree, "decoy")
        good = {"schema": "gpuperf.env.v1", "vars": [{"name": "NCCL_X", "value": "1", "reason": "r", "rule": "x"}],
                "skipped": [], "notes": [], "disabled": None}
        for dd in (d, decoy):
            _job_dir(dd, 77, {**good, "skipped": [{"name": "x", "reason": "r", "rule": "q", "k" * 900_000: 1}]}, user.pw_uid)
            _job_dir(dd, 78, good, user.pw_uid)
        phases = ("flood", "decoy", "quiet")
        out: dict = {"requests": [], "unanswered": {p: 0 for p in phases}}
        for p in phases:
            out.update({p: [], f"log_{p}_bytes": 0, f"log_{p}_hostile_bytes": 0, f"cpu_{p}_s": 0.0})
        job = 100000
        for b in range(len(phases) * blocks):
            phase = phases[b % len(phases)]
            size0, cpu0 = d.log.stat().st_size if d.log.exists() else 0, d.cpu_s()
            fl = None
            if phase != "quiet":
                at = d if phase == "flood" else decoy
                fl = subprocess.Popen(["runuser", "-u", TEST_USER, "--", sys.executable, "-c", FLOODER,
                                       str(Path(at.cfg.daemon.user_socket_dir) / "user.sock"), at.cfg.source, at.digest,
                                       str(block_s), "20"], stdout=subprocess.PIPE, text=True)
            end = time.monotonic() + block_s
            while time.monotonic() < end:
                job += 1
                ms = d.prolog(job)
                if ms is None:
                    out["unanswered"][phase] += 1
                else:
                    out[phase].append(ms)
                time.sleep(0.05)
            if fl is not None:
                got = json.loads(fl.communicate(timeout=30)[0])
                if phase == "flood":
                    out["requests"].append(got)
            out[f"log_{phase}_bytes"] += (d.log.stat().st_size if d.log.exists() else 0) - size0
            if d.log.exists():   # the lines the hostile user's requests caused (the prologs log their own)
                with open(d.log, "rb") as fh:
                    fh.seek(size0)
                    caused = [ln for ln in fh.read().splitlines() if f"uid {user.pw_uid}".encode() in ln
                              or b"taskenv" in ln or b"env.json" in ln or b"Traceback" in ln]
                out[f"log_{phase}_hostile_bytes"] += sum(len(x) + 1 for x in caused)
            out[f"cpu_{phase}_s"] += d.cpu_s() - cpu0
        out["flood_s"] = blocks * block_s
        out["alive"] = d.p.poll() is None
        return out
    finally:
        d.stop()
        if decoy is not None:
            decoy.stop()


def stuck(tree: Path, seconds: float = 30.0) -> dict:
    user = ensure_user()
    fifo = Path(tempfile.mkdtemp(prefix="gpuperf-peruser-fifo-")) / "environ"
    os.mkfifo(fifo)
    sleeper = subprocess.Popen(["sleep", str(int(seconds) + 120)],
                               preexec_fn=lambda: (os.setgid(user.pw_gid), os.setuid(user.pw_uid)))
    pid = sleeper.pid
    d = Daemon(tree, "stuck", bind=(str(fifo), f"/proc/{pid}/environ"))
    out: dict = {"prolog_ms": [], "ping_ms": [], "prolog_unanswered": 0, "ping_unanswered": 0, "pid": pid,
                 "uid": user.pw_uid}
    try:
        first = d.ping()
        out["sweeps_before"] = first["sweeps"] if first else None
        d.control("register", {"job_id": 7, "uid": user.pw_uid, "user": TEST_USER, "gpus": [0], "cpus": 1})
        end, job = time.monotonic() + seconds, 200000
        while time.monotonic() < end:
            job += 1
            ms = d.prolog(job)
            if ms is None:
                out["prolog_unanswered"] += 1
            else:
                out["prolog_ms"].append(ms)
            t = time.perf_counter()
            p = d.ping()
            if p is None:
                out["ping_unanswered"] += 1
            else:
                out["ping_ms"].append(1000 * (time.perf_counter() - t))
                out["sweeps_after"] = p["sweeps"]
            time.sleep(0.2)
        out["seconds"] = seconds
        out["named"] = [ln for ln in d.log.read_text(errors="replace").splitlines() if "did not answer" in ln][:3] \
            if d.log.exists() else []
        return out
    finally:
        try:   # let the hung read return (the old daemon's loop, blocked in it, then stops)
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
        d.stop()
        sleeper.kill()
        sleeper.wait()
        shutil.rmtree(fifo.parent, ignore_errors=True)


def sweep(tree: Path, n: int = 500, speed: float = 1.0) -> dict:
    a, b = Daemon(tree, "sweepA", speed=speed), None
    try:
        b = Daemon(tree, "sweepB", speed=speed)
        for j in range(64):
            a.control("register", {"job_id": 1000 + j, "uid": 0, "user": "root", "gpus": [j % 8], "cpus": 1})
        time.sleep(2)
        with_jobs, without, job = [], [], 300000
        for i in range(n):
            job += 1
            for d, into in ((a, with_jobs), (b, without)) if i % 2 == 0 else ((b, without), (a, with_jobs)):
                ms = d.prolog(job)
                if ms is not None:
                    into.append(ms)
            time.sleep(0.02)
        pa, pb = a.ping() or {}, b.ping() or {}
        return {"with_jobs": with_jobs, "without": without, "sweeps_a": pa.get("sweeps"), "sweep_s_a": pa.get("sweep_s"),
                "sweeps_b": pb.get("sweeps"), "sweep_s_b": pb.get("sweep_s"), "running_a": pa.get("running")}
    finally:
        a.stop()
        if b is not None:
            b.stop()


def _ms(xs: list[float]) -> str:
    return f"{pct(xs, 0.5):.1f} / {pct(xs, 0.99):.1f} ({len(xs)})" if xs else "- (0)"


def _section(r: dict, label: str) -> list[str]:
    out = [f"### {label}: commit {r['commit']} ({r['date']}, load average {' '.join(f'{x:.2f}' for x in r['load'])})", ""]
    if r.get("runs"):
        out += ["Runs: " + "; ".join(f"{k}: {v}" for k, v in r["runs"].items()) + ".", ""]
    f = r.get("flood")
    if f:
        sent = sum(x["sent"] for x in f["requests"])
        ok = sum(x["answered"] for x in f["requests"])
        out += [f"**flood** ({f['flood_s']:.0f} s of hostile `taskenv` at 20/s in all: {sent} sent, {ok} answered; daemon alive "
                f"after: {'yes' if f['alive'] else '**no**'}):", "",
                "| blocks | root's log growth (of it: lines of the user's requests) | daemon CPU s | prolog p50 / p99 ms (n) | prologs unanswered |",
                "|---|---|---|---|---|"]
        phases = [p for p in ("flood", "decoy", "quiet") if p in f]
        for p in phases:
            out.append(f"| {p} | {f[f'log_{p}_bytes']:,} B ({f.get(f'log_{p}_hostile_bytes', 0):,} B) | {f[f'cpu_{p}_s']:.1f} | "
                       f"{_ms(f[p])} | {f['unanswered'][p]} |")
        out += ["", "The prologs log their own lines (registration, finalisation): the quiet blocks' growth. Decoy: the same "
                "requests sent to a second daemon, so the machine carries the flooding client in both."]
        for other in [p for p in phases if p != "flood"]:
            d99 = boot_diff(f["flood"], f[other]) if f["flood"] and f[other] else (float("nan"),) * 3
            out.append(f"Prolog p99, flood minus {other}: {d99[0]:+.1f} ms (bootstrap 95% interval {d99[1]:+.1f} to "
                       f"{d99[2]:+.1f}).")
        out.append("")
    s = r.get("stuck")
    if s:
        sw = (s.get("sweeps_after") or 0) - (s.get("sweeps_before") or 0)
        out += [f"**stuck** (pid {s['pid']} of uid {s['uid']}, its environ a FIFO, {s['seconds']:.0f} s): sweeps done "
                f"{sw if s.get('sweeps_after') is not None else 'none answered'}; prologs on `hook.sock` p50 / p99 ms "
                f"{_ms(s['prolog_ms'])}, unanswered {s['prolog_unanswered']}; pings on `user.sock` {_ms(s['ping_ms'])}, "
                f"unanswered {s['ping_unanswered']}. Log: {'; '.join(s['named']) or '(nothing)'}", ""]
    sl = r.get("slow")
    if sl:
        out += [f"**slow sweeps** (in-process; sampling 8 GPUs takes 30 ms; A sweeps at 10 Hz with {sl['running_a']} jobs, "
                f"{sl['sweeps_a']} sweeps, the last {1000 * sl['sweep_s_a']:.1f} ms; B sweeps no more after its first): "
                + _paired(sl["with_sweeps"], sl["without"]), ""]
    w = r.get("sweep")
    if w:
        out += [f"**sweep** (8 GPUs at 1 Hz; A: {w['running_a']} jobs running, last sweep {1000 * (w['sweep_s_a'] or 0):.1f} ms; "
                f"B: none, last sweep {1000 * (w['sweep_s_b'] or 0):.1f} ms): " + _paired(w["with_jobs"], w["without"]), ""]
    return out


def _paired(a: list[float], b: list[float]) -> str:
    """A's and B's prolog quantiles and A minus B at p50 and p99, each with its bootstrap 95% interval."""
    d50, d99 = boot_diff(a, b, 0.5), boot_diff(a, b, 0.99)
    return (f"prolog p50 / p99 ms (n): A {_ms(a)}, B {_ms(b)}; A minus B: p50 {d50[0]:+.1f} ms ({d50[1]:+.1f} to "
            f"{d50[2]:+.1f}), p99 {d99[0]:+.1f} ms ({d99[1]:+.1f} to {d99[2]:+.1f}).")


def _cluster(fig: dict) -> list[str]:
    """The Slurm test cluster's figures (``tests/integration/test_daemon_per_user_slurm.py``)."""
    out = [f"### On the Slurm test cluster: commit {fig.get('commit', '?')}", "",
           "The same parts through the cluster's node daemon, run as its unit runs it (the unit's ExecStart in a memory "
           "cgroup at its MemoryMax: `tests/integration/test_hostile_files_slurm.py`'s set-up), the user the cluster's "
           "job user, the plan their own finished job's; root's log the cluster's `log/gpuperf.log` (every gpuperf "
           "process's). Run by `tests/integration/test_daemon_per_user_slurm.py`.", ""]
    f = fig.get("flood")
    if f:
        sent = sum(x.get("sent", 0) for x in f["requests"])
        d99 = boot_diff(f["flood"], f["quiet"]) if f["flood"] and f["quiet"] else (float("nan"),) * 3
        out += [f"**flood**: {sent} hostile `taskenv` requests in 60 s, every one answered and refused. Root's log grew "
                f"{f['log_flood_bytes']:,} B over the flood blocks ({f['log_flood_hostile_bytes']:,} B of lines naming the user "
                f"or `taskenv`), {f['log_quiet_bytes']:,} B over the quiet ones. Prolog (`hook.sock`) p50 / p99 ms (n): "
                f"flood {_ms(f['flood'])}, quiet {_ms(f['quiet'])}; p99 flood minus quiet {d99[0]:+.1f} ms "
                f"({d99[1]:+.1f} to {d99[2]:+.1f}).", ""]
    st = fig.get("stuck")
    if st:
        out += [f"**stuck** (a FIFO bind-mounted over `/proc/{st['pid']}/environ`, a process of the job user, while their "
                f"job ran; 20 s): {st['sweeps']} sweeps; prologs p50 / p99 ms {_ms(st['prolog_ms'])}, unanswered "
                f"{st['prolog_unanswered']}; pings {_ms(st['ping_ms'])}, unanswered {st['ping_unanswered']}; a whole job "
                f"of the user through Slurm's prolog and epilog completed. Log: {'; '.join(st['named'])}", ""]
    return out


def render(new: dict, old: dict | None = None, cluster: dict | None = None) -> str:
    """The results page from one run of this tree and, optionally, one of the code before."""
    lines = ["<!-- rendered by benchmarks/daemon_per_user.py --render from its runs: do not edit the numbers -->",
             "# What one user can cost the node daemon (issue 36)", "",
             "Command (root, the 2-core dev VM shared with other engineers' test runs):", "", "```sh",
             "python3 benchmarks/daemon_per_user.py --out new.json",
             "python3 benchmarks/daemon_per_user.py --tree <checkout before issue 36> --out old.json",
             "python3 benchmarks/daemon_per_user.py --render new.json old.json", "```", "",
             (__doc__ or "").split("\n\n", 1)[1].split("\n    python3", 1)[0].strip(), "",
             "Bars (issue 36): root's log grows <= 1 MiB over 60 s of flood and another user's prolog p99 by <= 5 ms; "
             "sampling, hooks and the user socket answer while a read blocks; the prolog's p99 unchanged while a "
             "sweep of 8 GPUs and 64 jobs runs. On this shared 2-core VM (load 5 to 17 during the runs) a p99's "
             "bootstrap interval is 15 to 40 ms wide: a difference of 5 ms is within it either way, so the p99 bars are "
             "read from the intervals (the code before shows what a real effect looks like), the p50s beside them.", ""]
    lines += _section(new, "With issue 36")
    if old:
        lines += _section(old, "Before issue 36")
    if cluster:
        lines += _cluster(cluster)
    return "\n".join(lines) + "\n"


def slow(tree: Path, n: int = 400) -> dict:
    p = subprocess.run([sys.executable, "-c", SLOW, str(tree), str(n)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=str(tree)))
    if p.returncode != 0:
        raise SystemExit(f"slow part failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _commit(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=ROOT)
    ap.add_argument("--only", default="flood,stuck,sweep,slow")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--render", nargs="+", type=Path, help="NEW.json [OLD.json [CLUSTER.json]]: write the results page")
    args = ap.parse_args()
    if args.render:
        runs = [json.loads(p.read_text()) for p in args.render]
        if len(runs) == 1 and "new" in runs[0]:      # the kept figures: {"new", "old", "cluster"}
            runs = [runs[0]["new"], runs[0].get("old"), runs[0].get("cluster")]
        page = render(*runs)
        (ROOT / "benchmarks" / "results" / "security_daemon_work.md").write_text(page)
        print(page)
        return 0
    res: dict = {"tree": str(args.tree), "commit": _commit(args.tree), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "load": os.getloadavg()}
    for part in args.only.split(","):
        t0 = time.monotonic()
        res[part] = {"flood": flood, "stuck": stuck, "sweep": sweep, "slow": slow}[part](args.tree)
        res[part]["took_s"] = round(time.monotonic() - t0, 1)
        print(part, "done in", res[part]["took_s"], "s", flush=True)
    text = json.dumps(res, indent=1)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
