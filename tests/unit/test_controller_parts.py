"""The controller's pure parts: backoff and horizon, notices, hostlists, series, sacct rows, the terminal chart."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from gpuperf.model import admincomment, series
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.files import config
from gpuperf.controller import accounting, notices, queue
from gpuperf.report import sacctrows, timechart
from gpuperf.access.slurm import expand_hostlist
from report_fixtures import aggregates, context

NOTIFY = Path(__file__).resolve().parents[2] / "packaging" / "bin" / "gpuperf-epilog-slurmctld"


def test_backoff_grows_to_its_cap_and_the_horizon_ends_retries():
    waits = [queue.backoff_s(a, 60.0) for a in range(1, 10)]
    assert waits == sorted(waits) and waits[0] == 1.0 and waits[-1] == 60.0
    assert queue.after_failure(3, ended=1000.0, now=1010.0, horizon_s=300.0, cap_s=60.0, job_id=0) == ("write", 1014.0)
    assert queue.after_failure(3, ended=1000.0, now=1300.0, horizon_s=300.0, cap_s=60.0, job_id=0) == ("unavailable", None)


def test_judge_only_what_sacct_shows_counts_as_written():
    items = [(1, "gpuperf:v1 A=1"), (2, "gpuperf:v1 b=2"), (3, "gpuperf:v1 c=3")]
    got = accounting.judge(items, {1: "gpuperf:v1 a=1", 2: ""}, None)  # the database lowercases
    assert got == {1: None, 2: accounting.NOT_IN_DB, 3: accounting.NOT_IN_DB}
    assert accounting.judge(items[:1], {}, "sacctmgr: down") == {1: "sacctmgr: down"}


def test_array_tasks_and_het_components_are_written_by_name_not_by_raw_id(tmp_path):
    """sacctmgr's jobid=<raw id> selects every task of the array (or component of the het job) whose id that
    is too: the raw id of an array's last task wrote its comment over its siblings' (seen on 22.05)."""
    items = [(12, "gpuperf:v1 class=idle gpus=1 job=8_3 z=aa"), (20, "gpuperf:v1 class=idle gpus=1 job=20+0 z=aa"),
             (5, "gpuperf:v1 class=idle gpus=1 z=aa"), (6, "gpuperf:v1 class=idle job=6_1.batch z=aa"), (7, "other")]
    assert accounting.names(items) == {12: "8_3", 20: "20+0"}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacctmgr").write_text(f"#!/bin/sh\ncat > {tmp_path}/script\n")
    (bin_dir / "sacctmgr").chmod(0o755)
    from gpuperf.access.slurm import Slurm

    Slurm(str(bin_dir)).set_admin_comments_db(items[:3], {**accounting.names(items), 5: "5_1 x"})
    where = [ln.split()[3] for ln in (tmp_path / "script").read_text().splitlines()]
    assert where == ["jobid=8_3", "jobid=20+0", "jobid=5"]


@pytest.mark.parametrize("expr, names", [
    ("n1", ["n1"]), ("gpu[01-03,7]", ["gpu01", "gpu02", "gpu03", "gpu7"]),
    ("a[1-2],b3", ["a1", "a2", "b3"]), ("r[1-2]n[08-09]", ["r1n08", "r1n09", "r2n08", "r2n09"]), ("", []),
])
def test_hostlists_expand_as_scontrol_does(expr, names):
    assert expand_hostlist(expr) == names
    scontrol = shutil.which("scontrol") or "/usr/bin/scontrol"
    if expr and os.path.exists(scontrol):
        out = subprocess.run([scontrol, "show", "hostnames", expr], capture_output=True, text=True)
        if out.returncode == 0:
            assert out.stdout.split() == names


def test_the_shell_hook_leaves_a_notice_the_service_reads(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text(f'[general]\nrun_dir = "{tmp_path}/run"  # comment\nstate_dir = "{tmp_path}/state"\n'
                    f'[daemon]\nsocket_dir = "/elsewhere"\n[controller]\nspool_dir = "{tmp_path}/spool"\n')
    env = {"GPUPERF_CONFIG": str(conf), "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "g[1-3]", "SLURM_JOB_USER": "bob",
           "SLURM_JOB_UID": "1001", "SLURM_JOB_EXIT_CODE": "256", "PATH": "/usr/bin:/bin"}
    assert subprocess.run(["/bin/sh", str(NOTIFY)], env=env).returncode == 0
    [(path, n)] = notices.read(str(tmp_path / "spool"))
    assert (n.job_id, n.nodes, n.user, n.uid, n.exit_code, n.job_ref) == (77, ["g1", "g2", "g3"], "bob", 1001, 256, None)
    rec = json.loads((tmp_path / "run" / "jobs" / "77" / "epilog-slurmctld.json").read_text())
    assert rec["context"]["nodelist"] == "g[1-3]" and rec["context"]["uid"] == 1001 and rec["steps"]["notify"]["ok"]
    # no job id (not run by slurmctld): nothing written, still exit 0
    assert subprocess.run(["/bin/sh", str(NOTIFY)], env={"GPUPERF_CONFIG": str(conf)}).returncode == 0
    assert len(list((tmp_path / "spool").iterdir())) == 1


@pytest.mark.parametrize("slurm, name", [
    ({"SLURM_ARRAY_JOB_ID": "8", "SLURM_ARRAY_TASK_ID": "3"}, "8_3"),
    # the last task of an array runs under the array's own id: still a task, named so
    ({"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "4"}, "77_4"),
    ({"SLURM_HET_JOB_ID": "77", "SLURM_HET_JOB_OFFSET": "0"}, "77+0"),
    ({"SLURM_ARRAY_JOB_ID": "8"}, None),
    ({"SLURM_ARRAY_JOB_ID": "8", "SLURM_ARRAY_TASK_ID": "3 z=x"}, None),
    ({"SLURM_HET_JOB_ID": "$(id)", "SLURM_HET_JOB_OFFSET": "1"}, None),
])
def test_the_hook_names_an_array_task_or_het_component(tmp_path, slurm, name):
    conf = tmp_path / "c.toml"
    conf.write_text(f'[general]\nrun_dir = "{tmp_path}/run"\n[controller]\nspool_dir = "{tmp_path}/spool"\n')
    env = {"GPUPERF_CONFIG": str(conf), "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "g1", **slurm}
    assert subprocess.run(["/bin/sh", str(NOTIFY)], env=env).returncode == 0
    [(_, n)] = notices.read(str(tmp_path / "spool"))
    assert n.job_id == 77 and n.job_ref == name
    rec = json.loads((tmp_path / "run" / "jobs" / "77" / "epilog-slurmctld.json").read_text())
    assert rec["context"]["job_ref"] == (name or "")


@pytest.mark.parametrize("line, name", [("job_ref=10+1", "10+1"), ("job_ref=", None), ("job_ref=12", None),
                                        ("job_ref=8_3.batch", None), ("job_ref=8_3 z=abc", None),
                                        ("job_ref=1_" + "9" * 12, None)])
def test_a_notice_keeps_only_a_task_or_component_name_and_never_drops_the_job(line, name):
    n = notices.parse(f"job_id=5\nnodelist=n1\n{line}\nend\n", 0.0)
    assert (n.job_id, n.job_ref) == (5, name)


def test_an_older_store_gains_the_job_ref_column_and_keeps_its_rows(tmp_path):
    import sqlite3

    db = sqlite3.connect(tmp_path / "old.sqlite")
    db.executescript("CREATE TABLE node_summaries (job_id INTEGER, node TEXT, received REAL);"
                     "CREATE TABLE ended (job_id INTEGER PRIMARY KEY, nodes TEXT NOT NULL, user TEXT, uid INTEGER,"
                     " ended REAL NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_try REAL,"
                     " last_error TEXT, comment BLOB, written REAL, notes TEXT);"
                     "INSERT INTO ended (job_id, nodes, ended, state) VALUES (4, '[\"n1\"]', 1.0, 'merge');")
    q = queue.JobQueue(db)
    assert q.get(4).job_ref is None and [e.job_id for e in q.due_merges(10.0, 1.0)] == [4]
    assert q.add(5, ["n1"], "a", 7, 2.0, job_ref="8_3")
    assert q.get(5).job_ref == "8_3" and queue.JobQueue(db).get(5).job_ref == "8_3"


def test_the_hook_default_spool_is_the_service_default(tmp_path):
    cfg = config.parse(f'[general]\nstate_dir = "{tmp_path}/st"\n')
    conf = tmp_path / "c.toml"
    conf.write_text(f'[general]\nstate_dir = "{tmp_path}/st"\nrun_dir = "{tmp_path}/run"\n')
    subprocess.run(["/bin/sh", str(NOTIFY)], env={"GPUPERF_CONFIG": str(conf), "SLURM_JOB_ID": "5"}, check=True)
    assert (Path(notices.default_dir(cfg)) / "5.ended").exists()


def test_a_damaged_notice_is_set_aside_not_lost(tmp_path):
    (tmp_path / "9.ended").write_text("job_id=9\nnodelist=n1\n")  # no 'end' line
    (tmp_path / "10.ended").write_text("job_id=10\nnodelist=n1\nuser=a\nuid=7\nexit_code=0\nend\n")
    got = notices.read(str(tmp_path))
    assert [n.job_id for _, n in got] == [10]
    assert (tmp_path / "9.ended.bad").exists()


def _daemon_series(n: int, gpus: int = 8) -> dict:
    t = [1000.0 + i for i in range(n)]
    return {str(g): {"t": t, "sm_active_pct": [float(i % 100) for i in range(n)], "power_w": [300.5] * n,
                     "nvlink_tx_bps": [2.5e9] * n, "tensor_active_pct": [None] * n} for g in range(gpus)}


def test_series_are_bounded_in_points_and_bytes_and_come_back():
    v = series.compact(_daemon_series(3000), 500)
    assert v["schema"] == series.SCHEMA and len(v["t"]) == 500 and len(v["gpus"]["7"]["sm_active_pct"]) == 500
    assert len(json.dumps(v, separators=(",", ":"))) <= series.MAX_BYTES
    small = series.compact(_daemon_series(3000), 500, max_bytes=20_000)
    assert len(json.dumps(small, separators=(",", ":"))) <= 20_000 and len(small["t"]) < 500
    back = series.expand("n4", series.compact(_daemon_series(50), 500))
    assert sorted(back)[:2] == ["n4:0", "n4:1"]
    assert back["n4:3"]["t"][:2] == [1000.0, 1001.0] and back["n4:3"]["sm_active_pct"][:3] == [0, 1, 2]
    assert back["n4:3"]["power_w"][0] == 300 or back["n4:3"]["power_w"][0] == 301
    assert back["n4:3"]["nvlink_tx_bps"][0] == 2.5e9 and back["n4:3"]["tensor_active_pct"][0] is None
    assert series.expand("n1", {"schema": "other"}) == {} and series.compact({}, 500) is None


def test_due_writes_are_spread_over_idle_writers_in_batches_worth_a_process():
    assert queue.batch_sizes(0, 8, 50) == [] and queue.batch_sizes(10, 0, 50) == []
    assert queue.batch_sizes(3, 16, 50) == [3]                      # little due: one process
    assert queue.batch_sizes(12, 16, 50) == [4, 4, 4]               # batches of at least MIN_BATCH
    assert queue.batch_sizes(500, 16, 50) == [32] * 4 + [31] * 12   # a burst: every writer, evenly
    assert queue.batch_sizes(2000, 16, 50) == [50] * 16             # never more than write_batch each
    assert queue.batch_sizes(500, 2, 50) == [50, 50]


def test_series_bytes_are_small_and_come_back_within_a_step_of_each_columns_peak():
    daemon = _daemon_series(3000)
    daemon["1"] = dict(daemon["1"], nvlink_tx_bps=[(i % 50) * 1e9 for i in range(3000)],
                       sm_active_pct=[None if i % 400 == 0 else 50.0 for i in range(3000)])
    v = series.compact(daemon, 500)
    blob = series.pack(v)
    assert blob.startswith(series.FRAME_MAGIC)
    assert len(blob) < len(zlib.compress(json.dumps(v, separators=(",", ":")).encode(), 9))
    back = series.unpack(blob)
    assert back["t"] == v["t"] and back["t0"] == v["t0"] and back["units"] == v["units"]
    for g, col in v["gpus"].items():
        for f, vals in col.items():
            peak = max((abs(x) for x in vals if x is not None), default=0)
            got = back["gpus"][g][f]
            # gaps stay gaps; values within half a step of 1/LEVELS of the column's peak
            assert [x is None for x in got] == [x is None for x in vals], (g, f)
            assert all(abs(a - b) <= max(0.5, peak / series.LEVELS) for a, b in zip(got, vals) if a is not None), (g, f)
    assert back["gpus"]["0"]["sm_active_pct"] == v["gpus"]["0"]["sm_active_pct"]  # percent keeps its unit step
    # what older nodes sent (zlib JSON) still reads; garbage is None, not an exception
    assert series.unpack(zlib.compress(json.dumps(v).encode())) == v
    assert series.unpack(series.FRAME_MAGIC + b"junk") is None and series.unpack(b"") is None


def test_sacct_rows_decode_admin_comments_and_count_the_rest():
    s = summary.merge([summary.node_summary(aggregates(job_id=3, ngpus=2), context(job_id=3))], ["n1"])
    text = admincomment.encode(s).lower()
    lines = [{"JobIDRaw": "3", "JobID": "3", "User": "alice", "UID": "1000", "Start": "2026-11-20T10:00:00", "End": "2026-11-20T11:00:00",
              "NodeList": "n1", "AllocTRES": "gres/gpu=2", "AdminComment": text},
             {"JobIDRaw": "4", "JobID": "4", "User": "alice", "UID": "1000", "Start": "", "End": "", "NodeList": "n1",
              "AllocTRES": "gres/gpu=1", "AdminComment": ""},
             {"JobIDRaw": "5", "JobID": "5", "User": "alice", "UID": "1000", "Start": "", "End": "", "NodeList": "n1",
              "AllocTRES": "cpu=1", "AdminComment": ""}]
    rows, without = sacctrows.rows(lines)
    assert without == 1 and [r["job_id"] for r in rows] == [3]
    r = rows[0]
    assert r["gpu_hours"] == s["job"]["gpu_hours"] and r["wasted_gpu_hours"] == s["job"]["wasted_gpu_hours"]
    assert r["class"] == s["diagnosis"]["class"] and r["energy_j"] == s["job"]["energy_j"]
    cut = dict(lines[0], AdminComment=text[:200])  # sacct cut the payload: the headline still counts
    assert sacctrows.row(cut)["class"] == s["diagnosis"]["class"] and sacctrows.row(cut)["partial"]


def test_terminal_chart_draws_each_gpu_on_one_time_axis():
    data = {"n1:0": {"t": [0.0, 10.0, 20.0, 30.0], "sm_active_pct": [0.0, 100.0, 100.0, 0.0], "power_w": [100, 400, 400, 100]},
            "n2:0": {"t": [15.0, 30.0], "sm_active_pct": [50.0, 50.0], "power_w": [200, 200]}}
    text = timechart.render(data, width=60)
    lines = text.splitlines()
    sm = [ln for ln in lines if ln.strip().startswith("GPU n1:0")][0]
    other = [ln for ln in lines if ln.strip().startswith("GPU n2:0")][0]
    assert "SM active (0-100 %)" in text and "Power (0-400 W)" in text
    assert "█" in sm and " " in sm.split("GPU n1:0")[1]
    # n2 started at t=15: its first half is unknown (·), not drawn as zero
    assert other.split("GPU n2:0")[1].lstrip().startswith("·")
    assert timechart.render({}) == ""


def test_the_spool_is_prepared_for_slurmuser_or_the_reason_said(tmp_path):
    locked = tmp_path / "state"
    locked.mkdir(mode=0o700)
    problem = notices.prepare(str(locked / "ended"), "nobody")
    assert (locked / "ended").is_dir()
    if os.geteuid() == 0:
        assert (locked / "ended").stat().st_uid == __import__("pwd").getpwnam("nobody").pw_uid
        assert problem and "nobody cannot reach" in problem and "controller.spool_dir" in problem
    # under directories others may pass through (pytest's own tmp root is 0700): no problem to report
    import tempfile

    open_dir = Path(tempfile.mkdtemp(prefix="gpuperf-spool-"))
    try:
        open_dir.chmod(0o755)
        assert notices.prepare(str(open_dir / "ended"), "nobody") is None
    finally:
        shutil.rmtree(open_dir)


def _queue_with_store(tmp_path):
    from gpuperf.controller import clusterstore

    st = clusterstore.ClusterStore(tmp_path / "c.sqlite")
    return st, queue.JobQueue(st.db)


def _reported(st, job_id: int, node: str) -> None:
    st.db.execute("INSERT INTO node_summaries (job_id, node, received, summary) VALUES (?,?,?,?)",
                  (job_id, node, 0.0, b"x"))


def test_a_complete_job_merges_at_once_whatever_waits_before_it(tmp_path):
    # 3,000 jobs still waiting for nodes ended before it: the job whose last node just reported is merged
    # now, not after merge_wait_s (the queue looked at the oldest 2,000 only)
    st, q = _queue_with_store(tmp_path)
    for j in range(1, 3001):
        q.add(j, ["a", "b"], "u", 1, 180.0 + j * 0.001)
        _reported(st, j, "a")
    q.add(5000, ["a", "b"], "u", 1, 200.0)
    _reported(st, 5000, "a")
    _reported(st, 5000, "b")
    due = q.due_merges(201.0, 30.0, {5000, 7})
    assert [e.job_id for e in due] == [5000]
    # and the wait still ends for the others, oldest first, a bounded number a tick
    assert [e.job_id for e in q.due_merges(215.0, 30.0, limit=3)] == [1, 2, 3]
    assert {e.job_id for e in q.due_merges(500.0, 30.0, limit=5000)} == set(range(1, 3001)) | {5000}
    assert q.waiting() == set(range(1, 3001)) | {5000}


def test_a_late_summary_brings_one_more_merge_and_then_none(tmp_path):
    # merged without node c: its summary comes late. One more merge, when the last node is in or
    # LATE_GRACE_S after the end, whichever is first; after it, late summaries are stored only
    st, q = _queue_with_store(tmp_path)
    q.add(9, ["a", "b", "c"], "u", 1, 1000.0)
    for n in ("a", "b"):
        _reported(st, 9, n)
    st.put_job({"job_id": 9, "nodes": ["a"]}, commit=False)
    q.set_merged(9, "text", "write", 1031.0)
    assert not q.note_late(8, 1035.0)                                  # never queued
    q.set_written(9, 1032.0)
    assert q.note_late(9, 1040.0)
    assert q.due_late(1041.0) == []
    grace = 1000.0 + queue.LATE_GRACE_S
    assert [e.job_id for e in q.due_late(grace, exclude={9})] == []    # its write is in flight: not now
    assert [e.job_id for e in q.due_late(grace)] == [9]
    assert q.due_late(grace + 1) == []
    _reported(st, 9, "c")
    assert not q.note_late(9, grace - 5)                              # the one late merge was made
    assert q.due_late(grace + 10) == []
    # the last node in before the grace: merged again at once; a node the merge had: nothing
    q.add(10, ["a", "b"], "u", 1, 1000.0)
    _reported(st, 10, "a")
    st.put_job({"job_id": 10, "nodes": ["a"]}, commit=False)
    q.set_merged(10, "text", "done", 1031.0)
    assert not q.note_late(10, 1040.0)
    _reported(st, 10, "b")
    assert q.note_late(10, 1050.0) and [e.job_id for e in q.due_late(1050.0)] == [10]


def test_a_large_job_merges_on_its_own_thread_while_the_others_go_on(tmp_path, monkeypatch):
    # a job of thousands of nodes takes seconds to merge: the scheduler hands it to a thread of its own and
    # merges the small job that ended after it meanwhile (here "large" is 5 nodes and its merge is held)
    import threading
    import time

    from gpuperf.controller import clusterstore, mergework, service

    monkeypatch.setattr(mergework, "LARGE_NODES", 4)
    cfg = config.parse(f'[general]\nstate_dir = "{tmp_path}/st"\nrun_dir = "{tmp_path}/run"\nlog_file = ""\n')
    st = clusterstore.ClusterStore(clusterstore.default_path(cfg))
    big = [f"n{i}" for i in range(5)]
    for job, nodes in ((8, big), (9, ["m1"])):
        for node in nodes:
            st.put_node_summary(summary.node_summary(aggregates(job_id=job, node=node, ngpus=2),
                                                     context(job_id=job, node=node)), 0, commit=False)
    q = queue.JobQueue(st.db)
    q.add(8, big, "alice", 1000, 100.0)
    q.add(9, ["m1"], "alice", 1000, 101.0)
    st.db.commit()
    st.close()
    gate, compute = threading.Event(), mergework.compute

    def held(cfg_, e, *a, **k):
        if len(e.nodes) > 4:
            assert gate.wait(10)
        return compute(cfg_, e, *a, **k)

    monkeypatch.setattr(mergework, "compute", held)
    svc = service.Service(cfg, accounting.StubWriter(0.0))
    svc.tick()
    assert svc.queue.state(9)[0] == "write" and svc.queue.state(8)[0] == "merge" and svc._large.running == {8}
    svc.tick()
    assert svc._large.todo.qsize() == 0 and svc._large.running == {8}   # submitted once, not again each tick
    gate.set()
    end = time.time() + 60
    while svc.queue.state(8)[0] == "merge" and time.time() < end:
        time.sleep(0.05)
        svc.tick()
    (job, text), = [w for w in svc.queue.due_writes(time.time() + 1, 10) if w[0] == 8]
    assert admincomment.decode(text)["nodes"] == big and len(text.encode()) <= 4096
    svc._large.close()
    svc.store.close()


def test_the_store_keeps_a_done_jobs_series_small_and_drops_them_after_the_admins_days(tmp_path):
    # after a job's late window its node summaries are in the merged summary: only their series stay, at the
    # resolution phases need (100 points, 1 % steps); older than controller.series_keep_days they go
    from gpuperf.controller import clusterstore

    st, q = _queue_with_store(tmp_path)
    import random

    r = random.Random(3)
    t = [float(i) for i in range(500)]
    # plateaus with 1 % noise, as a GPU's activity looks (white noise would not shrink)
    ser = series.compact({"0": {"t": t, "sm_active_pct": [50.0 + r.gauss(0, 1) + (i // 100) * 10 for i in range(500)],
                                "power_w": [300.0 + r.gauss(0, 5) + (i // 100) * 40 for i in range(500)]}}, 500)
    s = summary.node_summary(aggregates(job_id=5, node="a", ngpus=1), context(job_id=5, node="a"))
    for job in (5, 6):
        st.put_node_summary(dict(s, job_id=job), 0, series=series.pack(ser), commit=False)
        q.add(job, ["a"], "u", 1, 0.0)
    q.set_merged(5, None, "done", 1.0)            # job 6 still waits for its write: kept whole
    full = len(st.db.execute("SELECT series FROM node_summaries WHERE job_id=5").fetchone()[0])
    up = clusterstore.Upkeep(st, keep_days=1.0, after_s=600.0)
    now = st.db.execute("SELECT max(received) FROM node_summaries").fetchone()[0] + 601.0
    up.run(now)
    (small,) = st.db.execute("SELECT series FROM node_series_kept WHERE job_id=5").fetchone()
    assert st.node_summaries(5) == {} and len(small) < full / 2
    got = st.node_series(5)["a"]
    assert len(got["gpus"]["0"]["sm_active_pct"]) == clusterstore.KEEP_POINTS
    assert abs(sum(got["gpus"]["0"]["sm_active_pct"]) / clusterstore.KEEP_POINTS - sum(ser["gpus"]["0"]["sm_active_pct"]) / 500) < 2
    assert set(st.node_summaries(6)) == {"a"}      # not done with: whole
    up.run(now + 30)                               # once a minute
    up.run(now + 2 * 86400)
    assert st.node_series(5) == {} and set(st.node_series(6)) == {"a"}   # a job not done with keeps its rows whole


def test_a_summary_the_store_cannot_keep_is_answered_retry_not_refused():
    # the store locked past its timeout (a loaded controller): the node must keep the summary and send it
    # again ("retry"), not drop it as refused (it did: jobs went partial under load)
    import sqlite3
    import zlib

    from gpuperf.controller import collector, intake, transport

    class Locked:
        def put_node_summary(self, *a, **k):
            raise sqlite3.OperationalError("database is locked")

    class Listener:
        replies: list = []

        def reply(self, conn, reply):
            self.replies.append(reply)

    s = summary.node_summary(aggregates(job_id=5, node="a", ngpus=1), context(job_id=5, node="a"))
    body = zlib.compress(json.dumps(s).encode())
    m = intake.Message(intake.Conn(None, "h", 0.0), transport.Sender(0, 0, ""), transport._digest(body, None), body, None)
    c = collector.Collector.__new__(collector.Collector)
    c.received, c.arrived, lst = 0, None, Listener()
    c._batch(lst, Locked(), [m])
    assert lst.replies == [{"ok": False, "error": "internal error: OperationalError", "retry": True}]


def test_summaries_waiting_for_a_scheduler_behind_are_kept_light(monkeypatch):
    # a scheduler behind on a loaded machine: past ARRIVED_PARSED waiting, the collector hands over only what
    # the fleet fold reads (the merge reads the store), so memory stays bounded (1.8 GB at 20,000 nodes before)
    import queue as queue_mod
    import zlib

    from gpuperf.controller import collector, intake, transport

    monkeypatch.setattr(collector, "ARRIVED_PARSED", 1)

    class Store:
        db = type("Db", (), {"commit": lambda self: None})()

        def put_node_summary(self, *a, **k):
            pass

    class Listener:
        def reply(self, conn, reply):
            pass

    msgs = []
    for n in ("a", "b"):
        s = summary.node_summary(aggregates(job_id=5, node=n, ngpus=1), context(job_id=5, node=n))
        body = zlib.compress(json.dumps(s).encode())
        msgs.append(intake.Message(intake.Conn(None, "h", 0.0), transport.Sender(0, 0, ""),
                                   transport._digest(body, None), body, None))
    c = collector.Collector.__new__(collector.Collector)
    c.received, c.arrived = 0, queue_mod.Queue()
    c._batch(Listener(), Store(), msgs)
    first, second = c.arrived.get_nowait(), c.arrived.get_nowait()
    assert "gpus" in first and not first.get("_light")
    assert second["_light"] and set(second) == {"job_id", "nodes", "end", "fleet", "_light"} and second["nodes"] == ["b"]
