"""The daemon's parts one at a time, each built with fakes of its collaborators (no sockets, no threads,
no store file): registration rules, finalisation, pending markers, jobs from before boot (``jobs.Jobs``);
who may ask what and what each op answers (``ops.Access``, ``ops.Ops``); one sweep and its failures
(``sampling.Sweeper``, ``Energy``, ``attribution.Mismatches``); the hand-over of a finalised job
(``handover.Handover``); the delivery backoff (``workers.Deliveries``); the job-record pruner."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpuperf.daemon import deliver, protocol, workers
from gpuperf.daemon.attribution import Mismatches
from gpuperf.daemon.chores import JobDirPruner
from gpuperf.daemon.handover import Handover
from gpuperf.daemon.jobs import Jobs, NodeFacts, Registry
from gpuperf.daemon.ops import Access, Ops
from gpuperf.daemon.sampling import Energy, Sweeper
from gpuperf.daemon.view import LiveView
from gpuperf.daemon.workers import Deliveries
from gpuperf.files import log
from gpuperf.samplers.base import GpuSample
from test_daemon import make_cfg

LOG = log.get("test.daemon.parts")
DAY = 86400.0


class FakeStore:
    """The store's interface over dicts; ``fail`` names a method that raises; records transactions."""

    def __init__(self) -> None:
        self.jobs_: dict[int, dict[str, Any]] = {}
        self.aggs: dict[int, dict[str, Any]] = {}
        self.summaries: dict[int, dict[str, Any]] = {}
        self.events_: list[tuple[float, int | None, str, dict]] = []
        self.samples: list[GpuSample] = []
        self.log: list[str] = []
        self.fail: str | None = None
        self.series_calls: list[tuple] = []

    def _maybe_fail(self, name: str) -> None:
        if self.fail == name:
            raise OSError(f"{name}: disk full")

    def begin(self) -> None:
        self.log.append("begin")

    def commit(self) -> None:
        self.log.append("commit")

    def rollback_quietly(self) -> None:
        self.log.append("rollback")

    def in_transaction(self, fn, *args) -> None:
        self.begin()
        fn(*args)
        self.commit()

    def put_job(self, reg: dict, now: float) -> None:
        self.jobs_[reg["job_id"]] = {**reg, "state": "running", "end": None}

    def put_aggregates(self, job_id: int, t: float, state: dict) -> None:
        self.aggs[job_id] = state

    def finish_job(self, job_id: int, end: float, partial: bool, now: float) -> None:
        self.jobs_[job_id].update(state="finalized", end=end, partial=partial)

    def add_event(self, t: float, job_id: int | None, kind: str, detail: dict | None = None) -> None:
        self.events_.append((t, job_id, kind, detail or {}))

    def add_samples(self, samples) -> None:
        self._maybe_fail("add_samples")
        self.samples.extend(samples)

    def job(self, job_id: int) -> dict | None:
        return self.jobs_.get(job_id)

    def jobs(self, state: str | None = None, uid: int | None = None, limit: int = 1000) -> list[dict]:
        return [j for j in self.jobs_.values() if (state is None or j["state"] == state) and (uid is None or j["uid"] == uid)]

    def aggregates(self, job_id: int) -> dict | None:
        return self.aggs.get(job_id)

    def put_summary(self, job_id: int, summary: dict) -> None:
        self.summaries[job_id] = summary

    def summary(self, job_id: int) -> dict | None:
        return self.summaries.get(job_id)

    def samples_since(self, gpus, t0: float) -> list[GpuSample]:
        return [s for s in self.samples if s.gpu in gpus and s.t > t0]

    def series(self, gpus, t0, t1, points=500, fields=None) -> dict:
        self._maybe_fail("series")
        self.series_calls.append((list(gpus), t0, t1, points))
        return {str(g): {"t": [t0, t1], "power_w": [100.0, 100.0]} for g in gpus}

    def kinds(self) -> list[str]:
        return [e[2] for e in self.events_]


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _jobs(store: FakeStore | None = None, *, state_dir: str = "/nonexistent", clock: Clock | None = None,
          energy: dict | None = None) -> tuple[Jobs, dict[str, list]]:
    """A Jobs part over fakes; ``calls`` records energy reads, view changes and hand-overs."""
    calls: dict[str, list] = {"energy": [], "changed": [], "handed": []}

    def read_energy() -> dict:
        calls["energy"].append(1)
        return dict(energy or {0: 500.0, 1: 600.0})

    jobs = Jobs(store or FakeStore(), Registry(), NodeFacts("n1", 1.0, {0: "H100", 1: "H100"}), clock=clock or Clock(),
                read_energy=read_energy, error_counters=lambda: {},
                hand_over=lambda aggs, ctx: calls["handed"].append((aggs, ctx)),
                on_change=lambda: calls["changed"].append(1), state_dir=state_dir, log=LOG)
    return jobs, calls


def _sample(gpu: int, t: float, procs: list[dict] | None = None) -> GpuSample:
    return GpuSample(gpu=gpu, t=t, util_gpu_pct=50.0, power_w=200.0, processes=procs or [])


# jobs.Registry / jobs.Jobs --------------------------------------------------------------------

def test_registry_knows_each_gpus_jobs_and_each_jobs_uid():
    jobs, _ = _jobs()
    jobs.register({"job_id": 1, "uid": 1000, "user": "u", "gpus": [0, 1]})
    jobs.register({"job_id": 2, "uid": 1001, "user": "v", "gpus": [1]})
    reg = jobs.registry
    assert reg.gpu_jobs() == {0: [1], 1: [1, 2]} and reg.sharing() == {0: 1, 1: 2}
    assert reg.uid_of(2) == 1001 and reg.uid_of(3) is None
    assert reg.listing() == [(1, "u", [0, 1]), (2, "v", [1])]


def test_register_is_idempotent_and_stores_the_job_once():
    store = FakeStore()
    jobs, calls = _jobs(store)
    assert jobs.register({"job_id": 7, "uid": 1000, "gpus": [0]}) == protocol.ok(job_id=7)
    assert jobs.register({"job_id": 7, "uid": 1000, "gpus": [0, 1]}) == protocol.ok(job_id=7, already=True)
    assert store.kinds() == ["register"] and len(calls["changed"]) == 1
    assert jobs.running[7].reg["gpus"] == [0] and jobs.running[7].reg["node"] == "n1"   # the node's name by default


def test_a_late_registration_starts_with_a_gap_and_a_timely_one_without():
    clock = Clock()
    jobs, _ = _jobs(clock=clock)
    jobs.register({"job_id": 1, "uid": 0, "gpus": [0], "start": clock.t - 0.5})
    jobs.register({"job_id": 2, "uid": 0, "gpus": [1], "start": clock.t - 60.0})
    assert jobs.running[1].agg.gaps == [] and jobs.running[2].agg.gaps == [[clock.t - 60.0, clock.t]]


def test_finalize_reads_the_end_energy_only_live_and_answers_a_repeat_from_the_store():
    store = FakeStore()
    jobs, calls = _jobs(store)
    jobs.register({"job_id": 1, "uid": 0, "gpus": [0]})
    jobs.register({"job_id": 2, "uid": 0, "gpus": [1]})
    live = jobs.finalize(1, None, partial=False)
    assert len(calls["energy"]) == 1 and live["partial"] is False
    late = jobs.finalize(2, 123.0, partial=True)
    assert len(calls["energy"]) == 1 and late["partial"] is True and late["end"] == 123.0   # no reading for a late one
    assert jobs.running == {} and store.jobs_[2]["state"] == "finalized"
    assert jobs.finalize(2, None, partial=False) == late       # a repeat: the stored aggregates
    assert jobs.finalize(99, None, partial=False) is None


def test_a_job_from_before_boot_is_finalised_at_its_last_sample_partial_and_handed_over():
    clock = Clock(2000.0)
    jobs, calls = _jobs(clock=clock)
    jobs.register({"job_id": 5, "uid": 1000, "user": "u", "gpus": [0], "start": 100.0})
    jobs.register({"job_id": 6, "uid": 1000, "user": "u", "gpus": [1], "start": 1900.0})
    jobs.end_jobs_from_before_boot(boot=1500.0)
    assert set(jobs.running) == {6}
    (aggs, ctx), = calls["handed"]
    assert aggs["job_id"] == 5 and aggs["partial"] is True and aggs["end"] == 100.0   # never sampled: its start
    assert ctx == {"job_id": 5, "user": "u", "uid": 1000, "node": "n1"}


def test_pending_markers_register_and_finalise_partial_and_a_bad_one_is_kept_aside(tmp_path):
    state = str(tmp_path)
    jobs, calls = _jobs(state_dir=state)
    deliver.write_pending(state, "register", {"job_id": 11, "uid": 1000, "gpus": [0], "start": 999_990.0})
    jobs.take_pending()
    assert jobs.running[11].reg["partial"] is True
    deliver.write_pending(state, "finalize", {"job_id": 11, "end": 999_999.0}, {"exit_code": 0})
    deliver.write_pending(state, "finalize", {"job_id": 12, "end": 1.0})           # not registered: dropped
    deliver.write_pending(state, "register", {"job_id": 13, "uid": "root", "gpus": [0]})   # uid not a number
    jobs.take_pending()
    assert jobs.running == {}
    (aggs, ctx), = calls["handed"]
    assert aggs["job_id"] == 11 and aggs["partial"] is True and ctx == {"exit_code": 0}
    assert sorted(p.name for p in deliver.pending_dir(state).iterdir()) == ["register-13.bad"]


def test_resume_takes_back_the_running_jobs_and_refolds_what_was_stored_after_their_checkpoint():
    store = FakeStore()
    jobs, _ = _jobs(store)
    jobs.register({"job_id": 3, "uid": 0, "gpus": [0], "start": 999_000.0})
    store.samples = [_sample(0, 999_001.0), _sample(0, 999_002.0), _sample(1, 999_002.0)]
    again, _ = _jobs(store)
    again.resume()
    agg = again.running[3].agg
    assert agg.last_t == 999_002.0 and again.running[3].needs_energy is False
    assert store.kinds().count("resume") == 1


# ops.Access / ops.Ops -------------------------------------------------------------------------

ACCESS = Access(slurm_uid=64030, admin_uids=frozenset({0, 500}))


@pytest.mark.parametrize("op,uid,channel,refused", [
    ("ping", 1000, "control", "may not use the control socket"),
    ("ping", 1000, "hook", "may not use the hook socket"),
    ("ping", 64030, "control", None),
    ("job", 1000, "user", None),
    ("register", 1000, "user", "register needs root or SlurmUser"),
    ("finalize", 500, "user", "finalize needs root or SlurmUser"),   # an admin reads all, writes nothing
    ("register", 64030, "user", None),
    ("ping", None, "user", None),
    ("jobs", None, "user", "caller's uid unknown"),
])
def test_access_rules_per_socket(op, uid, channel, refused):
    why = ACCESS.refusal(op, uid, channel)
    assert (why is None) if refused is None else (refused in why)


def test_admins_read_every_job_and_users_their_own():
    assert ACCESS.may_read(500, 1000) and ACCESS.may_read(64030, 1000) and ACCESS.may_read(1000, 1000)
    assert not ACCESS.may_read(1001, 1000) and not ACCESS.may_read(None, None)


class _Sampler:
    name = "fake"

    def gpu_count(self) -> int:
        return 2


def _ops(tmp_path, *, health=None, store: FakeStore | None = None) -> tuple[Ops, Jobs, LiveView, dict]:
    store = store or FakeStore()
    jobs, _ = _jobs(store)
    stats = {"requests": 0, "bad_requests": 0, "sweeps": 3, "skipped": 1, "sweep_s": 0.01}
    view = LiveView(jobs.registry, stats)
    handover = Handover(store, lambda aggs, ctx: None, 0, LOG)
    ops = Ops(access=ACCESS, jobs=jobs, store=store, handover=handover, view=view, health=lambda: health,
              facts=jobs.facts, sampler=_Sampler(), clock=jobs.clock, started=jobs.clock() - 10.0, stats=stats,
              cfg=make_cfg(tmp_path), log=LOG)
    return ops, jobs, view, stats


def _ask(ops: Ops, op: str, job: dict | None = None, uid: int | None = 0, channel: str = "user") -> dict:
    return ops.handle(protocol.encode(protocol.request(op, job)), uid, channel)


def test_ops_count_bad_requests_and_answer_ping(tmp_path):
    ops, _, _, stats = _ops(tmp_path)
    assert _ask(ops, "ping", uid=1000)["gpus"] == 2
    assert ops.handle(b"not json", 0, "control")["ok"] is False
    assert stats["requests"] == 2 and stats["bad_requests"] == 1
    assert _ask(ops, "ping")["uptime_s"] == 10.0


def test_op_job_shows_a_users_own_job_and_not_anothers(tmp_path):
    ops, jobs, _, _ = _ops(tmp_path)
    jobs.register({"job_id": 8, "uid": 1000, "gpus": [0]})
    assert _ask(ops, "job", {"job_id": 8}, uid=1000)["state"] == "running"
    assert _ask(ops, "job", {"job_id": 8}, uid=1001)["error"] == "job 8 is not known here"
    jobs.finalize(8, None, partial=False)
    assert _ask(ops, "job", {"job_id": 8}, uid=1001)["error"] == "job 8 is not known here"
    assert _ask(ops, "job", {"job_id": 8}, uid=500)["state"] == "finalized"
    assert _ask(ops, "job", {"job_id": 9}, uid=500)["error"] == "job 9 is not known here"


def test_op_live_shows_only_the_callers_gpus(tmp_path):
    ops, jobs, view, _ = _ops(tmp_path)
    jobs.register({"job_id": 8, "uid": 1000, "gpus": [1]})
    view.note_sweep(5.0, [_sample(0, 5.0), _sample(1, 5.0)])
    mine = _ask(ops, "live", uid=1000)
    assert [g["gpu"] for g in mine["gpus"]] == [1] and [j["job_id"] for j in mine["jobs"]] == [8]
    other = _ask(ops, "live", uid=1001)
    assert other["gpus"] == [] and other["jobs"] == []
    assert [g["gpu"] for g in _ask(ops, "live", uid=500)["gpus"]] == [0, 1]


def test_op_health_refuses_what_is_missing_or_too_old(tmp_path):
    ops, jobs, _, _ = _ops(tmp_path)
    assert _ask(ops, "health", {"gpus": [0]})["error"] == "no health"
    fresh, _, _, _ = _ops(tmp_path, health={"t": jobs.clock() - 30.0, "results": []})
    assert _ask(fresh, "health", {"gpus": [0], "max_age_s": 60})["ok"] is True
    assert "30 s old" in _ask(fresh, "health", {"gpus": [0], "max_age_s": 10})["error"]


def test_an_op_that_fails_rolls_the_store_back_and_answers_an_error(tmp_path):
    store = FakeStore()
    ops, jobs, _, _ = _ops(tmp_path, store=store)
    jobs.register({"job_id": 8, "uid": 1000, "gpus": [0]})
    store.fail = "series"
    reply = _ask(ops, "series", {"job_id": 8, "max_points": 10})
    assert reply["ok"] is False and "internal error: OSError" in reply["error"] and store.log[-1] == "rollback"


# sampling.Sweeper / Energy / attribution.Mismatches --------------------------------------------

class _Attr:
    def __init__(self, jobs: dict[int, int | None], profilers: dict[int, str] | None = None) -> None:
        self.jobs, self.profilers = jobs, profilers or {}

    def job_of(self, pid: int) -> int | None:
        return self.jobs.get(pid)

    def job_and_profiler(self, pid: int) -> tuple[int | None, str | None]:
        return self.jobs.get(pid), self.profilers.get(pid)

    def frameworks_of(self, pid: int) -> list[str] | None:
        return None         # maps not read: the advice stays framework-neutral

    def present(self, pid: int) -> bool:
        return True


class _Pub:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def wanted(self) -> bool:
        return True

    def publish(self, msg: dict) -> None:
        self.sent.append(msg)


def _sweeper(samples, store: FakeStore, jobs: Jobs, attr: dict | None = None, energy_every_s: float = 600.0):
    stats = {"sweeps": 0, "errors": 0, "mismatches": 0}
    reads: list[int] = []
    chores: list[float] = []

    def sample():
        if isinstance(samples, Exception):
            raise samples
        return samples

    sampler = type("S", (), {"sample": staticmethod(sample)})()
    view, pub = LiveView(jobs.registry, stats), _Pub()
    energy = Energy(lambda: reads.append(1) or {0: 10.0, 1: 20.0}, energy_every_s)
    sw = Sweeper(sampler=sampler, store=store, registry=jobs.registry,
                 mismatches=Mismatches(_Attr(attr or {}), jobs.running, store, stats), energy=energy,
                 chores=chores.append, xid_source=None, view=view, pub=pub, stats=stats, log=LOG)
    return sw, stats, view, pub, reads, chores


def test_a_sweep_stores_folds_runs_the_chores_and_publishes():
    store = FakeStore()
    jobs, _ = _jobs(store)
    jobs.register({"job_id": 1, "uid": 0, "gpus": [0]})
    sw, stats, view, pub, reads, chores = _sweeper([_sample(0, 10.0), _sample(1, 10.0)], store, jobs)
    sw.sweep()
    assert stats["sweeps"] == 1 and len(store.samples) == 2 and chores == [10.0]
    assert jobs.running[1].agg.last_t == 10.0 and view.latest_t == 10.0
    assert pub.sent[0]["jobs"] == {"0": [1]} and view.current()["jobs"] == [(1, None, [0])]
    assert reads == [1] and not jobs.running[1].needs_energy   # the first sweep after registering reads the counter


def test_a_failing_backend_costs_the_sweep_and_a_failing_store_rolls_back_but_still_publishes():
    store = FakeStore()
    jobs, _ = _jobs(store)
    sw, stats, view, pub, _, chores = _sweeper(RuntimeError("NVML gone"), store, jobs)
    sw.sweep()
    assert stats == {"sweeps": 0, "errors": 1, "mismatches": 0} and pub.sent == [] and store.log == []
    store.fail = "add_samples"
    sw, stats, view, pub, _, chores = _sweeper([_sample(0, 10.0)], store, jobs)
    sw.sweep()
    assert stats["errors"] == 1 and store.log[-1] == "rollback" and chores == []
    assert view.latest_t == 10.0 and len(pub.sent) == 1


def test_energy_is_read_for_new_jobs_and_for_all_when_due():
    jobs, _ = _jobs()
    jobs.register({"job_id": 1, "uid": 0, "gpus": [0]})
    reads: list[int] = []
    energy = Energy(lambda: reads.append(1) or {0: 10.0}, every_s=600.0)
    energy.fold(1000.0, jobs.running)        # new job, and due (never read): one read
    energy.fold(1001.0, jobs.running)        # neither
    assert reads == [1]
    jobs.register({"job_id": 2, "uid": 0, "gpus": [1]})
    energy.fold(1002.0, jobs.running)
    assert reads == [1, 1] and energy.last_t == 1000.0      # only job 2 needed it: not a periodic reading
    energy.fold(1600.0, jobs.running)
    assert reads == [1, 1, 1] and energy.last_t == 1600.0


def test_a_foreign_process_is_noted_in_the_job_every_sweep_and_recorded_once():
    store = FakeStore()
    jobs, _ = _jobs(store)
    jobs.register({"job_id": 1, "uid": 0, "gpus": [0]})
    procs = [{"pid": 41}, {"pid": 42}]
    sw, stats, *_ = _sweeper([_sample(0, 10.0, procs)], store, jobs, attr={41: 1, 42: 77})
    sw.sweep()
    sw.fold(11.0, [_sample(0, 11.0, procs)])
    assert stats["mismatches"] == 1 and store.kinds().count("mismatch") == 1
    (ev,) = [e for e in store.events_ if e[2] == "mismatch"]
    assert ev[1] == 1 and ev[3] == {"gpu": 0, "pid": 42, "process_job": 77, "registered": [1]}
    foreign = jobs.running[1].agg.gpus[0].foreign["42"]
    assert foreign["first_t"] == 10.0 and foreign["last_t"] == 11.0


def test_a_sweep_folds_a_profiled_jobs_activity_as_missing_and_only_for_that_job():
    # GPU 0 shared by jobs 1 and 2: job 1's own process runs under Nsight Compute. Job 1's activity figures
    # are missing for that time (its seconds counted), its power still folds; job 2's figures stay, and a
    # foreign process under a profiler (pid 43, job 77) blanks nobody's
    store = FakeStore()
    jobs, _ = _jobs(store)
    jobs.register({"job_id": 1, "uid": 0, "gpus": [0]})
    jobs.register({"job_id": 2, "uid": 0, "gpus": [0, 1]})
    procs = [{"pid": 41}, {"pid": 42}, {"pid": 43}]
    sw, stats, *_ = _sweeper([_sample(0, 10.0, procs), _sample(1, 10.0, [{"pid": 43}])], store, jobs,
                             attr={41: 1, 42: 2, 43: 77})
    sw.mismatches.attr.profilers = {41: "Nsight Compute", 43: "Nsight Compute"}
    sw.sweep()
    sw.fold(11.0, [_sample(0, 11.0, procs), _sample(1, 11.0)])
    g1, g2 = jobs.running[1].agg.gpus[0], jobs.running[2].agg.gpus[0]
    assert g1.profiled_s == 2.0 and g1.profilers == {"Nsight Compute": 2.0} and g1.samples == 2
    assert "util_gpu_pct" not in g1.metrics and g1.metrics["power_w"].n == 2 and g1.idle_s == 0.0
    assert g2.profiled_s == 0.0 and g2.metrics["util_gpu_pct"].n == 2
    assert jobs.running[2].agg.gpus[1].profiled_s == 0.0
    assert [e[1:] for e in store.events_ if e[2] == "profiler"] == [(1, "profiler", {"gpu": 0, "pid": 41, "tool": "Nsight Compute"})]


# handover.Handover -------------------------------------------------------------------------------

def test_handover_sends_the_series_it_can_read_and_the_job_regardless():
    store = FakeStore()
    put: list[tuple] = []
    aggs = {"job_id": 4, "gpus": {"0": {}}, "start": 100.0, "end": 200.0}
    Handover(store, lambda a, c: put.append((a, c)), 50, LOG).deliver_finalised(aggs, {"exit_code": 0})
    (a, ctx), = put
    assert a is aggs and ctx["exit_code"] == 0 and ctx["controller_series"]["gpus"] and "series" in ctx
    put.clear()
    store.fail = "series"
    Handover(store, lambda a, c: put.append((a, c)), 50, LOG).deliver_finalised(aggs, {})
    assert put == [(aggs, {"controller_series": None})]
    assert Handover(FakeStore(), put.append, 0, LOG).controller_series(aggs) is None   # series_points = 0: off


# workers.Deliveries: the backoff --------------------------------------------------------------------

def test_deliveries_back_off_for_all_waiting_and_a_fresh_job_still_probes(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "RETRY_FIRST_S", 60.0)
    cfg = make_cfg(tmp_path)
    now = [100.0]
    sent: list[int] = []
    up = [False]
    monkeypatch.setattr(workers.deliver_mod, "write", lambda cfg, aggs, ctx: ({"errors": []}, {"job_id": aggs["job_id"]}))

    def send(cfg, summary, attempts=1):
        sent.append(summary["job_id"])
        return {"sent": up[0], "retry": True, "errors": [] if up[0] else ["refused"]}

    monkeypatch.setattr(workers.deliver_mod, "send_summary", send)
    d = Deliveries(cfg, LOG, True, monotonic=lambda: now[0])

    def item(job: int, fresh: bool = True) -> tuple:
        outbox = deliver.write_outbox(cfg.general.state_dir, {"job_id": job}, {})
        return ({"job_id": job}, {}, outbox, None, fresh)

    when, later = d._one(*item(1))                       # fails: the backoff starts
    assert sent == [1] and when == 100.0 + workers.RETRY_FIRST_S and later[4] is False
    assert d._one(*later) == (when, later) and sent == [1]          # a waiting one is not tried in the backoff
    now[0] += 1.0
    assert d._one(*item(2))[0] == when and sent == [1]   # a fresh one within PROBE_EVERY_S of the last try: waits
    now[0] += workers.PROBE_EVERY_S
    assert d._one(*item(3))[0] == when and sent == [1, 3]  # tried at once; failing, it neither lengthens the backoff
    assert d._fails == 1
    d._later = [(when, 0, later)]
    up[0] = True
    now[0] += 0.1
    d._tried = -workers.PROBE_EVERY_S
    assert d._one(*item(4)) is None and sent == [1, 3, 4]
    assert d._fails == 0 and d._later[0][0] == 0.0        # what waited is due at once
    assert not (Path(cfg.general.state_dir) / "outbox" / "4.json").exists()


def test_a_busy_controller_keeps_the_summary_in_the_outbox_for_the_backoff(tmp_path, monkeypatch):
    # the collector's "busy, retry" reply (past its byte budget) is not a refusal: the node keeps the summary
    # in its outbox and sends it again after the backoff, as after a timeout; a refusal is not resent
    import socket
    import threading

    from gpuperf.controller import transport
    from gpuperf.files import framing

    replies = [{"ok": False, "error": "busy: try again later", "retry": True}, {"ok": False, "error": "malformed: x"},
               {"ok": True}]
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        for reply in replies:
            c, _ = srv.accept()
            with c:
                for _ in range(4):
                    framing.recv_part(c, 1 << 20, time.monotonic() + 5)
                c.sendall(framing.encode(json.dumps(reply).encode()))

    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.setattr(transport, "credential", lambda payload, socket="": b"cred")
    monkeypatch.setattr(workers.deliver_mod, "write", lambda cfg, aggs, ctx: ({"errors": []}, {"job_id": aggs["job_id"]}))
    cfg = make_cfg(tmp_path)
    cfg.data["controller"]["address"] = f"127.0.0.1:{srv.getsockname()[1]}"
    now = [100.0]
    d = Deliveries(cfg, LOG, True, monotonic=lambda: now[0])
    outbox = deliver.write_outbox(cfg.general.state_dir, {"job_id": 7}, {})
    when, later = d._one({"job_id": 7}, {}, outbox, None, True)          # busy: kept, tried again after the backoff
    assert when == 100.0 + workers.RETRY_FIRST_S and outbox.exists()
    assert deliver.send_summary(cfg, {"job_id": 7}, attempts=1)["retry"] is False   # refused: not resent
    now[0] = when
    assert d._one(*later) is None and not outbox.exists()                # taken at the retry
    srv.close()


# chores.JobDirPruner ----------------------------------------------------------------------------------

def test_the_pruner_keeps_a_registered_jobs_records(tmp_path):
    run = tmp_path / "run"
    old = time.time() - 30 * DAY
    for job in (40, 41):
        d = run / "jobs" / str(job)
        d.mkdir(parents=True)
        (d / "prolog.json").write_text(json.dumps({}))
        os.utime(d, (old, old))
    pruner = JobDirPruner(str(run), 7.0, lambda: {41}, LOG)
    pruner.start()
    pruner.join(10)
    assert sorted(p.name for p in (run / "jobs").iterdir()) == ["41"]
