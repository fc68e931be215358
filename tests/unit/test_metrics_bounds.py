"""/metrics under a network peer (issue 28, finding 8): localhost by default, job ids and users only where the
admin turns them on, and a slow-loris cannot grow the daemon's threads."""

from __future__ import annotations

import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_daemon import Running, ScriptSampler, _free_port, base, make_cfg, wait_for  # noqa: E402,F401

from gpuperf.daemon import metrics  # noqa: E402


def _other_address() -> str | None:
    """An address of this host other than loopback (None when it has none)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 9))
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def test_by_default_metrics_listen_on_localhost_only_and_name_no_job_or_user(base):
    port = _free_port()
    cfg = make_cfg(base, metrics_port=port)     # metrics_address and metrics_job_labels as shipped
    with Running(cfg, ScriptSampler(n=2), metrics=True) as r:
        assert r.call("register", {"job_id": 80, "uid": 0, "user": "alice", "gpus": [1]})["ok"]
        wait_for(lambda: r.d.stats["sweeps"] > 2)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        # another loopback address reaches a socket bound to every address, never one bound to 127.0.0.1
        # (so this holds on a host with no other address too)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.2", port), timeout=2).close()
        other = _other_address()
        if other is not None:
            with pytest.raises(OSError):
                socket.create_connection((other, port), timeout=2).close()
    assert "gpuperf_gpu_power_watts" in text
    assert "gpuperf_job_gpu_info" not in text and "alice" not in text and 'jobid="80"' not in text


def _server(view=None, job_labels=False) -> tuple[metrics.BoundedServer, int]:
    port = _free_port()
    srv = metrics.serve(view or (lambda: {"samples": [], "jobs": [(7, "bob", [0])], "stats": {}}), port,
                        "127.0.0.1", job_labels)
    return srv, port


def test_job_labels_where_the_admin_turns_them_on():
    srv, port = _server(job_labels=True)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        srv.shutdown()
        srv.server_close()
    assert 'gpuperf_job_gpu_info{gpu="0",jobid="7",user="bob"} 1.0' in text


def test_anything_but_get_is_405_as_prometheus_clients_server_answered():
    # the report tells a Prometheus from another server by it (test_report_prometheus.py, case "error")
    srv, port = _server()
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/query", data=b"q=1"),
                                   timeout=5)
    finally:
        srv.shutdown()
        srv.server_close()
    assert e.value.code == 405


def test_a_slow_loris_cannot_grow_the_threads_beyond_the_cap():
    # finding 8: 1,632 threads in 46 s. 200 connections each trickling a request line: at most MAX_CONNS threads
    srv, port = _server()
    before = threading.active_count()
    held = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metr")
            held.append(s)
        wait_for(lambda: srv.refused >= 200 - metrics.MAX_CONNS, timeout=10)   # the rest closed at accept
        assert threading.active_count() - before <= metrics.MAX_CONNS
    finally:
        for s in held:
            s.close()
        srv.shutdown()
        srv.server_close()


def _closed_within(s: socket.socket, limit_s: float) -> float | None:
    """Seconds until the server closed ``s`` (None when it did not within ``limit_s``)."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - t0 < limit_s:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def test_a_silent_connection_is_closed_at_the_read_timeout():
    srv, port = _server()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        took = _closed_within(s, metrics.DEADLINE_S - 1)
        s.close()
    finally:
        srv.shutdown()
        srv.server_close()
    assert took is not None and took < metrics.TIMEOUT_S + 2, took


def test_a_trickling_connection_is_shut_down_at_its_deadline():
    # one byte every second keeps every read within its timeout; the deadline ends it anyway
    srv, port = _server()
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    stop = threading.Event()

    def trickle():
        for b in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            if stop.wait(1.0):
                return
            try:
                s.send(bytes([b]))
            except OSError:
                return

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        took = _closed_within(s, metrics.DEADLINE_S + 5)
    finally:
        stop.set()
        s.close()
        srv.shutdown()
        srv.server_close()
    assert took is not None and took < metrics.DEADLINE_S + 2, took
