"""The daemon's SQLite store: packing, roll-up to 1-minute means, retention, series, jobs and aggregates."""

from __future__ import annotations

import sqlite3

import pytest

from gpuperf.daemon.store import SERIES_FIELDS, Store, pack, unpack
from gpuperf.samplers.base import GpuSample


def _s(gpu, t, **kw):
    return GpuSample(gpu=gpu, t=t, **kw)


def test_pack_round_trip_keeps_none_as_none():
    s = _s(3, 12.5, power_w=123.25, util_gpu_pct=None, throttle_reasons=0x44, nvlink_tx_bps=2.5e9)
    back = unpack(3, 12.5, pack(s))
    assert back.power_w == 123.25 and back.util_gpu_pct is None and back.throttle_reasons == 0x44
    assert back.nvlink_tx_bps == pytest.approx(2.5e9, rel=1e-6)
    assert len(pack(s)) == 4 * len(SERIES_FIELDS)


def test_wal_mode_and_reopen(tmp_path):
    st = Store(tmp_path / "d.sqlite")
    st.begin()
    st.put_job({"job_id": 5, "uid": 1000, "user": "u", "gpus": [0, 1], "cpus": 4, "node": "n", "start": 10.0}, 10.0)
    st.put_aggregates(5, 11.0, {"schema": "x", "hist": {str(i): i for i in range(1000)}})
    st.commit()
    st.close()
    db = sqlite3.connect(str(tmp_path / "d.sqlite"))
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    st = Store(tmp_path / "d.sqlite")
    j = st.job(5)
    assert j["gpus"] == [0, 1] and j["state"] == "running" and j["partial"] is False
    assert st.aggregates(5)["hist"]["999"] == 999
    st.finish_job(5, 20.0, True, 21.0)
    assert st.job(5)["state"] == "finalized" and st.job(5)["partial"] is True
    assert [r["job_id"] for r in st.jobs(state="running")] == []
    assert [r["job_id"] for r in st.jobs(uid=1000)] == [5] and st.jobs(uid=1) == []


def test_rollup_makes_minute_means_and_ages_out_full_resolution(tmp_path):
    st = Store(tmp_path / "d.sqlite", full_res_s=600)
    t0 = 1_000_020 * 60.0                  # a whole minute
    st.begin()
    for i in range(3 * 3600):             # three hours at 1 Hz, two GPUs
        for g in (0, 1):
            st.add_samples([_s(g, t0 + i, power_w=float(i // 60), throttle_reasons=(4 if i % 2 else 8))])
    st.commit()
    now = t0 + 3 * 3600 + 10               # the last minute has settled
    st.begin()
    st.rollup(now)
    st.commit()
    fine = st.db.execute("SELECT count(*), min(t) FROM samples WHERE gpu=0").fetchone()
    kept = sum(1 for i in range(3 * 3600) if t0 + i >= now - 600)
    assert fine[0] == kept and fine[1] >= now - 600          # only the full-resolution window is left
    coarse = st.db.execute("SELECT count(*) FROM samples_1m WHERE gpu=0").fetchone()[0]
    assert coarse == 180
    minute = st.db.execute("SELECT v FROM samples_1m WHERE gpu=1 AND t=?", (t0 + 120,)).fetchone()[0]
    m = unpack(1, t0 + 120, minute)
    assert m.power_w == 2.0 and m.throttle_reasons == 12     # mean; reasons OR-ed
    # idempotent: a second roll-up adds nothing
    st.begin()
    st.rollup(now)
    st.commit()
    assert st.db.execute("SELECT count(*) FROM samples_1m WHERE gpu=0").fetchone()[0] == 180


def test_series_joins_coarse_and_fine_and_downsamples(tmp_path):
    st = Store(tmp_path / "d.sqlite", full_res_s=600)
    t0 = 2_000_000 * 60.0
    st.begin()
    for i in range(3600):
        st.add_samples([_s(0, t0 + i, power_w=100.0 if i < 1800 else 300.0)])
    st.commit()
    st.begin()
    st.rollup(t0 + 3600)
    st.commit()
    full = st.series([0], t0, t0 + 3600, max_points=100000, fields=["power_w"])["0"]
    # 50 coarse minutes (before the fine window) + 600 fine seconds
    assert len(full["t"]) == 50 + 600
    assert full["t"] == sorted(full["t"])
    small = st.series([0], t0, t0 + 3600, max_points=60, fields=["power_w"])["0"]
    assert len(small["t"]) <= 60
    assert small["power_w"][0] == 100.0 and small["power_w"][-1] == 300.0


def test_samples_since_in_time_order(tmp_path):
    st = Store(tmp_path / "d.sqlite")
    st.begin()
    for i in range(5):
        st.add_samples([_s(1, 100.0 + i, power_w=float(i)), _s(0, 100.0 + i, power_w=float(i)), _s(2, 100.0 + i)])
    st.commit()
    got = st.samples_since([0, 1], 101.0)
    assert [(s.t, s.gpu) for s in got] == [(t, g) for t in (102.0, 103.0, 104.0) for g in (0, 1)]


def test_prune_forgets_old_finished_jobs_only(tmp_path):
    st = Store(tmp_path / "d.sqlite", retention_days=1)
    st.begin()
    for jid, start in ((1, 0.0), (2, 0.0), (3, 200000.0)):
        st.put_job({"job_id": jid, "uid": 0, "gpus": [0], "start": start}, start)
        st.put_aggregates(jid, start, {"x": jid})
    st.finish_job(1, 10.0, False, 10.0)
    st.prune(200000.0)
    st.commit()
    assert st.job(1) is None and st.aggregates(1) is None
    assert st.job(2)["state"] == "running"          # an old but running job stays
    assert st.job(3) is not None


def test_events(tmp_path):
    st = Store(tmp_path / "d.sqlite")
    st.add_event(1.0, 4, "mismatch", {"pid": 9})
    st.add_event(2.0, 5, "register")
    assert [e["kind"] for e in st.events(job_id=4)] == ["mismatch"]
    assert st.events(kind="register")[0]["job_id"] == 5
