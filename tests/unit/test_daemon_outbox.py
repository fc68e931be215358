"""The epilog waits for the finalisation only: the daemon writes and sends the node summary after
replying, keeps the job in its outbox while the controller cannot take it, tries again with backoff,
and after a restart; the controller gets each summary (real service, real munge)."""

from __future__ import annotations

import time
from pathlib import Path

from gpuperf.files import config
from gpuperf.controller import accounting, clusterstore
from gpuperf.daemon import workers
from gpuperf.epilog import finalize
from gpuperf.hookbase.hook import HookState
from gpuperf.hookbase.jobctx import JobContext
from test_controller_service import Running as Controller, _free_port, munge  # noqa: F401 - munge: a fixture
from test_daemon import Running, ScriptSampler, make_cfg, wait_for


def _cfgs(tmp: Path) -> tuple[config.Config, config.Config]:
    """The node's config and the controller's, on one free port, stores apart."""
    port = _free_port()
    node = make_cfg(tmp / "node", request_timeout_s=0.3)
    node.data["controller"].update(address=f"127.0.0.1:{port}", series_points=50)
    ctrl = config.parse(f'[general]\nstate_dir = "{tmp}/ctrl/state"\nrun_dir = "{tmp}/ctrl/run"\nlog_file = ""\n'
                        f'[controller]\naddress = "127.0.0.1:{port}"\nport = {port}\nbind = "127.0.0.1"\n'
                        'merge_wait_s = 1.0\nretry_max_s = 0.3\n')
    return node, ctrl


def _outbox(cfg) -> list[Path]:
    d = Path(cfg.general.state_dir) / "outbox"
    return sorted(d.glob("*.json")) if d.exists() else []


def _epilog(cfg, job_id: int) -> tuple[dict, float]:
    state = HookState()
    t0 = time.monotonic()
    finalize.step(JobContext(hook="epilog", job_id=job_id, uid=0, user="root", gpus=[0], node="n1"), cfg, state)
    return state.data["finalize"], time.monotonic() - t0


def _run_job(r: Running, cfg, job_id: int) -> tuple[dict, float]:
    """Register a one-GPU job, let it run a moment, end it with the epilog's step."""
    assert r.call("register", {"job_id": job_id, "uid": 0, "user": "root", "gpus": [0]})["ok"]
    time.sleep(0.3)
    return _epilog(cfg, job_id)


def _stored(ctrl, job_id: int) -> bool:
    path = clusterstore.default_path(ctrl)
    if not Path(path).exists():
        return False
    with clusterstore.ClusterStore(path, readonly=True) as s:
        return "n1" in s.node_summaries(job_id)


def test_epilog_returns_before_delivery_and_a_down_controller_gets_the_summary_later(munge, tmp_path):
    node, ctrl = _cfgs(tmp_path)
    with Running(node, ScriptSampler(n=1), send_summaries=True) as r:
        rec, took = _run_job(r, node, 71)
        # the controller is down: the epilog does not wait for it (3 tries of 0.3 s would be ~1 s)
        assert rec["ok"] and rec["queued"] and took < 0.9, (rec, took)
        # the hand-over to the outbox runs after the reply (a pending marker stands for it meanwhile)
        wait_for(lambda: [p.name for p in _outbox(node)] == ["71.json"], timeout=10)
        summary = Path(node.general.run_dir) / "jobs" / "71" / "node_summary.json"
        wait_for(summary.exists, timeout=10)           # written by the daemon, sending failed
        time.sleep(1.5)
        assert [p.name for p in _outbox(node)] == ["71.json"] and not _stored(ctrl, 71)
        c = Controller(ctrl, accounting.StubWriter(0.0))
        try:
            # the daemon's next try (5 s after the first) finds the controller
            wait_for(lambda: _stored(ctrl, 71) and not _outbox(node), timeout=20)
        finally:
            c.close()


def test_a_controller_back_from_an_outage_hears_at_the_next_job_end_not_a_backoff_later(munge, tmp_path, monkeypatch):
    """Jobs that ended while the controller was down wait one backoff for all; a job ending later is tried
    at once, and when it gets through the ones that waited go with it (a minute's backoff notwithstanding)."""
    monkeypatch.setattr(workers, "RETRY_FIRST_S", 60.0)
    monkeypatch.setattr(workers, "PROBE_EVERY_S", 1.0)
    node, ctrl = _cfgs(tmp_path)
    with Running(node, ScriptSampler(n=1), send_summaries=True) as r:
        deliveries = r.d.deliveries
        for job in (81, 82):  # the second is tried at once too: it fails without lengthening the backoff
            rec, _ = _run_job(r, node, job)
            assert rec["queued"]
            wait_for(lambda j=job: (Path(node.general.run_dir) / "jobs" / str(j) / "node_summary.json").exists(), 10)
            time.sleep(1.2)
            assert deliveries._tried > time.monotonic() - 2.0  # this job was tried
        assert deliveries._fails == 1 and [p.name for p in _outbox(node)] == ["81.json", "82.json"]
        c = Controller(ctrl, accounting.StubWriter(0.0))
        try:
            time.sleep(1.2)
            assert not _stored(ctrl, 81)  # nothing is sent before the backoff but a job's end
            _run_job(r, node, 83)
            wait_for(lambda: all(_stored(ctrl, j) for j in (81, 82, 83)) and not _outbox(node), timeout=15)
            assert deliveries._fails == 0
        finally:
            c.close()


def test_outbox_survives_a_daemon_restart(munge, tmp_path):
    node, ctrl = _cfgs(tmp_path)
    with Running(node, ScriptSampler(n=1), send_summaries=True) as r:
        rec, _ = _run_job(r, node, 72)
        assert rec["queued"]
        wait_for(lambda: (Path(node.general.run_dir) / "jobs" / "72" / "node_summary.json").exists(), timeout=10)
        stopped = r.d
    for t in stopped._threads:
        if t.name == "deliver":
            t.join(10)   # its first try over (it failed): what is left is the outbox entry
    assert [p.name for p in _outbox(node)] == ["72.json"]      # stopped before the controller came back
    c = Controller(ctrl, accounting.StubWriter(0.0))
    try:
        with Running(node, ScriptSampler(n=1), send_summaries=True):
            wait_for(lambda: _stored(ctrl, 72) and not _outbox(node), timeout=15)
    finally:
        c.close()


def test_an_older_daemon_reply_is_delivered_by_the_epilog_itself(tmp_path):
    """A daemon that ignores ``deliver`` (an older gpuperf during an upgrade) returns the aggregates: the
    epilog writes the node summary as it did before."""
    node = make_cfg(tmp_path / "node", request_timeout_s=0.3)
    with Running(node, ScriptSampler(n=1)) as r:
        orig = r.d.ops.op_finalize

        def older(req, uid):
            req.job.pop("deliver", None)
            return orig(req, uid)

        r.d.ops.op_finalize = older
        rec, _ = _run_job(r, node, 73)
        assert rec["ok"] and not rec.get("queued") and rec["summary"].endswith("73/node_summary.json")
        assert not _outbox(node)
