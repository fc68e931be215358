"""benchmarks/job_timeline.py: where a cost-run job's wall time goes (issue 29), from the timing wrappers' log,
the job's output and the benchmark's clock; and gpu_job_cost.summarise's per-segment on-off intervals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_job_cost as gjc  # noqa: E402
import job_timeline as jt  # noqa: E402

T = 1_780_000_000.0


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def _log(job: int, base: float, prolog_ms: float = 5.0, epilog_ms: float = 10.0) -> str:
    lines = [f"{job} prolog {_ns(base + 0.5)} {_ns(base + 0.5 + prolog_ms / 1000)} 0",
             f"{job + 1} prolog {_ns(base)} {_ns(base + 9)} 0",  # another job's line: not this one's
             f"{job} taskprolog {_ns(base + 0.62)} {_ns(base + 0.623)} 0",       # the batch step
             f"{job} taskprolog {_ns(base + 0.70)} {_ns(base + 0.704)} 0",       # rank 0
             f"{job} taskprolog {_ns(base + 0.71)} {_ns(base + 0.716)} 0",       # rank 1
             f"{job} epilog {_ns(base + 27.2)} {_ns(base + 27.2 + epilog_ms / 1000)} 0",
             "garbage line", f"{job} epilog x y 0"]
    return "\n".join(lines) + "\n"


def _out(base: float, wait: float = 0.0) -> str:
    return (f"gp-t script0 {base + 0.6:.9f}\n"
            f"rank1: pid=11 cpus=0-7 cvd=0,1 device=cuda:1 nccl=none t_proc={base + 0.75:.3f} t_wait={wait} t_init={base + 3.2 + wait:.3f}\n"
            f"rank0: pid=10 cpus=0-7 cvd=0,1 device=cuda:0 nccl=none t_proc={base + 0.74:.3f} t_wait=0.0 t_init={base + 3.1:.3f}\n"
            f"zoo_comm_allreduce_nvlink_bf16: ranks=2 busbw_gbps=295.1 t_start={base + 4.0:.3f} t_end={base + 24.0:.3f} t_proc={base + 0.74:.3f}\n"
            f"gp-t script1 {base + 27.0:.9f}\n")


def _points(base: float, job: int = 7, wait: float = 0.0, **hooks) -> dict:
    p = {"submit": base - 0.3, "submitted": base - 0.25, "completed": base + 27.6}
    p.update(jt.hook_points(_log(job, base, **hooks), job))
    p.update(jt.output_points(_out(base, wait)))
    return p


def test_the_segments_follow_the_job_and_sum_to_its_wall_time():
    p = _points(T)
    assert p["prolog0"] == pytest.approx(T + 0.5) and p["epilog1"] == pytest.approx(T + 27.21)
    assert p["taskprolog0"] == pytest.approx(T + 0.62) and p["taskprolog1"] == pytest.approx(T + 0.716)
    assert p["proc"] == pytest.approx(T + 0.74) and p["init"] == pytest.approx(T + 3.2)  # first start, last ready
    s = jt.segments(p)
    assert s["loop"] == pytest.approx(20.0, abs=1e-3) and s["prolog"] == pytest.approx(0.005, abs=1e-6)
    assert s["python_init"] == pytest.approx(2.46, abs=1e-3) and s["to_script"] == pytest.approx(0.095, abs=1e-3)
    parts = [s[name] for name, _, _ in jt.SEGMENTS]
    assert sum(parts) == pytest.approx(s["wall"], abs=1e-5) == pytest.approx(27.9, abs=1e-5)
    assert s["node_wall"] == pytest.approx(26.71, abs=1e-5) and s["run_wall"] == pytest.approx(27.1, abs=1e-5)


def test_a_missing_point_leaves_its_segments_unknown_not_zero():
    p = _points(T)
    del p["script1"], p["init"]
    s = jt.segments(p)
    assert s["to_script_end"] is None and s["to_epilog"] is None and s["python_init"] is None and s["to_loop"] is None
    assert s["loop"] == pytest.approx(20.0, abs=1e-3) and s["wall"] == pytest.approx(27.9)
    assert jt.segments({}) == {name: None for name in [n for n, _, _ in jt.SEGMENTS] + ["wall", "run_wall", "node_wall"]}


def _job(base: float, busbw: float, **kw) -> dict:
    s = jt.segments(_points(base, **kw))
    return {"busbw_gbps": busbw, "wall_s": s["wall"], "hooks_ms": {}, "segments_s": s}


def test_summary_puts_the_on_minus_off_difference_in_the_segment_where_it_lands():
    # on: a Prolog 6 ms longer and an Epilog 9 ms longer, nothing else; one rank waited 0.9 s for the store
    # in one pair's off job (the rendezvous coin flip): it shows in python_init, not in the hooks
    rows = [{"on": _job(T + 100 * i, 295.0, prolog_ms=11.0, epilog_ms=19.0),
             "off": _job(T + 100 * i + 50, 295.0, wait=0.9 if i == 1 else 0.0)} for i in range(4)]
    f = gjc.summarise(rows, "busbw_gbps")
    d = f["segments_on_minus_off_ms"]
    assert d["prolog"]["mean"] == pytest.approx(6.0, abs=1e-3) and d["epilog"]["mean"] == pytest.approx(9.0, abs=1e-3)
    assert d["loop"]["mean"] == pytest.approx(0.0, abs=1e-3)
    assert d["python_init"]["mean"] == pytest.approx(-225.0, abs=1e-2)  # -900 ms in one pair of four
    # the synthetic jobs' points are fixed but for the Epilog's end: 9 ms more of 26.71 s on the node
    assert f["node_wall_ratio_on_off"]["n"] == 4 and f["run_wall_ratio_on_off"]["n"] == 4
    assert f["node_wall_ratio_on_off"]["mean"] == pytest.approx(26.719 / 26.71, abs=1e-5)
    assert f["node_wall_ratio_on_off"]["lo"] == f["node_wall_ratio_on_off"]["hi"]
    assert f["segments_off_ms"]["loop"]["mean"] == pytest.approx(20000, abs=1)


def test_rows_without_a_timeline_give_the_old_figures_only():
    rows = [{"on": {"busbw_gbps": 290.0, "wall_s": 11.0, "hooks_ms": {}},
             "off": {"busbw_gbps": 291.0, "wall_s": 11.0, "hooks_ms": {}}}] * 2
    f = gjc.summarise(rows, "busbw_gbps")
    assert "node_wall_ratio_on_off" not in f and "segments_on_minus_off_ms" not in f and f["pairs_used"] == 2


def test_pooled_runs_are_read_from_their_json_or_from_a_cut_off_log(tmp_path):
    import json

    pair = {"on": _job(T, 294.0), "off": _job(T + 50, 295.0)}
    (tmp_path / "a.json").write_text(json.dumps({"pairs": [pair, pair]}))
    (tmp_path / "b.log").write_text("setting up\n" + json.dumps(pair) + "\nTraceback: killed\n{\"x\": 1}\n")
    rows = gjc.pooled_pairs([str(tmp_path / "a.json"), str(tmp_path / "b.log")])
    assert len(rows) == 3 and [r["source"].rsplit("/", 1)[1] for r in rows] == ["a.json", "a.json", "b.log"]
    f = gjc.summarise(rows, "busbw_gbps")
    assert f["pairs_used"] == 3 and f["busbw_gbps_ratio_on_off"]["mean"] == pytest.approx(294 / 295, abs=1e-5)


def test_a_wall_a_run_did_not_record_is_summed_from_its_consecutive_segments():
    s = jt.segments(_points(T))
    old = {k: v for k, v in s.items() if k != "run_wall"}
    assert jt.filled(old)["run_wall"] == pytest.approx(s["run_wall"], abs=1e-5)
    assert jt.filled(dict(old, wall=None))["wall"] == pytest.approx(s["wall"], abs=1e-5)
    assert jt.filled(dict(old, loop=None))["run_wall"] is None  # a segment missing: unknown, not short
    assert jt.filled(s) == s


def test_runs_pooled_are_also_taken_one_observation_each():
    rows = [dict({"on": _job(T, 296.0), "off": _job(T + 50, 300.0)}, source="a")] * 2 + \
           [dict({"on": _job(T, 303.0), "off": _job(T + 50, 300.0)}, source="b")] * 3
    f = gjc.by_run(rows, "busbw_gbps")
    assert f["each"]["a"]["pairs"] == 2 and f["each"]["a"]["busbw_gbps_ratio_on_off"] == pytest.approx(296 / 300, abs=1e-5)
    over = f["over_runs"]["busbw_gbps_ratio_on_off"]
    assert over["n"] == 2 and over["mean"] == pytest.approx((296 + 303) / 600, abs=1e-5) and over["lo"] < 0.98
