"""The epilog's finalisation is handed over after the daemon's reply: the job's end waits for the store
commit only, and a pending marker stands for the hand-over until it is done (a daemon killed in between
delivers the job when it starts again)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_daemon import make_cfg  # noqa: E402
from test_daemon_parts import ACCESS, LOG, FakeStore, _jobs, _Sampler  # noqa: E402

from gpuperf.daemon import deliver, protocol  # noqa: E402
from gpuperf.daemon.handover import Handover  # noqa: E402
from gpuperf.daemon.ops import Ops  # noqa: E402
from gpuperf.daemon.view import LiveView  # noqa: E402


def _ops(tmp_path: Path, store: FakeStore, handed: list) -> tuple[Ops, object, object]:
    cfg = make_cfg(tmp_path)
    jobs, _ = _jobs(store, state_dir=cfg.general.state_dir)
    stats = {"requests": 0, "bad_requests": 0, "sweeps": 0, "skipped": 0, "sweep_s": 0.0}
    handover = Handover(store, lambda aggs, ctx: handed.append((aggs, ctx)) or Path("/outbox"), 0, LOG)
    ops = Ops(access=ACCESS, jobs=jobs, store=store, handover=handover, view=LiveView(jobs.registry, stats),
              health=lambda: None, facts=jobs.facts, sampler=_Sampler(), clock=jobs.clock, started=0.0,
              stats=stats, cfg=cfg, log=LOG)
    return ops, jobs, cfg


def _finalise(ops: Ops, job_id: int) -> dict:
    job = {"job_id": job_id, "deliver": True, "exit_code": 0}
    return ops.handle(protocol.encode(protocol.request("finalize", job)), 0, "hook")


def test_hand_over_after_the_reply_with_a_marker_until_then(tmp_path):
    store, handed = FakeStore(), []
    ops, jobs, cfg = _ops(tmp_path, store, handed)
    jobs.register({"job_id": 8, "uid": 1000, "user": "u", "gpus": [0]})
    reply = _finalise(ops, 8)
    assert reply["ok"] and reply["queued"] and reply["outbox"].endswith("/outbox/8.json")
    assert handed == [] and store.jobs_[8]["state"] == "finalized"      # committed, not yet handed over
    marker = deliver.pending_dir(cfg.general.state_dir) / "finalize-8.json"
    assert marker.exists()
    ops.run_later()
    (aggs, ctx), = handed
    assert aggs["job_id"] == 8 and ctx["user"] == "u" and ctx["exit_code"] == 0
    assert not marker.exists() and ops.later == []


def test_a_daemon_killed_before_the_hand_over_delivers_the_job_when_it_starts(tmp_path):
    store, handed = FakeStore(), []
    ops, jobs, cfg = _ops(tmp_path, store, handed)
    jobs.register({"job_id": 9, "uid": 1000, "user": "u", "gpus": [0]})
    assert _finalise(ops, 9)["queued"]
    ops.later.clear()                                   # killed: what it left for later never ran
    again, calls = _jobs(store, state_dir=cfg.general.state_dir)
    again.take_pending()
    (aggs, ctx), = calls["handed"]
    assert aggs["job_id"] == 9 and ctx["user"] == "u" and handed == []
    assert not any(deliver.pending_dir(cfg.general.state_dir).iterdir())


def test_without_a_marker_the_hand_over_happens_before_the_reply(tmp_path):
    store, handed = FakeStore(), []
    ops, jobs, cfg = _ops(tmp_path, store, handed)
    deliver.pending_dir(cfg.general.state_dir).parent.mkdir(parents=True, exist_ok=True)
    deliver.pending_dir(cfg.general.state_dir).write_text("a file where the directory should be")
    jobs.register({"job_id": 10, "uid": 1000, "user": "u", "gpus": [0]})
    assert _finalise(ops, 10)["outbox"] == "/outbox"
    assert [a["job_id"] for a, _ in handed] == [10] and ops.later == []
