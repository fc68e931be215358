"""The controller service on loopback: real munge, the real EpilogSlurmctld script, the real collector
and queue; only the accounting write is a stub (latency, failing), as the load test's is.

Fault cases of issue 14: the database unreachable (time-scaled: a horizon of seconds), a summary
delivered twice, a node clock 10 minutes off, a summary for a job that never ran, the service
killed -9 mid-burst and restarted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuperf.files import config
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.controller import accounting, clusterstore, service, transport
from report_fixtures import aggregates, context

try:
    from cluster.slurmcluster import ClusterError, can_run, ensure_munge
except ImportError:  # tests/ imported as a package
    from tests.cluster.slurmcluster import ClusterError, can_run, ensure_munge

ROOT = Path(__file__).resolve().parents[2]
NOTIFY = ROOT / "packaging" / "bin" / "gpuperf-epilog-slurmctld"
STUB_SERVER = Path(__file__).with_name("controller_stub.py")


@pytest.fixture(scope="module")
def munge():
    why = can_run()
    if why:
        pytest.skip(why)
    try:
        ensure_munge()
    except ClusterError as e:
        pytest.fail(f"munged could not be started: {e}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp: Path, **controller: float) -> tuple[config.Config, Path]:
    port = _free_port()
    extra = "".join(f"{k} = {v}\n" for k, v in controller.items())
    text = (f'[general]\nstate_dir = "{tmp}/state"\nrun_dir = "{tmp}/run"\nlog_file = ""\n'
            f'[controller]\naddress = "127.0.0.1:{port}"\nport = {port}\nbind = "127.0.0.1"\n' + extra)
    path = tmp / "gpuperf.toml"
    path.write_text(text)
    return config.parse(text), path


class Running:
    """A service in a thread with a stub writer."""

    def __init__(self, cfg, writer):
        self.cfg, self.writer, self.stop = cfg, writer, threading.Event()
        ready = threading.Event()
        self.t = threading.Thread(target=service.serve, args=(cfg, self.stop, lambda _e: ready.set(), writer), daemon=True)
        self.t.start()
        assert ready.wait(10)

    def close(self) -> None:
        self.stop.set()
        self.t.join(10)


@pytest.fixture
def running(munge, tmp_path):
    made = []

    def start(writer=None, **controller):
        cfg, path = _config(tmp_path, **{"merge_wait_s": 1.0, "retry_max_s": 0.3, **controller})
        r = Running(cfg, writer or accounting.StubWriter(0.01))
        r.config_path = path
        made.append(r)
        return r

    yield start
    for r in made:
        r.close()


def _summary(job_id: int, node: str, end: float | None = None) -> dict:
    end = time.time() if end is None else end
    a = aggregates(job_id=job_id, node=node, ngpus=2, seconds=600.0)
    a["start"], a["end"] = end - 600.0, end
    return summary.node_summary(a, context(job_id=job_id, node=node))


def notify(config_path: Path, job_id: int, nodelist: str, user: str = "alice", uid: int = 1000, **slurm: str) -> None:
    """What slurmctld does at a job's end: run the EpilogSlurmctld (the real script); ``slurm``: more of
    its variables (``SLURM_ARRAY_TASK_ID="3"``)."""
    env = {"PATH": "/usr/bin:/bin", "GPUPERF_CONFIG": str(config_path), "SLURM_JOB_ID": str(job_id),
           "SLURM_JOB_NODELIST": nodelist, "SLURM_JOB_USER": user, "SLURM_JOB_UID": str(uid), "SLURM_JOB_EXIT_CODE": "0",
           **slurm}
    assert subprocess.run(["/bin/sh", str(NOTIFY)], env=env, timeout=10).returncode == 0


def _state(cfg, job_id: int) -> str | None:
    with clusterstore.ClusterStore(clusterstore.default_path(cfg)) as st:
        row = st.db.execute("SELECT state FROM ended WHERE job_id=?", (job_id,)).fetchone()
    return row[0] if row else None


def _wait_state(cfg, job_ids, states=("done",), timeout: float = 30.0) -> None:
    end = time.time() + timeout
    left = set(job_ids)
    while left and time.time() < end:
        left = {j for j in left if _state(cfg, j) not in states}
        time.sleep(0.1)
    assert not left, f"jobs not {states}: {sorted(left)[:10]} ({[_state(cfg, j) for j in sorted(left)[:3]]})"


def _job(cfg, job_id: int) -> dict:
    with clusterstore.ClusterStore(clusterstore.default_path(cfg)) as st:
        return st.job(job_id)


def test_a_job_gets_one_merged_summary_and_one_admin_comment(running):
    r = running()
    notify(r.config_path, 11, "n[1-2]")
    for n in ("n1", "n2"):
        assert transport.send_node_summary(r.cfg, _summary(11, n))["ok"]
    _wait_state(r.cfg, [11])
    s = _job(r.cfg, 11)
    assert s["nodes"] == ["n1", "n2"] and not s["quality"]["partial"] and s["user"] == "alice"
    assert [len(v) for v in r.writer.written.values()] == [1] and r.writer.written[11][0][1].startswith("gpuperf:v1")
    assert not list((Path(r.cfg.general.state_dir) / "ended").glob("*.ended")), "notice not consumed"
    assert "job=" not in r.writer.written[11][0][1].split(" z=")[0]  # a plain job: sacct's JobID names it


def test_late_summaries_rewrite_a_job_once_when_its_last_node_is_in(running):
    # merged without n2 and n3 (their wait over): n2's summary comes late and waits for the grace or the last
    # node; n3's completes the job: one more AdminComment, the whole job; a resend after it rewrites nothing
    r = running()
    notify(r.config_path, 13, "n[1-3]")
    assert transport.send_node_summary(r.cfg, _summary(13, "n1"))["ok"]
    _wait_state(r.cfg, [13])
    assert transport.send_node_summary(r.cfg, _summary(13, "n2"))["ok"]
    time.sleep(1.5)
    assert len(r.writer.written[13]) == 1, "a late summary rewrote the job before its last node came"
    assert transport.send_node_summary(r.cfg, _summary(13, "n3"))["ok"]
    end = time.time() + 15
    while len(r.writer.written[13]) < 2 and time.time() < end:
        time.sleep(0.1)
    _wait_state(r.cfg, [13])
    assert _job(r.cfg, 13)["nodes"] == ["n1", "n2", "n3"] and not _job(r.cfg, 13)["quality"]["partial"]
    assert transport.send_node_summary(r.cfg, _summary(13, "n3"))["ok"]
    time.sleep(1.5)
    assert len(r.writer.written[13]) == 2


def test_an_array_task_and_a_het_component_are_named_in_their_headlines(running):
    """slurmctld gives EpilogSlurmctld the array and het ids (FACTS.md): task 3 of array 8 ran as raw id 12."""
    r = running()
    notify(r.config_path, 12, "n1", SLURM_ARRAY_JOB_ID="8", SLURM_ARRAY_TASK_ID="3", SLURM_ARRAY_TASK_COUNT="4")
    notify(r.config_path, 21, "n1", SLURM_HET_JOB_ID="20", SLURM_HET_JOB_OFFSET="1")
    for j in (12, 21):
        assert transport.send_node_summary(r.cfg, _summary(j, "n1"))["ok"]
    _wait_state(r.cfg, [12, 21])
    for j, name in ((12, "8_3"), (21, "20+1")):
        head = r.writer.written[j][0][1].split(" z=")[0]
        assert head.endswith(f" job={name}"), head


def test_deliveries_are_answered_while_the_database_fails_and_written_once_it_is_back(running):
    writer = accounting.StubWriter(latency_s=0.5, failing=True)
    r = running(writer, admin_comment_wait_s=600)
    jobs = list(range(100, 120))
    for j in jobs:
        notify(r.config_path, j, "n1")
    t0 = time.monotonic()
    for j in jobs:
        # a short timeout and one attempt: any wait on the database would fail this delivery
        assert transport.send_node_summary(r.cfg, _summary(j, "n1"), timeout_s=1.0, attempts=1)["ok"]
    assert time.monotonic() - t0 < 20
    _wait_state(r.cfg, jobs, states=("write",))
    time.sleep(1.0)
    assert all(_state(r.cfg, j) == "write" for j in jobs) and not writer.written
    writer.failing = False  # the database is back
    _wait_state(r.cfg, jobs)
    assert sorted(writer.written) == jobs and all(len(v) == 1 for v in writer.written.values())


def test_past_the_retry_horizon_a_job_is_marked_accounting_unavailable(running, capsys):
    r = running(accounting.StubWriter(0.0, failing=True), admin_comment_wait_s=2.0)
    notify(r.config_path, 130, "n1")
    assert transport.send_node_summary(r.cfg, _summary(130, "n1"))["ok"]
    _wait_state(r.cfg, [130], states=("unavailable",))
    with clusterstore.ClusterStore(clusterstore.default_path(r.cfg)) as st:
        row = st.jobs()[0]
        err = st.db.execute("SELECT last_error, attempts FROM ended WHERE job_id=130").fetchone()
    assert row["job_id"] == 130 and row["accounting"] == "unavailable"
    assert "database unreachable" in err[0] and err[1] >= 2
    from gpuperf.commands import jobs as jobs_cmd

    assert "acct-unavailable" in jobs_cmd._fmt_rows([row])


def test_a_summary_delivered_twice_is_kept_once_and_the_report_says_so(running):
    r = running()
    notify(r.config_path, 140, "n1")
    s = _summary(140, "n1")
    assert transport.send_node_summary(r.cfg, s)["ok"]
    assert transport.send_node_summary(r.cfg, s)["ok"]  # the node missed the reply and sent again
    _wait_state(r.cfg, [140])
    got = _job(r.cfg, 140)
    assert got["job"]["gpu_count"] == 2
    assert any("n1: delivered its summary 2 times" in x for x in got["quality"]["reasons"]), got["quality"]
    assert len(r.writer.written[140]) == 1


def test_a_node_clock_ten_minutes_ahead_is_noted_and_put_right(running):
    r = running()
    notify(r.config_path, 150, "n[1-2]")
    now = time.time()
    assert transport.send_node_summary(r.cfg, _summary(150, "n1", end=now))["ok"]
    assert transport.send_node_summary(r.cfg, _summary(150, "n2", end=now + 600))["ok"]
    _wait_state(r.cfg, [150])
    got = _job(r.cfg, 150)
    assert any(x.startswith("n2: clock 600 s ahead") or x.startswith("n2: clock 599 s ahead")
               or x.startswith("n2: clock 601 s ahead") for x in got["quality"]["reasons"]), got["quality"]["reasons"]
    assert abs(got["quality"]["clock_offsets_s"]["n2"] - 600) < 5 and "n1" not in got["quality"]["clock_offsets_s"]
    # on the controller's clock both nodes ran the same 600 s
    assert got["wall_s"] == pytest.approx(600, abs=5)


def test_a_summary_for_a_job_that_never_ended_is_kept_flagged_and_not_written(running):
    r = running(orphan_after_s=1.0)
    assert transport.send_node_summary(r.cfg, _summary(160, "n7"))["ok"]
    _wait_state(r.cfg, [160], states=("orphan",))
    got = _job(r.cfg, 160)
    assert got["quality"]["orphan"] and any("slurmctld never reported this job ending" in x for x in got["quality"]["reasons"])
    assert 160 not in r.writer.written


def test_kill_9_mid_burst_loses_nothing(munge, tmp_path):
    # the nodes' retries after the restart come one after another here (each waits out the collector's
    # GATHER_S): the wait must cover them all, or the last jobs are merged partial before their summary comes
    cfg, path = _config(tmp_path, merge_wait_s=20.0, retry_max_s=0.3)
    log = tmp_path / "writes.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def start() -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, str(STUB_SERVER), str(path), "0.05", str(log)], env=env)
        end = time.time() + 20
        while not (Path(cfg.general.state_dir) / "cluster.sqlite").exists() and time.time() < end:
            time.sleep(0.05)
        # the store is there from the first run: wait for the collector itself (a loaded machine starts it late)
        import socket

        while time.time() < end:
            try:
                socket.create_connection(transport.address(transport.controller_endpoint(cfg)), timeout=1.0).close()
                break
            except OSError:
                time.sleep(0.1)
        return p

    jobs = list(range(1000, 1200))
    p = start()
    unsent = []
    for i, j in enumerate(jobs):
        if i == 80:
            os.kill(p.pid, signal.SIGKILL)  # mid-burst: some merged, some written, some not even received
            p.wait()
        notify(path, j, "n1")  # slurmctld's notices go on: they wait in the spool
        if i > 85:
            unsent.append(j)  # the nodes' deliveries fail like the five before (not waited for again)
            continue
        try:
            transport.send_node_summary(cfg, _summary(j, "n1"), timeout_s=0.3, attempts=1)
        except transport.TransportError:
            unsent.append(j)
    assert unsent, "the kill did not interrupt the burst"
    p = start()
    try:
        for j in unsent:  # the nodes' retries
            assert transport.send_node_summary(cfg, _summary(j, "n1"), timeout_s=5.0, attempts=3)["ok"]
        _wait_state(cfg, jobs, timeout=60)
    finally:
        p.terminate()
        p.wait(10)
    writes: dict[int, set[int]] = {}
    for line in log.read_text().splitlines():
        _, j, crc = line.split()[:3]
        writes.setdefault(int(j), set()).add(int(crc))
    assert sorted(writes) == jobs
    # a job written again after the restart got the same AdminComment: one comment per job
    assert all(len(v) == 1 for v in writes.values())


def test_a_zero_gpu_summary_from_an_older_node_is_skipped_not_written(running):
    """Nodes of an older gpuperf report jobs that held no GPU: no AdminComment, no stored job (issue 24)."""
    r = running()
    end = time.time()
    a = aggregates(job_id=21, node="n1", ngpus=0, seconds=60.0)
    a["start"], a["end"] = end - 60.0, end
    notify(r.config_path, 21, "n1")
    assert transport.send_node_summary(r.cfg, summary.node_summary(a, context(job_id=21, node="n1")))["ok"]
    notify(r.config_path, 22, "n1")
    assert transport.send_node_summary(r.cfg, _summary(22, "n1"))["ok"]
    _wait_state(r.cfg, [21], ("skipped",))
    _wait_state(r.cfg, [22])
    assert list(r.writer.written) == [22] and _job(r.cfg, 21) is None


class _SlowWriter(accounting.StubWriter):
    """A writer whose batch is inside its Slurm call when the service is told to stop."""

    def __init__(self):
        super().__init__(0.0)
        self.entered, self.done = threading.Event(), threading.Event()

    def write(self, items):
        self.entered.set()
        time.sleep(1.5)
        self.done.set()
        return super().write(items)


def test_a_stopping_service_waits_for_a_writer_inside_its_slurm_call(running):
    """A writer in sacct or sacctmgr when the service stops is waited for: a service that returned under it left
    that child running in its unit after the service had gone (the unit-limit test's teardown found one)."""
    w = _SlowWriter()
    r = running(writer=w)
    notify(r.config_path, 12, "n1")
    assert transport.send_node_summary(r.cfg, _summary(12, "n1"))["ok"]
    assert w.entered.wait(30), "the job never reached its writer"
    r.stop.set()
    r.t.join(10)
    assert not r.t.is_alive() and w.done.is_set(), "the service returned while its writer was still in its call"
