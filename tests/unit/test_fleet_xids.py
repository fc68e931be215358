"""XIDs from NVML's event API: the nvmlq door over a stand-in pynvml, the daemon's per-sweep poll with
a fake event source (attributed to GPU and running job), and their way into the summary, the
fingerprints and the report's fleet section."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from gpuperf.access import nvmlq
from gpuperf.model.aggregates import JobAggregates
from gpuperf.fleet.fingerprint import FleetStore
from gpuperf.fleet.jobview import job_fleet
from gpuperf.model.load import node_figures
from gpuperf.fleet.ranking import rank_gpu
from gpuperf.report import fleetsection

sys.path.insert(0, str(Path(__file__).parent))
from test_daemon import Running, ScriptSampler, base, make_cfg, wait_for  # noqa: E402,F401


class _Err(Exception):
    def __init__(self, value: int):
        self.value = value


def fake_pynvml(pending: list[tuple[int, int]], unsupported: set[int]) -> types.SimpleNamespace:
    """The few pynvml calls of nvmlq.XidEvents; ``pending``: (GPU, XID) events waiting in the set."""
    m = types.SimpleNamespace(NVMLError=_Err, NVML_ERROR_TIMEOUT=10, NVML_ERROR_NOT_SUPPORTED=3,
                              nvmlEventTypeXidCriticalError=0x8, freed=[])

    def register(h, kind, s):
        if h in unsupported:
            raise _Err(3)
        s.append(h)

    def wait(s, timeout_ms):
        assert timeout_ms == 0           # polled from the loop: never blocks
        if not pending:
            raise _Err(10)
        gpu, xid = pending.pop(0)
        return types.SimpleNamespace(eventType=0x8, eventData=xid, device=gpu)

    m.nvmlEventSetCreate = lambda: []
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceRegisterEvents = register
    m.nvmlEventSetWait_v2 = wait
    m.nvmlDeviceGetIndex = lambda h: h
    m.nvmlEventSetFree = lambda s: m.freed.append(s)
    return m


@pytest.fixture
def nvml_stub(monkeypatch):
    def install(pending, unsupported=frozenset()):
        mod = fake_pynvml(pending, set(unsupported))
        monkeypatch.setattr(nvmlq, "_state", {"init": True, "error": None, "mod": mod})
        return mod
    return install


def test_nvml_door_registers_each_gpu_and_polls_without_waiting(nvml_stub) -> None:
    pending = [(1, 79), (3, 48)]
    mod = nvml_stub(pending, unsupported={2})
    ev = nvmlq.XidEvents([0, 1, 2, 3])
    assert ev.watched == [0, 1, 3]                 # GPU 2 cannot deliver events: left out, not fatal
    assert ev.poll() == [(1, 79), (3, 48)]
    assert ev.poll() == []                         # NVML_ERROR_TIMEOUT: nothing pending
    ev.close()
    assert mod.freed


class FakeXids:
    def __init__(self):
        self.queue: list[tuple[int, int]] = []

    def poll(self):
        out, self.queue = self.queue, []
        return out


def test_daemon_attributes_xids_to_gpu_and_running_job(base) -> None:
    src = FakeXids()
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler(n=4), xid_source=src) as r:
        assert r.call("register", {"job_id": 7, "uid": 0, "gpus": [0, 1]})["ok"]
        assert r.call("register", {"job_id": 8, "uid": 0, "gpus": [2]})["ok"]
        src.queue += [(1, 79), (1, 79), (3, 31)]
        wait_for(lambda: len(r.d.store.events(kind="xid")) == 3)
        a7 = r.call("finalize", {"job_id": 7})["aggregates"]
        a8 = r.call("finalize", {"job_id": 8})["aggregates"]
        ev = r.d.store.events(kind="xid")
    assert a7["gpus"]["1"]["xid_count"] == 2 and [x["xid"] for x in a7["gpus"]["1"]["xids"]] == [79, 79]
    assert a7["gpus"]["0"]["xid_count"] == 0 and a8["gpus"]["2"]["xid_count"] == 0
    by_gpu = {e["detail"]["gpu"]: e for e in ev}
    assert by_gpu[1]["job_id"] == 7 and by_gpu[1]["detail"]["jobs"] == [7]
    assert by_gpu[3]["job_id"] is None and by_gpu[3]["detail"]["jobs"] == []   # no job on GPU 3: the node's


def test_xids_reach_summary_fingerprint_and_report(tmp_path: Path) -> None:
    from gpuperf.diagnosis.jobsummary import node_summary

    agg = JobAggregates.new(9, "n1", [0, 1], 0.0, 1.0, names={0: "H", 1: "H"}, uuids={0: "GPU-a", 1: "GPU-b"})
    agg.gpus[1].fleet.note_xid(79, 5.0)
    s = node_summary(JobAggregates.from_state(agg.to_state()).to_dict(), {"job_id": 9, "node": "n1"})
    g1 = next(g for g in s["gpus"] if g["gpu"] == 1)
    assert g1["xids"] == {"count": 1, "codes": [79]} and "xids" not in s["gpus"][0]
    assert node_figures(agg.to_dict())[1]["xids"] == [79]
    st = FleetStore(tmp_path / "f.sqlite")
    st.ingest(s)
    st.ingest(s)
    row = next(r for r in st.gpus("n1") if r["idx"] == 1)
    assert row["xids"] == 2 and "2 XID event(s) while jobs ran (last: XID 79, 79)" in rank_gpu(row, {}).headline
    page = fleetsection.render(s, None)
    assert "Fleet health" in page and "n1 GPU 1: 1 XID event(s) during the job (XID 79)" in page
    assert fleetsection.render({"gpus": [{"node": "n1", "gpu": 0}]}, {"flagged": []}) == ""


def test_report_names_the_flagged_gpus_of_the_job(tmp_path: Path) -> None:
    import random

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import fleet_synth as fs
    from gpuperf.files import config
    from gpuperf.report import html

    st = FleetStore(tmp_path / "fleet.sqlite")
    pools = fs.build_pools(random.Random(5), per_workload=6)
    for s in fs.fleet(nodes=30, jobs=20, planted={(20, 3): "slow_clock"}, seed=3, pools=pools, h200_nodes=4):
        st.ingest(s)
    st.close()
    cfg = config.defaults()
    job = {"job_id": 1, "gpus": [{"node": "n020", "gpu": g} for g in range(8)]}
    view = job_fleet(cfg, job, str(tmp_path / "fleet.sqlite"))
    assert [(g["node"], g["gpu"]) for g in view["flagged"]] == [("n020", 3)]
    page = html.render(job, None, 100, fleet=view)
    assert "<h2 id='fleet'>Fleet health</h2>" in page and "GPU-synth-020-3 on n020 idx 3: SM clock under load" in page
    assert job_fleet(cfg, {"gpus": [{"node": "n021", "gpu": 0}]}, str(tmp_path / "fleet.sqlite")) == {"flagged": []}
    assert job_fleet(cfg, job, str(tmp_path / "missing.sqlite")) is None
    (tmp_path / "junk.sqlite").write_bytes(b"not a database" * 100)
    assert job_fleet(cfg, job, str(tmp_path / "junk.sqlite")) is None     # the report goes on without the section


def _snap_with(extra_nvlink: int = 0, extra_remap: int = 0, reset: bool = False) -> dict:
    import copy
    import json as _json

    snap = _json.loads((Path(__file__).resolve().parents[1] / "data" / "nodes" / "dgx-h100-ndr" / "gpus.json").read_text())
    snap = copy.deepcopy(snap)
    g1 = snap["gpus"][1]
    g1["nvlink"]["links"][0]["errors"]["replay"] += extra_nvlink
    g1["row_remap"]["correctable"] += extra_remap
    if reset:
        g1["ecc"]["volatile_corrected"] = 0
    return snap


def test_error_counters_from_a_recorded_snapshot_and_their_growth() -> None:
    from gpuperf.model import gpuerrors as errors

    c = errors.counters(_snap_with())
    assert set(c) == {str(i) for i in range(8)}
    assert set(c["1"]) == {"ecc_uncorrected", "ecc_corrected", "remapped_rows", "nvlink_errors"}
    later = errors.counters(_snap_with(extra_nvlink=7, extra_remap=1))
    assert errors.growth(c["1"], later["1"]) == {"ecc_uncorrected": 0, "ecc_corrected": 0, "remapped_rows": 1,
                                                 "nvlink_errors": 7}
    assert errors.growth({"ecc_corrected": 9}, {"ecc_corrected": 2}) == {"ecc_corrected": 2}   # reset by a reload
    assert errors.growth(None, later["1"]) is None


def test_daemon_charges_a_job_the_error_growth_on_its_gpus(base) -> None:
    cfg = make_cfg(base)
    with Running(cfg, ScriptSampler(n=8), xid_source=None) as r:
        r.d.note_node_snapshot(_snap_with())
        assert r.call("register", {"job_id": 11, "uid": 0, "gpus": [0, 1]})["ok"]
        r.d.note_node_snapshot(_snap_with(extra_nvlink=40, extra_remap=2))
        aggs = r.call("finalize", {"job_id": 11})["aggregates"]
    assert aggs["gpus"]["1"]["error_growth"]["nvlink_errors"] == 40
    assert aggs["gpus"]["1"]["error_growth"]["remapped_rows"] == 2
    assert aggs["gpus"]["0"]["error_growth"] == {"ecc_uncorrected": 0, "ecc_corrected": 0, "remapped_rows": 0,
                                                 "nvlink_errors": 0}
    assert node_figures(aggs)[1]["errors"]["nvlink_errors"] == 40


def test_fleet_flags_a_gpu_whose_nvlink_errors_keep_growing(tmp_path: Path) -> None:
    import random

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import fleet_synth as fs
    from gpuperf.fleet.ranking import rank

    st = FleetStore(tmp_path / "fleet.sqlite")
    pools = fs.build_pools(random.Random(5), per_workload=6)
    for s in fs.fleet(nodes=20, jobs=12, planted={}, seed=3, pools=pools, h200_nodes=10):
        if s["nodes"] == ["n004"]:
            s = dict(s, fleet=[dict(e, errors={"nvlink_errors": 40, "remapped_rows": 1}) if e["gpu"] == 6 else e
                               for e in s["fleet"]])
        st.ingest(s)
    ranks = rank(st.gpus(), st.model_stats(), 5.0)
    assert [(g.node, g.idx) for g in ranks if g.flagged] == [("n004", 6)]
    assert "NVLink error counters grew by 4" in ranks[0].headline and "rows remapped while jobs ran" in ranks[0].headline
