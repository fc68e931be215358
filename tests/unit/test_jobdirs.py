"""run_dir job directories of jobs long over are removed, and nothing else: not a running job's, not a
link's target, not what is not a job directory; the controller only removes jobs its queue saw end."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

import pytest

from gpuperf.files import config, jobdirs
from gpuperf.controller import accounting, service

DAY = 86400.0


def _job_dir(run: Path, job: int, age_days: float, now: float) -> Path:
    d = run / "jobs" / str(job)
    d.mkdir(parents=True, exist_ok=True)
    (d / "prolog.json").write_text("{}")
    t = now - age_days * DAY
    os.utime(d, (t, t))
    return d


def test_stale_is_old_and_not_kept_oldest_first():
    now = 100 * DAY
    entries = [(1, now - 8 * DAY), (2, now - 1 * DAY), (3, now - 30 * DAY), (4, now - 9 * DAY), (5, now - 7 * DAY)]
    assert jobdirs.stale(entries, now, 7 * DAY, keep={4}) == [3, 1, 5]
    assert jobdirs.stale(entries, now, 40 * DAY, keep=set()) == []


def test_prune_removes_only_old_job_directories(tmp_path):
    now = time.time()
    run = tmp_path / "run"
    old = _job_dir(run, 101, 8, now)
    young = _job_dir(run, 102, 1, now)
    running = _job_dir(run, 103, 30, now)           # a month-long job the daemon has registered
    outside = tmp_path / "victim"
    outside.mkdir()
    (outside / "precious").write_text("x")
    (old / "applied").mkdir()
    (old / "applied" / "link").symlink_to(outside / "precious")   # planted by a job user: removed, not followed
    os.utime(old, (now - 8 * DAY,) * 2)
    (run / "jobs" / "104").symlink_to(outside)      # a link named like a job: not ours
    os.utime(run / "jobs" / "104", (now - 60 * DAY,) * 2, follow_symlinks=False)
    (run / "jobs" / "105").write_text("not a directory")
    os.utime(run / "jobs" / "105", (now - 60 * DAY,) * 2)
    notajob = run / "jobs" / "scratch"
    notajob.mkdir()
    os.utime(notajob, (now - 60 * DAY,) * 2)

    gone = jobdirs.prune(str(run), now, 7.0, keep={103})

    assert gone == [101]
    assert not old.exists() and young.is_dir() and running.is_dir() and notajob.is_dir()
    assert (run / "jobs" / "104").is_symlink() and (outside / "precious").read_text() == "x"
    assert (run / "jobs" / "105").is_file()


def test_prune_only_what_the_caller_allows_and_at_most_limit(tmp_path):
    now = time.time()
    run = tmp_path / "run"
    for j in (1, 2, 3, 4):
        _job_dir(run, j, 10 + j, now)   # 4 is the oldest
    asked: list[list[int]] = []

    def only(ids: list[int]) -> set[int]:
        asked.append(ids)
        return {2, 3, 4}

    assert jobdirs.prune(str(run), now, 7.0, only=only, limit=2) == [4, 3]
    assert asked == [[4, 3, 2, 1]]
    assert sorted(p.name for p in (run / "jobs").iterdir()) == ["1", "2"]
    assert jobdirs.prune(str(tmp_path / "none"), now, 7.0) == []   # no run_dir yet: nothing to do


def test_controller_removes_records_of_jobs_it_is_done_with(tmp_path):
    now = time.time()
    text = (f'[general]\nstate_dir = "{tmp_path}/state"\nrun_dir = "{tmp_path}/run"\nlog_file = ""\n'
            'job_dir_keep_days = 2.0\n')
    svc = service.Service(config.parse(text), accounting.StubWriter(0.0))
    try:
        run = tmp_path / "run"
        for j, state in ((11, "done"), (12, "write"), (13, "unavailable"), (14, "skipped")):
            svc.queue.add(j, ["n1"], "u", 1000, now - 5 * DAY)
            if state != "write":
                svc.queue.set_merged(j, None, state, now)
            _job_dir(run, j, 3, now)
        _job_dir(run, 15, 3, now)        # a job the queue never saw end (say, running on this host)
        _job_dir(run, 16, 1, now)        # not old enough
        svc.queue.add(16, ["n1"], "u", 1000, now - DAY)
        svc.queue.set_merged(16, None, "done", now)
        svc.tick()
        assert sorted(p.name for p in (run / "jobs").iterdir()) == ["12", "15", "16"]
    finally:
        svc.store.close()


def test_daemon_keeps_a_registered_jobs_records_whatever_their_age(tmp_path):
    from test_daemon import Running, ScriptSampler, make_cfg

    cfg = make_cfg(tmp_path)
    now = time.time()
    run = Path(cfg.general.run_dir)
    with Running(cfg, ScriptSampler(n=2)) as r:
        assert r.call("register", {"job_id": 41, "uid": 0, "user": "root", "gpus": [1]})["ok"]
        long_job = _job_dir(run, 41, 30, now)     # registered, running for a month
        over = _job_dir(run, 40, 30, now)
        r.d.pruner.join(10)   # the daemon's own first pass, at its first sweep
        r.d.pruner.start()
        r.d.pruner.join(10)
        assert long_job.is_dir() and not over.exists()


def test_prune_logged_names_what_went_and_logs_an_error_instead_of_raising(tmp_path, caplog):
    now = time.time()
    run = tmp_path / "run"
    for j in range(1, 13):
        _job_dir(run, j, 10, now)
    logger = logging.getLogger("gpuperf.test.jobdirs")
    with caplog.at_level(logging.INFO, logger=logger.name):
        gone = jobdirs.prune_logged(logger, str(run), 7.0, keep={12})
    assert sorted(gone) == list(range(1, 12))
    assert [r.getMessage() for r in caplog.records] == [
        f"removed the run_dir records of 11 jobs over for 7 days ({','.join(map(str, gone[:10]))} ...)"]
    caplog.clear()

    def broken(ids: list[int]) -> set[int]:
        raise sqlite3.OperationalError("database is locked")

    _job_dir(run, 20, 10, now)
    with caplog.at_level(logging.INFO, logger=logger.name):
        assert jobdirs.prune_logged(logger, str(run), 7.0, errors=(OSError, sqlite3.Error), only=broken) == []
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"job directories in {run} not pruned: database is locked")]
    assert (run / "jobs" / "20").is_dir()
    with pytest.raises(sqlite3.OperationalError):   # an error the caller did not name is not swallowed
        jobdirs.prune_logged(logger, str(run), 7.0, only=broken)
