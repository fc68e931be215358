"""More of the daemon's parts one at a time (issue 25), each built alone with its explicit dependencies:
the loop's timing (``chores.Ticks``) and chores (``chores.Chores``), the host scan (``hostscan.HostScanner``,
over a procfs and sysfs written in tmp_path), the GPU error counters (``workers.ErrorCounters``), the
cached health checks (``workers.Health``) and the idle-node probe (``workers.ProbeLoop``) on fake clocks
and stop flags, and the sockets (``channels.Channels``, bound in tmp_path, asked over loopback only).
No Slurm, no GPU, no daemon."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import zmq

from gpuperf.checks import probe
from gpuperf.daemon import channels as channels_mod
from gpuperf.daemon import hooksock, protocol, usersock
from gpuperf.daemon.attribution import Attributor
from gpuperf.daemon.channels import Channels
from gpuperf.daemon.chores import Chore, Chores, Ticks
from gpuperf.daemon.hostscan import HostScanner
from gpuperf.daemon.jobs import Jobs, NodeFacts, Registry, RunningJob
from gpuperf.daemon.workers import ErrorCounters, Health, ProbeLoop
from gpuperf.model.aggregates import JobAggregates
from test_daemon import make_cfg
from test_daemon_parts import LOG, Clock, FakeStore


class RecLog:
    """A logger that keeps what it was told, by level."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {"info": [], "warning": [], "error": []}

    def _at(self, level: str, msg: str, *args: Any) -> None:
        self.lines[level].append(msg % args if args else msg)

    def info(self, msg: str, *args: Any) -> None:
        self._at("info", msg, *args)

    def warning(self, msg: str, *args: Any) -> None:
        self._at("warning", msg, *args)

    def error(self, msg: str, *args: Any) -> None:
        self._at("error", msg, *args)


class FakeStop:
    """A stop flag whose ``wait(s)`` returns at once: it records ``s``, moves ``clock`` on by it, and turns
    set after ``waits`` waits (what ``threading.Event.wait`` returns: whether it is set)."""

    def __init__(self, waits: int, clock: Clock | None = None) -> None:
        self.left, self.clock, self.waited = waits, clock, []
        self.set_ = False

    def is_set(self) -> bool:
        return self.set_

    def wait(self, s: float) -> bool:
        self.waited.append(s)
        if self.clock is not None:
            self.clock.t += s
        self.left -= 1
        self.set_ = self.set_ or self.left <= 0
        return self.set_


# chores.Ticks / chores.Chores -------------------------------------------------------------------

def test_ticks_wait_round_up_are_capped_and_an_overrun_skips_the_ticks_it_covered():
    now = [100.0]
    ticks = Ticks(1.0, now=lambda: now[0])
    assert ticks.due() and ticks.wait_ms(500) == 0          # the first tick is at once
    assert ticks.advance() == 0 and ticks.next == 101.0 and not ticks.due()
    now[0] = 100.9996
    assert ticks.wait_ms(500) == 1                           # 0.4 ms: rounded up, never a 0 ms spin
    now[0] = 100.2
    assert ticks.wait_ms(500) == 500 and ticks.wait_ms(10_000) == 800
    now[0] = 101.0
    assert ticks.due()
    now[0] = 104.5                                           # the sweep at 101 took 3.5 s
    assert ticks.advance() == 3 and ticks.next == 105.0      # 102, 103, 104 skipped, never queued
    now[0] = 105.0
    assert ticks.due() and ticks.advance() == 0 and ticks.next == 106.0


def test_chores_run_in_order_when_due_and_not_before():
    ran: list[tuple[str, float]] = []
    busy = [False]
    chores = Chores([
        Chore("fast", 10.0, lambda t: ran.append(("fast", t))),
        Chore("slow", 60.0, lambda t: ran.append(("slow", t))),
        Chore("host", 10.0, lambda t: ran.append(("host", t)), only_if=lambda: busy[0]),
    ])
    chores.run_due(1000.0)
    assert ran == [("fast", 1000.0), ("slow", 1000.0)]       # never run: due at once; "host" only with jobs
    ran.clear()
    chores.run_due(1009.9)
    assert ran == []                                         # nothing's period has passed
    busy[0] = True
    chores.run_due(1010.0)
    assert ran == [("fast", 1010.0), ("host", 1010.0)]       # the gated one runs as soon as its condition holds
    ran.clear()
    for t in (1015.0, 1019.0):
        chores.run_due(t)
    assert ran == []
    chores.run_due(1060.0)
    assert ran == [("fast", 1060.0), ("slow", 1060.0), ("host", 1060.0)]
    assert chores.last == {"fast": 1060.0, "slow": 1060.0, "host": 1060.0}


def test_a_failing_chore_propagates_stops_the_pass_and_waits_its_period():
    ran: list[str] = []

    def boom(t: float) -> None:
        ran.append("boom")
        raise OSError("disk full")

    chores = Chores([Chore("boom", 10.0, boom), Chore("after", 10.0, lambda t: ran.append("after"))])
    with pytest.raises(OSError):
        chores.run_due(100.0)
    assert ran == ["boom"]                       # the sweep's caller sees it; the rest wait for the next pass
    chores.run_due(101.0)
    assert ran == ["boom", "after"]              # the failed one is not retried every sweep
    assert chores.last == {"boom": 100.0, "after": 101.0}


# hostscan.HostScanner ---------------------------------------------------------------------------

TCK = os.sysconf("SC_CLK_TCK")
PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def _proc(root: Path, pid: int, ppid: int, *, job: int | None = None, utime: int = 0, stime: int = 0,
          rss_pages: int = 0, start: int = 5000, cgroup: str = "0::/user.slice\n") -> None:
    """/proc/PID/{stat,environ,cgroup} of a fake process (``job``: its SLURM_JOB_ID)."""
    f = ["S", str(ppid)] + ["0"] * 43
    f[11], f[12], f[19], f[21] = str(utime), str(stime), str(start), str(rss_pages)
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (py thon) " + " ".join(f) + "\n")
    (d / "environ").write_bytes(b"PATH=/bin\0" + (f"SLURM_JOB_ID={job}\0".encode() if job is not None else b""))
    (d / "cgroup").write_text(cgroup)


def _counter(path: Path, value: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value:g}\n")


def _net(sysroot: Path, rx: float, tx: float, ib_rx: float) -> None:
    for dev, r, t in (("eth0", rx, tx), ("lo", 9e9, 9e9)):
        _counter(sysroot / "class" / "net" / dev / "statistics" / "rx_bytes", r)
        _counter(sysroot / "class" / "net" / dev / "statistics" / "tx_bytes", t)
    port = sysroot / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    _counter(port / "port_rcv_data", ib_rx)
    _counter(port / "port_xmit_data", 0)


def _running(job_id: int, gpus: list[int]) -> RunningJob:
    return RunningJob({"job_id": job_id}, JobAggregates.new(job_id, "n1", gpus, 1000.0, 1.0))


def test_the_host_scan_charges_each_job_its_own_processes_cgroup_and_the_nodes_network(tmp_path):
    cg = "0::/slurm/job_7/step_0/task_0\n"
    _proc(tmp_path, 101, 1, job=7, utime=200, stime=100, rss_pages=256, cgroup=cg)
    _proc(tmp_path, 102, 101, utime=50, rss_pages=128, cgroup=cg)          # env cleared: its parent's job
    _proc(tmp_path, 201, 1, job=8, utime=10, rss_pages=64)
    _proc(tmp_path, 301, 1, utime=999, rss_pages=999)                        # of no job
    (tmp_path / "cgroup" / "slurm" / "job_7").mkdir(parents=True)
    (tmp_path / "cgroup" / "slurm" / "job_7" / "cpu.stat").write_text("usage_usec 42000000\nuser_usec 1\n")
    sysroot = tmp_path / "sys"
    _net(sysroot, rx=1000, tx=2000, ib_rx=10)
    running: dict[int, RunningJob] = {}
    scanner = HostScanner(running, Attributor(str(tmp_path / "proc"), str(tmp_path / "cgroup")), str(sysroot), LOG)
    running.update({7: _running(7, [0]), 8: _running(8, [1]), 9: _running(9, [2])})   # registered later: seen

    scanner.scan(1000.0)
    h7, h8, h9 = (running[j].agg.host for j in (7, 8, 9))
    assert set(h7.live) == {"101:5000", "102:5000"} and h7.procs_cpu_s == pytest.approx(350 / TCK)
    assert h7.rss_peak_mib == pytest.approx(384 * PAGE_MIB)
    assert h7.cgroup == str(tmp_path / "cgroup" / "slurm" / "job_7") and h7.cgroup_cpu_s == 42.0
    assert h7.cpu_time_s == 42.0 and h7.cpu_source == "cgroup"
    assert set(h8.live) == {"201:5000"} and h8.procs_cpu_s == pytest.approx(10 / TCK) and h8.cgroup is None
    assert h9.live == {} and h9.rss_peak_mib is None                        # no process of its own
    assert scanner.nonjob_pids == {301}                                     # of no job: not read again
    for h in (h7, h8, h9):                                                  # the node's counters, lo left out
        assert h.net_start == {"eth0": [1000.0, 2000.0], "mlx5_0:1": [40.0, 0.0]} and h.iowait_known

    _net(sysroot, rx=5000, tx=2500, ib_rx=30)
    (tmp_path / "proc" / "301" / "environ").write_bytes(b"SLURM_JOB_ID=9\0")  # would be job 9's if read again
    (tmp_path / "cgroup" / "slurm" / "job_7" / "cpu.stat").write_text("usage_usec 50000000\n")
    scanner.scan(1010.0)
    assert h9.live == {} and h7.cgroup_cpu_s == 50.0
    assert h7.to_dict(10.0)["net_bytes"] == {"eth0": {"rx_bytes": 4000.0, "tx_bytes": 500.0},
                                             "mlx5_0:1": {"rx_bytes": 80.0, "tx_bytes": 0.0}}


def test_the_host_scan_forgets_gone_pids_and_a_failed_scan_changes_nothing(tmp_path):
    _proc(tmp_path, 301, 1)
    _proc(tmp_path, 101, 1, job=7, utime=100)
    (tmp_path / "proc" / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "kernel" / "task_delayacct").write_text("0\n")   # no I/O delay accounting
    running = {7: _running(7, [0])}
    attr = Attributor(str(tmp_path / "proc"), str(tmp_path / "cgroup"))
    scanner = HostScanner(running, attr, str(tmp_path / "sys"), LOG)
    scanner.scan()
    host = running[7].agg.host
    assert scanner.nonjob_pids == {301} and set(host.live) == {"101:5000"} and host.iowait_known is False
    for name in ("stat", "environ", "cgroup"):
        (tmp_path / "proc" / "301" / name).unlink()
    (tmp_path / "proc" / "301").rmdir()
    scanner.scan()
    assert scanner.nonjob_pids == set()                                    # a pid gone is not kept

    class Broken(Attributor):
        def job_of_known(self, pid: int, ppid: int, start_ticks: int) -> int | None:
            raise RuntimeError("procfs went away")

    log = RecLog()
    before = host.to_state()
    HostScanner(running, Broken(str(tmp_path / "proc")), str(tmp_path / "sys"), log).scan()
    assert host.to_state() == before and log.lines["warning"] == ["host scan failed: RuntimeError: procfs went away"]


# workers.ErrorCounters ----------------------------------------------------------------------------

def _snapshot(nvlink: int, remapped: int) -> dict:
    gpu = {"ecc": {"volatile_uncorrected": 0, "volatile_corrected": 3},
           "row_remap": {"correctable": remapped, "uncorrectable": 0},
           "nvlink": {"links": [{"errors": {"replay": nvlink, "crc": 1}}, {"errors": {"replay": 0}}]}}
    return {"gpus": [dict(gpu, index=0), dict(gpu, index=1, nvlink={"links": []}), {"no": "index"}]}


def test_error_counters_keep_the_latest_read_whole_and_jobs_are_charged_their_growth():
    ec = ErrorCounters()
    assert ec.get() == {}
    ec.note(_snapshot(nvlink=5, remapped=1))
    first = ec.get()
    assert first == {"0": {"ecc_uncorrected": 0, "ecc_corrected": 3, "remapped_rows": 1, "nvlink_errors": 6},
                     "1": {"ecc_uncorrected": 0, "ecc_corrected": 3, "remapped_rows": 1}}
    jobs = Jobs(FakeStore(), Registry(), NodeFacts("n1", 1.0, {}), clock=Clock(), read_energy=dict,
                error_counters=ec.get, hand_over=lambda a, c: None, on_change=lambda: None,
                state_dir="/nonexistent", log=LOG)
    jobs.register({"job_id": 3, "uid": 0, "gpus": [0, 1]})
    ec.note(_snapshot(nvlink=45, remapped=3))
    assert first["0"]["nvlink_errors"] == 6      # a new read replaces the counters: what a reader holds stays whole
    aggs = jobs.finalize(3, None, partial=False)
    assert aggs["gpus"]["0"]["error_growth"] == {"ecc_uncorrected": 0, "ecc_corrected": 0, "remapped_rows": 2,
                                                 "nvlink_errors": 40}
    assert aggs["gpus"]["1"]["error_growth"] == {"ecc_uncorrected": 0, "ecc_corrected": 0, "remapped_rows": 2}


# workers.Health ---------------------------------------------------------------------------------

def test_health_caches_each_run_and_refreshes_every_interval_until_stopped():
    clock = Clock(500.0)
    calls: list[float] = []

    def checks() -> list[dict]:
        calls.append(clock.t)
        return [{"code": "gpu_missing", "status": "ok", "n": len(calls)}]

    stop = FakeStop(waits=3, clock=clock)
    h = Health(checks, 30.0, clock, stop)
    assert h.result is None                                  # none before the first run
    t = h.thread()
    assert t.name == "health" and t.daemon and not t.is_alive()
    t.run()                                                  # its loop, here: returns once stopped
    assert calls == [500.0, 530.0, 560.0] and stop.waited == [30.0, 30.0, 30.0]
    assert h.result == {"t": 560.0, "results": [{"code": "gpu_missing", "status": "ok", "n": 3}]}
    clock.t = 999.0
    assert h.result["t"] == 560.0 and len(calls) == 3        # reading it runs nothing
    h.refresh()
    assert h.result["t"] == 999.0 and len(calls) == 4


def test_health_that_raises_is_cached_as_an_error_and_the_loop_goes_on():
    clock = Clock(10.0)
    n = [0]

    def checks() -> list[dict]:
        n[0] += 1
        if n[0] == 1:
            raise ValueError("nvidia-smi gone")
        return []

    h = Health(checks, 5.0, clock, FakeStop(waits=1, clock=clock))
    h.refresh()
    assert h.result == {"t": 10.0, "error": "ValueError: nvidia-smi gone"}
    h.thread().run()
    assert h.result == {"t": 10.0, "results": []} and n[0] == 2


# workers.ProbeLoop ------------------------------------------------------------------------------------

def test_probe_loop_probes_only_while_the_node_is_idle_and_keeps_an_ok_run(tmp_path, monkeypatch):
    assert not ProbeLoop.wanted(make_cfg(tmp_path))           # opt-in
    cfg = make_cfg(tmp_path)
    cfg.data["fleet"].update(probe_every_s=600, probe_python="/opt/cuda-python")
    assert ProbeLoop.wanted(cfg)
    # one answer per period, and one more for each probe's keep_going: idle, idle; busy; idle, then a job
    answers = [False, True, True, False, True, False]
    probes: list[bool] = []
    gpus = [{"index": 0, "name": "H100", "uuid": "GPU-0", "gemm_tflops": 700.0},
            {"index": 1, "name": "H100", "uuid": "GPU-1", "gemm_tflops": 400.0}]

    def run(c: Any, keep_going: Any = None, **_: Any) -> probe.ProbeRun:
        assert c is cfg
        probes.append(keep_going())                          # False: the probe is to stop (a job started)
        return probe.ProbeRun("ok", gpus=gpus, t=1.8e9)

    monkeypatch.setattr(probe, "run", run)
    stop = FakeStop(waits=5)                                 # four periods, then stopped
    log = RecLog()
    loop = ProbeLoop(cfg, lambda: answers.pop(0), log, stop)
    assert loop.last is None
    loop.thread().run()
    assert stop.waited == [600] * 5 and answers == []        # each period waited for, idleness asked each time
    assert probes == [True, False]                           # the two idle periods of four probed, no other
    assert loop.last["status"] == "ok" and loop.last["gpus"] == gpus
    kept = probe.load(cfg.general.state_dir)
    assert kept["1"]["probe_tflops"] == 400.0 and kept["0"]["probe_tflops"] == 700.0
    assert [ln for ln in log.lines["warning"] if "GPU 1 (GPU-1) slower than its peers" in ln]


def test_a_probe_that_did_not_run_to_the_end_is_not_kept(tmp_path, monkeypatch):
    cfg = make_cfg(tmp_path)
    cfg.data["fleet"].update(probe_every_s=60, probe_python="/opt/cuda-python")
    monkeypatch.setattr(probe, "run", lambda c, keep_going=None, **_: probe.ProbeRun("unavailable", "stopped: a job started"))
    log = RecLog()
    loop = ProbeLoop(cfg, lambda: True, log, threading.Event())
    loop.probe_once()
    assert loop.last["status"] == "unavailable" and probe.load(cfg.general.state_dir) == {}
    assert log.lines["info"] == ["probe unavailable: stopped: a job started"]


# channels.Channels -----------------------------------------------------------------------------------

def _serve_until(ch: Channels, handle: Any, ask: Any) -> Any:
    """Run ``ask()`` in a thread (a client waits for its reply) while ``ch`` serves here, as the loop does."""
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(ask()), daemon=True)
    t.start()
    for _ in range(400):
        if not t.is_alive():
            break
        ch.serve(25, handle)
    t.join(1)
    assert got, "the client got no reply"
    return got[0]


def _ask_control(cfg: Any, frames: list[bytes]) -> dict:
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(protocol.control_endpoint(cfg))
        s.send_multipart(frames)
        assert s.poll(10_000), "no reply on the control socket"
        return json.loads(s.recv())
    finally:
        s.close(0)
        ctx.term()


def test_channels_bind_in_their_directories_answer_each_socket_with_the_callers_uid_and_close(tmp_path):
    cfg = make_cfg(tmp_path)
    sock_dir, user_dir = tmp_path / "sock", tmp_path / "usock"
    sock_dir.mkdir(mode=0o700)                  # the daemon's lock (startup.take_lock) makes it first
    stats: dict[str, float] = {"requests": 0, "bad_requests": 0}
    seen: list[tuple[str, str, int | None]] = []

    def handle(frame: bytes, uid: int | None, channel: str) -> dict:
        seen.append((json.loads(frame)["op"], channel, uid))
        return protocol.ok(channel=channel, uid=uid)

    ch = Channels(cfg, LOG, stats)
    try:
        assert sorted(p.name for p in sock_dir.iterdir()) == ["control.sock", "hook.sock", "pub.sock"]
        assert (sock_dir / "hook.sock").stat().st_mode & 0o777 == 0o600
        assert user_dir.stat().st_mode & 0o777 == 0o755 and (user_dir / "user.sock").stat().st_mode & 0o777 == 0o666
        assert ch.pub is not None and ch.pub.endpoint == channels_mod.pub_endpoint(cfg)
        me = os.getuid()
        user = _serve_until(ch, handle, lambda: usersock.call(str(user_dir), "jobs", None, 5.0))
        hook = _serve_until(ch, handle, lambda: hooksock.call(str(sock_dir), "ping", {}, 5.0))
        control = _serve_until(ch, handle, lambda: _ask_control(cfg, [protocol.encode(protocol.request("ping"))]))
        assert (user["channel"], hook["channel"], control["channel"]) == ("user", "hook", "control")
        assert user["uid"] == hook["uid"] == control["uid"] == me        # SO_PEERCRED on each socket
        assert seen == [("jobs", "user", me), ("ping", "hook", me), ("ping", "control", me)]
        two = _serve_until(ch, handle, lambda: _ask_control(cfg, [b"{}", b"{}"]))
        assert two["ok"] is False and two["error"] == "one frame per request"
        assert len(seen) == 3 and stats["bad_requests"] == 1             # answered by Channels, never handled
    finally:
        ch.close()
    assert not (sock_dir / "hook.sock").exists() and not (user_dir / "user.sock").exists()
    with pytest.raises(hooksock.HookSocketUnavailable):
        hooksock.call(str(sock_dir), "ping", {}, 1.0)
    Channels(cfg, LOG, stats).close()           # everything was released: the same paths bind again
