"""The node daemon end to end over its real sockets: register/finalize, live aggregates, auth by peer
uid (a client run as ``nobody``), fuzzing, overruns, attribution, sharing, health, metrics, PUB.

The sampler here is a small scripted one (``ScriptSampler``) built from GpuSample values: these tests
are about the daemon, not a backend.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import zmq

from gpuperf.files import config
from gpuperf.daemon import client, protocol
from gpuperf.daemon.server import Daemon
from gpuperf.epilog import indaemon as epilog_indaemon
from gpuperf.prolog import indaemon, taskdaemon
from gpuperf.samplers.base import GpuSample
from otheruser import OtherUserPython

PY = sys.executable


class ScriptSampler:
    """GPUs drawing ``power_w`` (W) at ``util`` %, an energy counter that integrates it, optional
    processes per GPU and an optional delay per sweep."""

    name = "script"

    def __init__(self, n: int = 2, power_w: float = 200.0, util: float = 50.0, delay_s: float = 0.0):
        self.n, self.power_w, self.util, self.delay_s = n, power_w, util, delay_s
        self.processes: dict[int, list[dict]] = {}
        self._energy = {i: 1000.0 * (i + 1) for i in range(n)}
        self._last = time.time()

    def gpu_count(self) -> int:
        return self.n

    def _advance(self) -> float:
        now = time.time()
        for i in self._energy:
            self._energy[i] += self.power_w * (now - self._last)
        self._last = now
        return now

    def sample(self) -> list[GpuSample]:
        if self.delay_s:
            time.sleep(self.delay_s)
        t = self._advance()
        return [GpuSample(gpu=i, t=t, util_gpu_pct=self.util, power_w=self.power_w, mem_used_mib=1000.0 + i,
                          mem_total_mib=81559.0, sm_active_pct=self.util * 0.8, nvlink_tx_bps=1e9, temp_c=40.0,
                          processes=list(self.processes.get(i, [])))
                for i in range(self.n)]

    def read_energy(self) -> dict[int, float | None]:
        self._advance()
        return dict(self._energy)

    def close(self) -> None:
        pass


def make_cfg(base: Path, **daemon):
    cfg = config.defaults()
    cfg.data["general"].update(run_dir=str(base / "run"), state_dir=str(base / "state"), log_file="")
    cfg.data["daemon"].update(socket_dir=str(base / "sock"), user_socket_dir=str(base / "usock"),
                              metrics_port=0, interval_s=0.05, request_timeout_s=2.0, checkpoint_s=0.2,
                              host_interval_s=0.2)
    cfg.data["daemon"].update(daemon)
    return cfg


@pytest.fixture
def base():
    # world-traversable (not pytest's 0700 tmp), so a client run as nobody can reach the user socket
    d = Path(tempfile.mkdtemp(prefix="gpuperf-daemon-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Running:
    def __init__(self, cfg, sampler, **kw):
        self.cfg, self.sampler = cfg, sampler
        kw.setdefault("health_fn", lambda: [{"code": "gpu_missing", "status": "ok", "detail": "2 GPUs", "ms": 1.0}])
        kw.setdefault("metrics", False)
        kw.setdefault("send_summaries", False)
        kw.setdefault("prolog", indaemon.run)   # as ``gpuperf daemon`` composes it
        kw.setdefault("epilog", epilog_indaemon.run)
        kw.setdefault("taskenv", taskdaemon.run)
        self.d = Daemon(cfg, sampler, node="n1", **kw)
        self.th = threading.Thread(target=self.d.run, daemon=True)

    def __enter__(self):
        self.th.start()
        assert self.d.ready.wait(10), "daemon did not start"
        return self

    def __exit__(self, *a):
        self.d.stop()
        self.th.join(10)

    def call(self, op, job=None, channel="control"):
        return client.call(self.cfg, op, job, channel=channel)


def wait_for(pred, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_register_live_finalize(base):
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler(n=2, power_w=200.0)) as r:
        rep = r.call("register", {"job_id": 41, "uid": 0, "user": "root", "gpus": [1], "cpus": 4})
        assert rep["ok"], rep
        assert r.call("register", {"job_id": 41, "uid": 0, "gpus": [1]})["already"] is True
        live = wait_for(lambda: (lambda a: a if a["gpus"]["1"]["samples"] >= 5 else None)(
            r.call("job", {"job_id": 41})["aggregates"]))
        assert list(live["gpus"]) == ["1"] and live["end"] is None
        time.sleep(0.3)
        fin = r.call("finalize", {"job_id": 41})
        assert fin["ok"], fin
        a = fin["aggregates"]
        g = a["gpus"]["1"]
        assert a["end"] is not None and a["partial"] is False and a["gaps"] == []
        assert g["energy_source"] == "counter"
        # the counter and the integral of the constant power agree over the job
        assert g["energy_j"] == pytest.approx(200.0 * g["seconds"], rel=0.25)
        assert g["metrics"]["power_w"]["mean"] == pytest.approx(200.0)
        assert a["host"]["cpus_allocated"] == 4
        # the job's coarse series goes with it (the diagnosis's phases): its GPU only, a bounded number of points
        assert list(fin["series"]) == ["1"] and 1 <= len(fin["series"]["1"]["t"]) <= 24
        # finalized: no longer running, stored, a repeat finalize returns the same aggregates
        assert r.call("live")["jobs"] == []
        again = r.call("finalize", {"job_id": 41})
        assert again["ok"] and again["aggregates"]["gpus"]["1"]["samples"] == g["samples"]
        assert r.call("job", {"job_id": 41})["state"] == "finalized"
        assert r.call("finalize", {"job_id": 999})["ok"] is False


def _frames():
    rng = random.Random(1234)
    yield b""
    yield b"\xff\xfe\x00garbage"
    yield b"[1,2,3]"
    yield b'"just a string"'
    yield b"{" * 5000
    yield json.dumps({"v": 2, "op": "register", "job": {"job_id": 1, "uid": 0}}).encode()
    yield json.dumps({"v": True, "op": "ping"}).encode()
    yield json.dumps({"v": 1, "op": "drop_tables"}).encode()
    yield json.dumps({"v": 1, "op": "register", "job": {"job_id": -1, "uid": 0}}).encode()
    yield json.dumps({"v": 1, "op": "register", "job": {"job_id": 5, "uid": "root"}}).encode()
    yield json.dumps({"v": 1, "op": "register", "job": {"job_id": 5, "uid": 0, "gpus": "0,1"}}).encode()
    yield json.dumps({"v": 1, "op": "register", "job": {"job_id": 5, "uid": 0, "gpus": [True]}}).encode()
    yield json.dumps({"v": 1, "op": "register", "job": {"job_id": 5, "uid": 0, "gpus": list(range(100))}}).encode()
    yield json.dumps({"v": 1, "op": "register", "job": {"job_id": 5, "uid": 0, "start": "yesterday"}}).encode()
    yield json.dumps({"v": 1, "op": "finalize", "job": {"job_id": 1.5}}).encode()
    yield json.dumps({"v": 1, "op": "finalize", "job": []}).encode()
    yield json.dumps({"v": 1, "op": "register", "job": {"job_id": 5, "uid": 0, "pad": "x" * 70000}}).encode()
    for _ in range(150):
        n = rng.randint(1, 300)
        yield bytes(rng.getrandbits(8) for _ in range(n))
    ops = sorted(protocol.OPS) + ["", None, 7]
    for _ in range(150):
        job = {rng.choice(["job_id", "uid", "gpus", "end", "start", "cpus", "x"]):
               rng.choice([None, -5, 0, 2**70, "a", [], {}, [1, "a"], 1e308, True]) for _ in range(3)}
        msg = {"v": rng.choice([1, 1, 0, "1"]), "op": rng.choice(ops), "job": job}
        if "job_id" not in job or not isinstance(job["job_id"], int) or isinstance(job["job_id"], bool) or job["job_id"] < 1:
            yield json.dumps(msg).encode()


def is_error_reply(frame: bytes, reply: dict) -> bool:
    """Judge the daemon's reply to a fuzz frame: a well-formed error, or success for a read request only."""
    if not reply["ok"]:
        assert reply["error"] and reply["v"] == 1
        return True
    assert json.loads(frame)["op"] in protocol.READ_OPS, frame[:80]
    return False


def test_fuzz_frames_get_errors_and_change_nothing(base):
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler()) as r:
        assert r.call("register", {"job_id": 7, "uid": 0, "gpus": [0]})["ok"]
        before_jobs = r.d.store.jobs()
        before_running = set(r.d.running)
        ctx = zmq.Context.instance()
        endpoint = protocol.control_endpoint(cfg)
        errors = 0
        for frame in _frames():
            s = ctx.socket(zmq.REQ)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(endpoint)
            s.send(frame)
            assert s.poll(3000), f"no reply to {frame[:60]!r}"
            reply = json.loads(s.recv())
            s.close()
            errors += is_error_reply(frame, reply)
        assert errors > 290
        # multipart requests are refused too
        s = ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send_multipart([b'{"v":1,"op":"ping"}', b"extra"])
        assert s.poll(3000) and json.loads(s.recv())["ok"] is False
        s.close()
        # a frame beyond libzmq's hard limit drops the connection; the daemon still serves others
        s = ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send(b"x" * (2 * 1024 * 1024))
        s.poll(500)
        s.close()
        assert r.call("ping")["ok"]
        after = r.d.store.jobs()
        assert [(j["job_id"], j["state"], j["gpus"]) for j in after] == [(j["job_id"], j["state"], j["gpus"]) for j in before_jobs]
        assert set(r.d.running) == before_running


NOBODY_CLIENT = r"""
import json, sys
from gpuperf.files import config
from gpuperf.daemon import client
cfg = config.defaults()
cfg.data["daemon"].update(socket_dir=sys.argv[1], user_socket_dir=sys.argv[2])
out = {}
for name, op, job, ch in [("register", "register", {"job_id": 99, "uid": 65534, "gpus": [0]}, "user"),
                          ("finalize", "finalize", {"job_id": 50}, "user"),
                          ("prolog", "prolog", {"env": {"SLURM_JOB_ID": "98", "SLURM_JOB_UID": "65534",
                                                        "SLURM_JOB_GPUS": "0"}, "config": {}}, "user"),
                          ("jobs", "jobs", None, "user"), ("own", "job", {"job_id": 51}, "user"),
                          ("other", "job", {"job_id": 50}, "user"), ("live", "live", None, "user"),
                          ("control", "ping", None, "control")]:
    try:
        out[name] = client.call(cfg, op, job, timeout_s=2, channel=ch)
    except client.DaemonUnavailable as e:
        out[name] = {"unavailable": str(e)}
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root and runuser")
def test_non_root_caller_is_refused_and_sees_only_own_jobs(base):
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler(n=2)) as r:
        assert r.call("register", {"job_id": 50, "uid": 0, "user": "root", "gpus": [0]})["ok"]
        assert r.call("register", {"job_id": 51, "uid": 65534, "user": "nobody", "gpus": [1]})["ok"]
        wait_for(lambda: r.d.latest)
        script = base / "nobody_client.py"
        script.write_text(NOBODY_CLIENT)
        os.chmod(script, 0o644)
        # nobody's own readable copy of gpuperf and pyzmq: the checkout and its venv may be private
        with OtherUserPython(("zmq",)) as py:
            p = subprocess.run([shutil.which("runuser"), "-u", "nobody", "--", *py.argv, str(script),
                                cfg.daemon.socket_dir, cfg.daemon.user_socket_dir], capture_output=True, text=True,
                               timeout=60, env=py.env)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["register"]["ok"] is False and "refused" in out["register"]["error"]
        assert out["finalize"]["ok"] is False and "refused" in out["finalize"]["error"]
        assert out["prolog"]["ok"] is False and "refused" in out["prolog"]["error"]
        assert [j["job_id"] for j in out["jobs"]["jobs"]] == [51]
        assert out["own"]["ok"] and out["own"]["state"] == "running"
        assert out["other"]["ok"] is False
        assert [g["gpu"] for g in out["live"]["gpus"]] == [1]
        assert [j["job_id"] for j in out["live"]["jobs"]] == [51]
        assert "unavailable" in out["control"]          # the 0700 directory keeps nobody out
        # nothing changed: job 50 still running, 99 and 98 never registered
        assert set(r.d.running) == {50, 51}
        # and the control socket refuses a non-root uid even if it could connect
        assert r.d.handle(b'{"v":1,"op":"ping"}', 65534, "control")["ok"] is False
        assert r.d.handle(b'{"v":1,"op":"ping"}', 0, "control")["ok"] is True


def test_overrun_skips_ticks_instead_of_queueing(base):
    cfg = make_cfg(base, interval_s=0.1)
    sampler = ScriptSampler(n=1, delay_s=0.25)
    with Running(cfg, sampler) as r:
        time.sleep(1.6)
        sweeps, skipped = r.d.stats["sweeps"], r.d.stats["skipped"]
    # each sweep takes 0.25 s: at most one per 0.3 s (its own tick + 2 skipped), never a burst
    assert sweeps <= 1.6 / 0.25 + 1
    assert skipped >= sweeps                     # every overrun skipped at least one tick


def test_attribution_mismatch_recorded(base):
    cfg = make_cfg(base)
    sampler = ScriptSampler(n=2)
    other = subprocess.Popen(["/bin/sleep", "30"], env={"SLURM_JOB_ID": "777"})
    try:
        with Running(cfg, sampler) as r:
            assert r.call("register", {"job_id": 60, "uid": 0, "gpus": [0]})["ok"]
            me = os.getpid()
            # GPU 0: a process of job 777 and one of no job; GPU 1 (unallocated): job 777's process
            sampler.processes = {0: [{"pid": other.pid}, {"pid": me}], 1: [{"pid": other.pid}]}
            wait_for(lambda: r.d.stats["mismatches"] >= 3)
            a = r.call("finalize", {"job_id": 60})["aggregates"]
            foreign = {p["pid"]: p["job_id"] for p in a["gpus"]["0"]["foreign_processes"]}
            if os.environ.get("SLURM_JOB_ID") is None:
                assert foreign == {other.pid: 777, me: None}
            else:
                assert foreign[other.pid] == 777
            ev = r.d.store.events(kind="mismatch")
            assert {(e["detail"]["gpu"], e["detail"]["pid"]) for e in ev} >= {(0, other.pid), (1, other.pid)}
    finally:
        other.kill()
        other.wait()


def test_shared_gpu_attributed_to_both_jobs(base):
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler(n=1, power_w=300.0)) as r:
        assert r.call("register", {"job_id": 70, "uid": 0, "gpus": [0]})["ok"]
        assert r.call("register", {"job_id": 71, "uid": 0, "gpus": [0]})["ok"]
        time.sleep(0.6)
        a = r.call("finalize", {"job_id": 70})["aggregates"]["gpus"]["0"]
        b = r.call("finalize", {"job_id": 71})["aggregates"]["gpus"]["0"]
    assert a["shared"] and b["shared"] and a["samples"] > 3 and b["samples"] > 3
    assert a["energy_source"] == "integrated"
    assert a["energy_j"] == pytest.approx(300.0 * a["shared_s"] / 2, rel=0.3)


def test_health_cached_and_absent(base):
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler()) as r:
        h = wait_for(lambda: (lambda x: x if x["ok"] else None)(r.call("health")))
        assert h["results"][0]["code"] == "gpu_missing"
        assert client.health(cfg) == h["results"]
        time.sleep(0.1)
        assert r.call("health", {"max_age_s": 0.01})["ok"] is False
    cfg2 = make_cfg(base / "b")
    with Running(cfg2, ScriptSampler(), health_fn=None) as r:
        rep = r.call("health")
        assert rep == {"v": 1, "ok": False, "error": "no health"}


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def test_metrics_gpu_labels_and_one_info_series(base):
    port = _free_port()
    cfg = make_cfg(base, metrics_port=port, metrics_address="127.0.0.1", metrics_job_labels=True)
    with Running(cfg, ScriptSampler(n=2, power_w=250.0), metrics=True) as r:
        assert r.call("register", {"job_id": 80, "uid": 0, "user": "alice", "gpus": [1]})["ok"]
        wait_for(lambda: r.d.stats["sweeps"] > 2)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    from prometheus_client.parser import text_string_to_metric_families

    got = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            got[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    assert got[("gpuperf_gpu_power_watts", (("gpu", "1"),))] == 250.0
    assert got[("gpuperf_gpu_mem_used_bytes", (("gpu", "0"),))] == 1000.0 * 1024 * 1024
    assert got[("gpuperf_gpu_util_gpu_ratio", (("gpu", "0"),))] == 0.5
    info = {k: v for k, v in got.items() if k[0] == "gpuperf_job_gpu_info"}
    assert info == {("gpuperf_job_gpu_info", (("gpu", "1"), ("jobid", "80"), ("user", "alice"))): 1.0}
    # no other series carries a job label
    assert not [k for k in got if k[0] != "gpuperf_job_gpu_info" and any(l in ("job", "jobid") for l, _ in k[1])]


def test_pub_stream_carries_sweeps_and_job_map(base):
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler(n=2)) as r:
        assert r.call("register", {"job_id": 90, "uid": 0, "gpus": [0, 1]})["ok"]
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"sweep")
        sub.connect(f"ipc://{cfg.daemon.socket_dir}/pub.sock")
        assert sub.poll(5000)
        topic, body = sub.recv_multipart()
        sub.close()
    msg = json.loads(body)
    assert topic == b"sweep" and msg["jobs"] == {"0": [90], "1": [90]}
    assert [g["gpu"] for g in msg["gpus"]] == [0, 1] and "processes" not in msg["gpus"][0]


def test_second_daemon_refused(base):
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler()):
        from gpuperf.daemon.server import DaemonError

        with pytest.raises(DaemonError, match="another gpuperf daemon"):
            Daemon(cfg, ScriptSampler(), health_fn=None, metrics=False).open()


def test_client_fails_fast_without_daemon(base):
    cfg = make_cfg(base)
    t0 = time.time()
    with pytest.raises(client.DaemonUnavailable):
        client.call(cfg, "ping")
    assert time.time() - t0 < 1.0


def test_top_rows_from_live_reply(base):
    from gpuperf.commands import top

    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler(n=2, power_w=210.0, util=60.0)) as r:
        assert r.call("register", {"job_id": 95, "uid": 0, "user": "root", "gpus": [1]})["ok"]
        wait_for(lambda: r.d.latest)
        live = r.call("live")
    rows = top.rows(live)
    assert [row[0] for row in rows] == ["0", "1"]
    assert rows[0][1] == "-" and rows[1][1] == "95 (root)"
    assert rows[1][2] == "60%" and rows[1][7] == "210 W"
    # an array task shows as users name it, never by its raw id alone
    assert top.rows(live, {95: "90_5"})[1][1] == "90_5 (root)"


def test_corrupt_store_is_moved_aside_and_replaced(base):
    cfg = make_cfg(base)
    store = Path(cfg.general.state_dir) / "daemon.sqlite"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"this is not a database" * 100)
    with Running(cfg, ScriptSampler()) as r:
        assert r.call("register", {"job_id": 3, "uid": 0, "gpus": [0]})["ok"]
        assert r.call("job", {"job_id": 3})["state"] == "running"
    kept = list(store.parent.glob("daemon.sqlite.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not a database")


def test_store_failure_costs_sweeps_not_the_daemon(base):
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler()) as r:
        assert r.call("register", {"job_id": 4, "uid": 0, "gpus": [0]})["ok"]
        wait_for(lambda: r.d.stats["sweeps"] > 2)
        # the store refuses writes, as on a full disk
        orig = r.d.store.add_samples

        def failing(samples):
            raise sqlite3.OperationalError("database or disk is full")

        r.d.store.add_samples = failing
        wait_for(lambda: r.d.stats["errors"] >= 3)
        assert r.call("ping")["ok"]
        r.d.store.add_samples = orig
        n = r.d.stats["sweeps"]
        wait_for(lambda: r.d.stats["sweeps"] > n + 2)
        assert r.call("finalize", {"job_id": 4})["ok"]
