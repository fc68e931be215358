"""Issue 36 (security, round 3): no user can flood root's log, stall the daemon's loop or probe root's files.

One test per finding that fails on the code before the fix, and one that the harm is absent (the code's
structure, or the ordinary case still answered). Findings: 1 a plan or request whose error text is huge,
logged with its traceback at the request rate; 2 a ``/proc/PID/environ`` read that never returns, on the
daemon's loop thread; 3 a step id that names a path; 4 "not yours" against "not known here"; 5 a large
plan parsed again at every request.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path

import pytest

from gpuperf.daemon import hooksock, hostusage, ratelimit, usersock
from gpuperf.daemon.attribution import Attributor
from gpuperf.daemon.procread import Deadline
from gpuperf.env.plan import EnvPlan, EnvVar
from gpuperf.files import config, jobstate, jsonlite
from gpuperf.prolog import taskdaemon
from test_daemon import Running, ScriptSampler, base, make_cfg, wait_for  # noqa: F401 - base: a fixture
from test_daemon_parts import _ask, _ops

GPUPERF = Path(__file__).resolve().parents[2] / "gpuperf"


class LogBytes(logging.Handler):
    """Counts what reaches gpuperf's log: lines and bytes."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def bytes(self) -> int:
        return sum(len(x) + 1 for x in self.lines)


@pytest.fixture
def logged():
    h = LogBytes()
    lg = logging.getLogger("gpuperf")
    lg.addHandler(h)
    old = lg.level
    lg.setLevel(logging.DEBUG)
    yield h
    lg.removeHandler(h)
    lg.setLevel(old)


def _plan(n: int = 3, skipped: list | None = None) -> dict:
    plan = EnvPlan([EnvVar(f"NCCL_X{i}", str(i), "because " * 4, "default:x") for i in range(n)]).to_dict()
    if skipped is not None:
        plan["skipped"] = skipped
    return plan


def _taskenv_ops(tmp_path, plan: dict | str, job_id: int = 77):
    ops, jobs, _, _ = _ops(tmp_path)
    ops.taskenv = taskdaemon.run
    cfg = ops.cfg
    d = jobstate.job_dir(cfg.general.run_dir, job_id)
    d.mkdir(parents=True, exist_ok=True)
    p = d / "env.json"
    p.write_text(plan if isinstance(plan, str) else jsonlite.dumps(plan))
    os.chmod(p, 0o600)
    return ops, cfg


def _taskenv(ops, cfg, uid: int = 0, **env: str) -> dict:
    job = {"env": {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", **env},
           "config": {"source": cfg.source, "digest": config.digest(cfg)}, "cpus": 4}
    return _ask(ops, "taskenv", job, uid=uid)


# finding 1: root's log ---------------------------------------------------------------------------------------


def test_a_plan_holding_a_900000_character_key_is_a_one_line_refusal_and_costs_roots_log_nothing(tmp_path, logged):
    ops, cfg = _taskenv_ops(tmp_path, _plan(skipped=[{"name": "x", "reason": "r", "rule": "q", "k" * 900_000: 1}]))
    for _ in range(50):
        rep = _taskenv(ops, cfg)
        assert rep["ok"] and rep["done"] is False and len(rep["why"]) <= 200 and "kkkk" not in rep["why"]
    # before: each request logged its traceback with the key, ~0.9 MB a request
    assert logged.bytes < 4096, (len(logged.lines), logged.bytes)


def test_a_5000_digit_cpus_per_task_is_refused_without_a_traceback(tmp_path, logged):
    ops, cfg = _taskenv_ops(tmp_path, _plan())
    for _ in range(50):
        rep = _taskenv(ops, cfg, SLURM_CPUS_PER_TASK="9" * 5000)
        assert rep["ok"] and len(rep.get("why") or rep.get("error") or "") <= 200
    assert not any("Traceback" in x for x in logged.lines) and logged.bytes < 4096


def test_an_op_that_raises_logs_one_short_line_within_each_users_budget(tmp_path, logged):
    ops, _, _, _ = _ops(tmp_path)

    def boom(req, uid):
        raise KeyError("z" * 100_000 + "\n2026-01-01 forged log line")

    ops.op_live = boom
    for uid in (1000, 1001):
        for _ in range(100):
            rep = _ask(ops, "live", uid=uid)
            assert not rep["ok"] and len(rep["error"]) < 300
    mine = [x for x in logged.lines if "uid 1000" in x]
    assert len(mine) == ratelimit.LOG_LINES and len([x for x in logged.lines if "uid 1001" in x]) == ratelimit.LOG_LINES
    assert all(len(x) < 600 and "\n" not in x and "Traceback" not in x for x in logged.lines)
    assert all("ops.py:" in x for x in mine)       # where it failed, not the request's data
    # the next window says how many were held back, in one line
    budget = ops.log_budget
    assert budget.take(1000, time.monotonic() + ratelimit.LOG_WINDOW_S + 1) == (True, 90)


def test_absent_no_traceback_of_a_request_is_logged_on_the_daemons_request_path():
    """Absence: nothing on the request path logs a traceback (``log.exception``, ``exc_info``)."""
    files = [GPUPERF / "daemon" / f for f in ("ops.py", "channels.py", "usersock.py", "hooksock.py", "ratelimit.py")]
    files.append(GPUPERF / "prolog" / "taskdaemon.py")
    found = [(f.name, i) for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
             if re.search(r"\.exception\(|exc_info", line)]
    assert not found, found


def test_a_malformed_plan_is_one_short_line_naming_where_never_its_text():
    bad = [{"schema": "x"}, {**_plan(), "vars": [{"name": "A" * 10_000, "value": "1"}]},
           {**_plan(), "vars": [{"name": "A", "value": "1", "k" * 1000: 2}]}, {**_plan(), "vars": "x" * 10},
           {**_plan(), "skipped": [{"name": "x"}] * 300}, {**_plan(), "notes": [["deep"]]}]
    for d in bad:
        with pytest.raises(ValueError) as e:
            EnvPlan.from_dict(d)
        assert len(str(e.value)) < 120 and "AAAA" not in str(e.value) and "kkk" not in str(e.value)
    assert EnvPlan.from_dict(_plan()).names() == ["NCCL_X0", "NCCL_X1", "NCCL_X2"]


def test_absent_a_well_formed_plan_is_still_answered(tmp_path, logged):
    ops, cfg = _taskenv_ops(tmp_path, _plan())
    rep = _taskenv(ops, cfg)
    assert rep["done"] and "export NCCL_X0=0" in rep["out"] and not logged.lines


# finding 2: a read of a process's memory that never returns ---------------------------------------------------


def _fake_proc(root: Path, pid: int, *, job: int | None, fifo: bool = False) -> Path:
    f = ["S", "1"] + ["0"] * 43
    f[19] = "5000"
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (x) " + " ".join(f) + "\n")
    (d / "cgroup").write_text("0::/\n")
    env = d / "environ"
    if fifo:   # stands in for a FUSE page under the environment: opening or reading it never returns
        os.mkfifo(env)
    else:
        env.write_bytes(b"PATH=/bin\0" + (f"SLURM_JOB_ID={job}\0".encode() if job is not None else b""))
    return env


def _release(fifo: Path) -> None:
    """Let a thread blocked on the FIFO go (open it for writing, close it: the reader sees its end)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


def test_a_process_whose_environ_read_blocks_is_skipped_and_named_and_the_scan_goes_on(tmp_path, logged):
    proc = tmp_path / "proc"
    stuck = _fake_proc(proc, 300, job=None, fifo=True)
    _fake_proc(proc, 301, job=42)
    attr = Attributor(proc_root=str(proc), deadline=Deadline(deadline_s=0.2))
    out: dict = {}
    th = threading.Thread(target=lambda: out.update(hostusage.scan_jobs(attr, {42})), daemon=True)
    th.start()
    th.join(5)   # before: the scan's thread blocked for ever on the FIFO
    try:
        assert not th.is_alive(), "the host scan blocked on a process's environment"
        assert set(out[42].procs) == {"301:5000"}
        assert 300 in attr.deadline.stuck
        assert any("pid 300" in x and "did not answer" in x for x in logged.lines)
        # the next scan skips it at once: no second wait, no second line
        t0 = time.monotonic()
        hostusage.scan_jobs(attr, {42})
        assert time.monotonic() - t0 < 0.2 and sum("pid 300" in x for x in logged.lines) == 1
    finally:
        _release(stuck)


def test_a_user_whose_reads_hang_costs_at_most_its_share_of_threads(tmp_path, logged):
    proc = tmp_path / "proc"
    fifos = [_fake_proc(proc, 400 + i, job=None, fifo=True) for i in range(10)]
    dl = Deadline(deadline_s=0.05, max_per_uid=3)
    attr = Attributor(proc_root=str(proc), deadline=dl)
    try:
        before = threading.active_count()
        for i in range(10):
            assert attr.job_of(400 + i) is None
        assert len(dl.stuck) == 3 and threading.active_count() - before <= 3
        assert any("reads of its processes' memory hang" in x for x in logged.lines)
    finally:
        for f in fifos:
            _release(f)


@pytest.mark.parametrize("deadline_s", [0.2, 30.0])
def test_a_process_whose_environ_read_blocks_leaves_sampling_hooks_and_the_user_socket_answering(base, deadline_s):
    """A GPU process whose environment read never returns. With the daemon's deadline (0.2 s) everything goes on;
    with one of 30 s (the loop stuck for that long) the hooks are still answered on their own thread."""
    proc = base / "proc"
    fifo = _fake_proc(proc, 300, job=None, fifo=True)
    cfg = make_cfg(base)
    sampler = ScriptSampler(n=2)
    sampler.processes = {0: [{"pid": 300, "used_mib": 100.0}]}
    attr = Attributor(proc_root=str(proc), deadline=Deadline(deadline_s=deadline_s))
    try:
        with Running(cfg, sampler, attributor=attr) as r:
            wait_for(lambda: 300 in attr.deadline.stuck or attr.deadline._q is not None)
            t0 = time.monotonic()
            reg = hooksock.call(cfg.daemon.socket_dir, "register", {"job_id": 41, "uid": 0, "user": "root",
                                                                   "gpus": [1], "cpus": 4}, 3.0)
            assert reg["ok"] and time.monotonic() - t0 < 2.0, reg
            if deadline_s < 1:
                sweeps = r.d.stats["sweeps"]
                assert usersock.call(cfg.daemon.user_socket_dir, "ping", None, 3.0)["ok"]
                wait_for(lambda: r.d.stats["sweeps"] >= sweeps + 5)
                assert 300 in attr.deadline.stuck and 41 in r.d.running
            _release(fifo)   # the stuck read returns: the loop (30 s case) goes on and stops
    finally:
        _release(fifo)


def test_absent_a_process_whose_read_returns_is_attributed_and_nothing_is_logged(tmp_path, logged):
    proc = tmp_path / "proc"
    _fake_proc(proc, 500, job=7)
    attr = Attributor(proc_root=str(proc))
    assert attr.job_and_profiler(500) == (7, None) and not attr.deadline.stuck and not logged.lines


# finding 3: requests name nothing ------------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["/../../../../etc/gpuperf/x", "../env", "0/../../x", "batch\n", "1" * 11, ""])
def test_a_step_id_that_is_not_slurms_is_refused_and_nothing_is_looked_at(tmp_path, monkeypatch, step):
    ops, cfg = _taskenv_ops(tmp_path, _plan())
    looked: list[str] = []
    real = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: looked.append(str(p)) or real(p))
    rep = _taskenv(ops, cfg, SLURM_STEP_ID=step)
    if step == "":
        assert rep["done"]   # unset: Slurm's own "unknown"
    else:
        assert rep["done"] is False and "step id" in rep["why"] and "out" not in rep
    assert not looked   # before: os.path.exists(<run_dir>/jobs/77/env/step-<step>.json) told what was there


def test_a_reply_says_nothing_about_what_a_directory_holds(tmp_path):
    ops, cfg = _taskenv_ops(tmp_path, _plan())
    first = _taskenv(ops, cfg)
    rec = Path(first["record_path"])
    rec.parent.mkdir(parents=True, exist_ok=True)
    rec.write_text("{}")
    again = _taskenv(ops, cfg)
    # before: record_path left out once the record existed; the client's O_EXCL keeps the first one instead
    assert again["record_path"] == first["record_path"] and again["out"] == first["out"]


@pytest.mark.parametrize("job", ["77/../../x", "8_3", "12.0", "9" * 40, "-1", "0x4d"])
def test_a_job_id_that_is_not_one_is_refused(tmp_path, job):
    ops, cfg = _taskenv_ops(tmp_path, _plan())
    rep = _taskenv(ops, cfg, SLURM_JOB_ID=job)
    assert rep["done"] is False and "job id" in rep["why"]


def test_absent_the_taskenv_path_looks_up_no_path_a_request_names():
    """Absence: the daemon's TaskProlog tests no path for existence (the plan, read through safeio, is the one file)."""
    text = (GPUPERF / "prolog" / "taskdaemon.py").read_text()
    assert not re.search(r"os\.path\.(l?exists|isfile|isdir)\(|os\.access\(|\.exists\(\)", text)


# finding 4: one answer for "not yours" and "not known" ---------------------------------------------------------


def test_another_users_running_or_finished_job_gets_the_answer_of_one_never_seen(tmp_path):
    ops, jobs, _, _ = _ops(tmp_path)
    jobs.register({"job_id": 8, "uid": 1000, "gpus": [0]})
    running = _ask(ops, "job", {"job_id": 8}, uid=1001)
    unknown = _ask(ops, "job", {"job_id": 9}, uid=1001)
    assert running["error"].replace("8", "N") == unknown["error"].replace("9", "N")   # before: "is not yours"
    jobs.finalize(8, None, partial=False)
    assert _ask(ops, "job", {"job_id": 8}, uid=1001)["error"].replace("8", "N") == unknown["error"].replace("9", "N")
    assert _ask(ops, "series", {"job_id": 8}, uid=1001)["error"].replace("8", "N") == unknown["error"].replace("9", "N")


def test_absent_no_reply_of_the_daemon_says_not_yours():
    assert "is not yours" not in (GPUPERF / "daemon" / "ops.py").read_text()


# finding 5: work per request ----------------------------------------------------------------------------------


def test_a_plan_over_its_bound_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    big = _plan(3000)   # the finding's 941 KB plan of 3,000 variables
    ops, cfg = _taskenv_ops(tmp_path, big)
    assert len(jsonlite.dumps(big)) > taskdaemon.PLAN_MAX_BYTES
    parsed: list[int] = []
    real = EnvPlan.from_dict
    monkeypatch.setattr(EnvPlan, "from_dict", staticmethod(lambda d: parsed.append(1) or real(d)))
    rep = _taskenv(ops, cfg)
    assert rep["done"] is False and "limit" in rep["why"] and not parsed   # before: parsed and answered


def test_the_same_plan_is_parsed_once_however_often_it_is_asked_for(tmp_path, monkeypatch):
    ops, cfg = _taskenv_ops(tmp_path, _plan(), job_id=77)
    taskdaemon._plans.clear()
    reads: list[str] = []
    real = taskdaemon.safeio.read_json
    monkeypatch.setattr(taskdaemon.safeio, "read_json", lambda p, **kw: reads.append(str(p)) or real(p, **kw))
    for _ in range(20):
        assert _taskenv(ops, cfg)["done"]
    assert len(reads) == 1                              # before: read and parsed 20 times
    p = jobstate.job_dir(cfg.general.run_dir, 77) / "env.json"
    p.write_text(jsonlite.dumps(_plan(4)))              # a new version of the file is read again
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert "NCCL_X3" in _taskenv(ops, cfg)["out"] and len(reads) == 2
    # another user is not served from the cache: the owner is checked at each request
    assert _taskenv(ops, cfg, uid=4242)["done"] is False


def test_a_user_over_their_cpu_budget_is_refused_and_another_user_is_not():
    b = ratelimit.CpuBudget(rate=0.25, burst_s=1.0)
    now = 100.0
    assert b.allow(1000, now)
    b.charge(1000, 1.5, now)
    assert not b.allow(1000, now + 1.0) and b.allow(1001, now + 1.0)
    assert b.allow(1000, now + 2.1)   # 0.25 CPU s a second refills the debt


def test_absent_the_daemon_never_reads_a_plan_larger_than_its_bound(tmp_path):
    ops, cfg = _taskenv_ops(tmp_path, _plan(20))
    rep = _taskenv(ops, cfg)
    assert rep["done"] and len(jsonlite.dumps(_plan(20))) < taskdaemon.PLAN_MAX_BYTES // 4


def test_the_user_socket_refuses_a_user_past_their_cpu_budget(tmp_path):
    """Finding 5 through the real listener: requests that each cost 0.2 CPU s are served while the uid's budget
    lasts (0.25 CPU s, refilled at 0.05 a second: two of them), then refused before they run."""
    from gpuperf.daemon import protocol
    from gpuperf.daemon.channels import Channels
    from test_daemon_parts import LOG
    from test_daemon_parts_more import _serve_until

    cfg = make_cfg(tmp_path)
    (tmp_path / "sock").mkdir(mode=0o700)
    ran: list[int] = []

    def costly(frame: bytes, uid, channel: str) -> dict:
        t = time.thread_time()
        while time.thread_time() - t < 0.2:
            pass
        ran.append(1)
        return protocol.ok()

    ch = Channels(cfg, LOG, {"requests": 0, "bad_requests": 0})
    try:
        replies = [_serve_until(ch, costly, lambda: usersock.call(str(tmp_path / "usock"), "jobs", None, 5.0))
                   for _ in range(6)]
    finally:
        ch.close()
    refused = [r for r in replies if not r["ok"]]
    assert len(ran) in (2, 3) and len(refused) == 6 - len(ran)    # before: all six ran (no CPU budget)
    assert all("share of the daemon's CPU time" in r["error"] for r in refused)
