"""The daemon as a separate process: ``kill -9`` and restart mid-job (nothing stored is lost, the gap is
recorded), and the prolog/epilog steps while the daemon is down (pending markers, partial finalisation)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuperf.daemon import client
from gpuperf.hookbase.hook import HookState
from gpuperf.hookbase.jobctx import JobContext

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_daemon import base, make_cfg, wait_for  # noqa: E402,F401  (base is a fixture)

DAEMON = r"""
import signal, sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from test_daemon import ScriptSampler, make_cfg
from gpuperf.daemon.server import Daemon
cfg = make_cfg(Path(sys.argv[1]), checkpoint_s=30.0, request_timeout_s=0.5)
d = Daemon(cfg, ScriptSampler(n=2, power_w=150.0), node="n1", health_fn=None, metrics=False, send_summaries=False)
signal.signal(signal.SIGTERM, lambda *a: d.stop())
d.run()
"""


def _cfg(base):
    # checkpoints far apart: the resume must re-fold what the store holds after the last checkpoint
    return make_cfg(base, checkpoint_s=30.0, request_timeout_s=0.5)


def _start(base):
    script = base / "daemon.py"
    script.write_text(DAEMON)
    p = subprocess.Popen([sys.executable, str(script), str(base), str(HERE)], stderr=subprocess.PIPE, text=True)
    cfg = _cfg(base)

    def up():
        try:
            return client.call(cfg, "ping", timeout_s=0.3)["ok"]
        except client.DaemonUnavailable:
            assert p.poll() is None, p.stderr.read()
            return False

    wait_for(up, timeout=20)
    return p


def _kill9(p):
    p.send_signal(signal.SIGKILL)
    p.wait()


def _stored(base, gpu, t0, t1=1e18):
    db = sqlite3.connect(str(base / "state" / "daemon.sqlite"))
    try:
        return db.execute("SELECT count(*), max(t) FROM samples WHERE gpu=? AND t>=? AND t<=?", (gpu, t0, t1)).fetchone()
    finally:
        db.close()


def test_kill9_and_restart_resumes_job_with_gap(base):
    cfg = _cfg(base)
    p = _start(base)
    try:
        start = time.time()
        assert client.call(cfg, "register", {"job_id": 100, "uid": 0, "gpus": [0, 1], "start": start})["ok"]
        time.sleep(1.0)
        _kill9(p)
        n_before, last_before = _stored(base, 0, start)
        assert n_before >= 10
        time.sleep(0.8)                                       # the daemon is down
        p = _start(base)
        live = client.call(cfg, "live")
        assert [j["job_id"] for j in live["jobs"]] == [100]
        time.sleep(0.5)
        a = client.call(cfg, "finalize", {"job_id": 100})["aggregates"]
    finally:
        p.terminate()
        p.wait(10)
    n_all, _ = _stored(base, 0, start, a["end"])
    # every stored sample of the job is in its aggregates, those before the kill included
    assert a["gpus"]["0"]["samples"] == n_all > n_before
    assert len(a["gaps"]) == 1
    g0, g1 = a["gaps"][0]
    assert g0 == pytest.approx(last_before)                  # the gap starts at the last sample before the kill
    assert g1 - g0 >= 0.8
    assert a["partial"] is False
    # the counter read at register and at the end covers the gap as well: its energy is still the counter's
    assert a["gpus"]["0"]["energy_source"] == "counter"


def _ctx(job_id, gpus):
    return JobContext(hook="epilog", job_id=job_id, uid=0, user="root", gpus=gpus, node="n1")


def test_epilog_with_daemon_down_leaves_marker_and_daemon_finalises_partial(base):
    cfg = _cfg(base)
    from gpuperf.epilog import finalize

    p = _start(base)
    assert client.call(cfg, "register", {"job_id": 200, "uid": 0, "gpus": [0]})["ok"]
    time.sleep(0.5)
    _kill9(p)                                              # a stale socket file stays behind
    state = HookState()
    t0 = time.time()
    finalize.step(_ctx(200, [0]), cfg, state)
    took = time.time() - t0
    assert took < cfg.daemon.request_timeout_s + 0.5
    marker = Path(state.data["finalize"]["pending"])
    assert marker.exists() and state.data["finalize"]["ok"] is False
    end = json.loads(marker.read_text())["job"]["end"]
    p = _start(base)
    try:
        out = Path(cfg.general.run_dir) / "jobs" / "200" / "aggregates.json"
        wait_for(out.exists, timeout=10)
        a = json.loads(out.read_text())
        assert a["partial"] is True and a["end"] == pytest.approx(end)
        assert a["gpus"]["0"]["energy_source"] == "integrated"    # no counter reading at the real end
        assert not marker.exists()
        assert client.call(cfg, "job", {"job_id": 200})["state"] == "finalized"
        # samples taken after the job's end are not in it
        n, _ = _stored(base, 0, a["start"], end)
        assert a["gpus"]["0"]["samples"] == n
        # delivered as the epilog's own finalisation is: with the series the controller charts from
        summary = out.parent / "node_summary.json"
        wait_for(summary.exists, timeout=10)
        s = json.loads(summary.read_text())
        assert s["quality"]["partial"] is True and list(s["series"]["gpus"]) == ["0"], s.get("series")
    finally:
        p.terminate()
        p.wait(10)


def test_prolog_with_daemon_down_registers_later_with_gap(base):
    cfg = _cfg(base)
    from gpuperf.prolog import register

    state = HookState()
    ctx = JobContext(hook="prolog", job_id=300, uid=0, user="root", gpus=[1], node="n1")
    t0 = time.time()
    register.step(ctx, cfg, state)
    assert time.time() - t0 < 1.0
    assert Path(state.data["register"]["pending"]).exists()
    time.sleep(0.5)
    p = _start(base)
    try:
        rep = client.call(cfg, "job", {"job_id": 300})
        assert rep["state"] == "running"
        a = rep["aggregates"]
        assert a["partial"] is True and len(a["gaps"]) == 1 and a["gaps"][0][0] == pytest.approx(a["start"])
    finally:
        p.terminate()
        p.wait(10)


def test_term_checkpoints_and_restart_continues(base):
    cfg = _cfg(base)
    p = _start(base)
    assert client.call(cfg, "register", {"job_id": 400, "uid": 0, "gpus": [0]})["ok"]
    time.sleep(0.4)
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    p = _start(base)
    try:
        a = client.call(cfg, "finalize", {"job_id": 400})["aggregates"]
    finally:
        p.terminate()
        p.wait(10)
    n, _ = _stored(base, 0, a["start"], a["end"])
    assert a["gpus"]["0"]["samples"] == n


def test_job_from_before_boot_is_finalised_partial(base):
    import psutil

    cfg = _cfg(base)
    p = _start(base)
    try:
        before_boot = psutil.boot_time() - 3600
        assert client.call(cfg, "register", {"job_id": 500, "uid": 0, "gpus": [0], "start": before_boot})["ok"]
        assert client.call(cfg, "register", {"job_id": 501, "uid": 0, "gpus": [1]})["ok"]
        time.sleep(0.3)
    finally:
        _kill9(p)
    p = _start(base)                     # as after a reboot: job 500's epilog can never come
    try:
        out = Path(cfg.general.run_dir) / "jobs" / "500" / "aggregates.json"
        wait_for(out.exists, timeout=10)
        a = json.loads(out.read_text())
        assert a["partial"] is True and a["end"] <= psutil.boot_time()
        assert [j["job_id"] for j in client.call(cfg, "live")["jobs"]] == [501]
    finally:
        p.terminate()
        p.wait(10)
