"""Fleet fingerprints: figures under load from real recordings, the O(1) store, ranking, policy, CLI.

The synthetic fleets are built by ``benchmarks/fleet_synth.py`` from the real recordings (planted GPUs
are slowed in their samples before the real aggregates fold them)."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from gpuperf.model.aggregates import JobAggregates
from gpuperf.fleet import policy
from gpuperf.fleet.fingerprint import FleetStore, derive
from gpuperf.model.load import node_figures
from gpuperf.fleet.ranking import rank
from gpuperf.samplers.base import GpuSample
from gpuperf.samplers.replay import load_recording

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import fleet_synth as fs  # noqa: E402

REC = ROOT / "tests" / "data" / "recordings"
H100 = "NVIDIA H100 80GB HBM3"


def _figures(name: str, gpu: int = 0) -> dict:
    rec = load_recording(str(next(REC.glob(f"{name}-*.jsonl.gz"))))
    agg = JobAggregates.new(1, "n1", [gpu], 0.0, rec.interval_s, names={gpu: "m"}, uuids={gpu: "GPU-x"})
    for k, sweep in enumerate(rec.sweeps):
        t = 1.0 + rec.offsets_s[k]
        agg.add_sweep(t, [GpuSample.from_dict({**d, "t": t}) for d in sweep if int(d["gpu"]) == gpu])
    agg2 = JobAggregates.from_state(json.loads(json.dumps(agg.to_state())))  # the daemon's checkpoint keeps them
    assert agg2.to_dict()["gpus"][str(gpu)]["load"] == agg.to_dict()["gpus"][str(gpu)]["load"]
    (fig,) = node_figures(agg.to_dict())
    assert fig["uuid"] == "GPU-x" and fig["gpu"] == gpu
    return fig["load"]


def test_load_figures_of_real_recordings() -> None:
    mm = _figures("matmul_bf16")
    # the GEMM holds the power cap: loaded and capped all the time, so no uncapped clock
    assert mm["busy_s"] >= 30 and 1300 <= mm["sm_clock_mhz"] <= 1600 and mm["power_w"] > 650
    assert mm["throttle_s"]["sw_power_cap"] >= 0.9 * mm["busy_s"]
    mb = _figures("membound")
    assert mb["busy_s"] >= 30 and mb["sm_clock_free_mhz"] == pytest.approx(1980, abs=5)
    idle = _figures("idle")
    assert idle["busy_s"] == 0 and idle["sm_clock_mhz"] is None
    ar = _figures("allreduce", gpu=2)
    # all-reduce at ~17% SM active: not "under load", but a communication phase at ~336 GB/s each way
    assert ar["busy_s"] == 0 and ar["nvlink_comm_s"] >= 30
    assert 600e9 <= ar["nvlink_comm_bps"] <= 700e9 and ar["pcie_comm_bps"] is None


PLANTED = {(2, 1): "slow_link", (20, 3): "slow_clock", (33, 0): "low_clock", (47, 7): "hot"}


@pytest.fixture(scope="module")
def pools() -> dict:
    return fs.build_pools(random.Random(5), per_workload=12)


def _fleet(tmp: Path, pools: dict, planted: dict, jobs: int = 30) -> FleetStore:
    st = FleetStore(tmp / "fleet.sqlite")
    for s in fs.fleet(nodes=56, jobs=jobs, planted=planted, seed=3, pools=pools, h200_nodes=12):
        st.ingest(s)
    return st


def test_synthetic_fleet_ranks_exactly_the_planted_gpus(tmp_path: Path, pools: dict) -> None:
    st = _fleet(tmp_path, pools, PLANTED)
    ranks = rank(st.gpus(), st.model_stats(), 5.0)
    flagged = {(int(g.node[1:]), g.idx) for g in ranks if g.flagged}
    assert flagged == set(PLANTED)
    assert {(int(g.node[1:]), g.idx) for g in ranks[: len(PLANTED)]} == set(PLANTED)
    by = {(int(g.node[1:]), g.idx): g for g in ranks}
    assert "NVLink rate in communication phases" in by[(2, 1)].headline
    assert "hw_slowdown" in by[(20, 3)].headline and "SM clock under load" in by[(20, 3)].headline
    assert "SM clock under load" in by[(33, 0)].headline and "model median 1,9" in by[(33, 0)].headline
    assert "sw_thermal" in by[(47, 7)].headline
    assert by[(20, 3)].headline.startswith("GPU-synth-020-3 on n020 idx 3: ")


def test_no_false_flags_without_plants(tmp_path: Path, pools: dict) -> None:
    st = _fleet(tmp_path, pools, {})
    ranks = rank(st.gpus(), st.model_stats(), 5.0)
    assert not [g.headline for g in ranks if g.flagged]
    assert len(ranks) == 56 * 8


def test_model_sketch_matches_the_gpus_exactly_enough(tmp_path: Path, pools: dict) -> None:
    """The incrementally kept per-model sketch agrees with the medians recomputed from every GPU."""
    st = _fleet(tmp_path, pools, PLANTED, jobs=12)
    rows = st.gpus()
    stats = st.model_stats()
    for model in (H100, "NVIDIA H200"):
        for metric, s in stats[model].items():
            vals = [r["fig"][metric] for r in rows if r["model"] == model and r["fig"][metric] is not None]
            assert s["n"] == len(vals), metric
            med = statistics.median(vals)
            assert s["median"] == pytest.approx(med, rel=0.006, abs=0.01), metric


def test_a_batch_folded_in_one_transaction_equals_one_summary_at_a_time(tmp_path: Path, pools: dict) -> None:
    """The controller folds a tick's summaries together (net sketch moves): the same fingerprints and sketches."""
    summaries = list(fs.fleet(nodes=20, jobs=12, planted={(2, 1): "slow_link"}, seed=4, pools=pools, h200_nodes=4))
    one, many = FleetStore(tmp_path / "one.sqlite"), FleetStore(tmp_path / "many.sqlite")
    for s in summaries:
        one.ingest(s)
    for i in range(0, len(summaries), 37):  # batches holding the same node more than once
        many.ingest_many(summaries[i:i + 37])
    strip = [{k: v for k, v in r.items() if k != "fig"} for r in one.gpus()]
    assert [{k: v for k, v in r.items() if k != "fig"} for r in many.gpus()] == strip
    sketch = "SELECT model, metric, bucket, n FROM sketch WHERE n > 0 ORDER BY 1, 2, 3"
    assert many.db.execute(sketch).fetchall() == one.db.execute(sketch).fetchall()
    assert many.model_stats() == one.model_stats()
    # the rows the batch hands back for ranking are the stored rows, figures included
    for st in (many, FleetStore(tmp_path / "fresh.sqlite")):  # GPUs seen before, and new ones
        updated: dict = {}
        st.ingest_many(summaries[:5], updated=updated)
        for node, rows in updated.items():
            stored = {(r["idx"], r["uuid"]): r for r in st.gpus(node)}
            assert rows and all(r == stored[(r["idx"], r["uuid"])] for r in rows[-8:]), node


def test_swapped_board_starts_fresh_and_evidence_clears(tmp_path: Path, pools: dict) -> None:
    st = _fleet(tmp_path, pools, PLANTED, jobs=20)
    bad = next(r for r in st.gpus("n020") if r["idx"] == 3)
    # the same board, now healthy: the decayed fingerprint lets the evidence clear
    healthy = list(fs.fleet(nodes=56, jobs=120, planted={}, seed=9, pools=pools, h200_nodes=12))
    for s in healthy:
        if s["nodes"] == ["n020"]:
            st.ingest(s)
    g = next(x for x in rank(st.gpus("n020"), st.model_stats(), 5.0) if x.idx == 3)
    assert not g.flagged, g.headline
    # a new board in the slot: the old fingerprint leaves the fleet and its model's sketch
    n_before = st.model_stats()[H100]["temp_c"]["n"]
    s = dict(healthy[20])
    s["fleet"] = [dict(e, uuid="GPU-new") if e["gpu"] == 3 else e for e in s["fleet"]]
    st.ingest(s)
    slot = [r for r in st.gpus("n020") if r["idx"] == 3]
    assert [r["uuid"] for r in slot] == ["GPU-new"] and slot[0]["jobs_total"] == 1 and bad["jobs_total"] == 20
    assert st.model_stats()[H100]["temp_c"]["n"] == n_before - 1   # the new board has no figures yet


def _ranks(tmp: Path, pools: dict) -> list:
    st = _fleet(tmp, pools, PLANTED, jobs=20)
    return rank(st.gpus(), st.model_stats(), 5.0)


def test_policy_drains_within_the_bound_and_resumes_what_it_drained(tmp_path: Path, pools: dict) -> None:
    ranks = _ranks(tmp_path, pools)
    nodes = {fs.node_name(n): ("idle", "") for n in range(56)}
    acts = policy.decide(ranks, nodes, "drain", 0.10)
    drains = {a["node"] for a in acts if a["action"] == "drain"}
    assert drains == {"n002", "n020", "n033", "n047"}
    assert all(a["reason"].startswith("gpuperf: gpu_slow: GPU-synth-") and len(a["reason"]) <= 240 for a in acts)
    # bound: 5 of 56 drained by gpuperf already; one more would pass 10%
    busy = dict(nodes, **{fs.node_name(n): ("drained", "gpuperf: xid_fatal: x") for n in range(50, 55)})
    acts = policy.decide(ranks, busy, "drain", 0.10)
    assert [a["action"] for a in acts if a["node"] in drains] == ["held"] * 4
    # resume only what gpu_slow drained and is no longer flagged; an admin's drain stays
    later = dict(nodes, n010=("drained", "gpuperf: gpu_slow: GPU-x on n010 idx 1: old"), n011=("drained", "admin: fan"),
                 n020=("drained", "gpuperf: gpu_slow: GPU-synth-020-3 ..."))
    acts = {a["node"]: a["action"] for a in policy.decide(ranks, later, "drain", 0.10)}
    assert acts["n010"] == "resume" and "n011" not in acts and "n020" not in acts
    warn = policy.decide(ranks, nodes, "warn", 0.10)
    assert {a["action"] for a in warn} == {"warn"} and {a["node"] for a in warn} == drains


def test_fleet_command_json_and_text(tmp_path: Path, pools: dict) -> None:
    _fleet(tmp_path, pools, PLANTED, jobs=20).close()
    env = dict(os.environ, GPUPERF_CONFIG=str(tmp_path / "none.toml"))
    exe = [sys.executable, "-m", "gpuperf", "fleet", "--store", str(tmp_path / "fleet.sqlite")]
    p = subprocess.run(exe + ["--json", "--limit", "0"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["flagged"] == 4 and out["total_gpus"] == 56 * 8
    assert {(g["node"], g["gpu"]) for g in out["gpus"] if g["flagged"]} == {("n002", 1), ("n020", 3), ("n033", 0), ("n047", 7)}
    assert out["nodes"][0]["flagged"] == 1
    t = subprocess.run(exe, capture_output=True, text=True, env=env, timeout=60)
    assert t.returncode == 0 and "4 flagged" in t.stdout and "GPU-synth-020-3 on n020 idx 3" in t.stdout
    missing = subprocess.run(exe[:-1] + [str(tmp_path / "nope.sqlite")], capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == 1 and "cannot read the fleet store" in missing.stderr
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    junk = subprocess.run(exe[:-1] + [str(tmp_path / "junk.sqlite")], capture_output=True, text=True, env=env, timeout=60)
    assert junk.returncode == 1 and "cannot read the fleet store" in junk.stderr and "Traceback" not in junk.stderr


def test_ingest_ignores_summaries_without_fleet_figures(tmp_path: Path) -> None:
    st = FleetStore(tmp_path / "f.sqlite")
    assert st.ingest({"nodes": ["n1"], "job_id": 1}) == 0
    assert st.ingest({"nodes": ["n1"], "fleet": [{"gpu": 0, "load": {}}]}) == 1
    (row,) = st.gpus()
    assert row["model"] == "unknown" and all(v is None for v in derive(row).values())


class _Slurm:
    """What ingest asks of Slurm: the nodes' states, and a drain."""

    def __init__(self, nodes: dict):
        self.nodes, self.drained = nodes, []

    def node_reasons(self) -> dict:
        return self.nodes

    def drain(self, node: str, reason: str) -> None:
        self.drained.append((node, reason))

    def resume(self, node: str) -> None:
        raise AssertionError(f"resume {node}")


def test_a_drain_names_the_nodes_worst_gpu_even_when_the_batch_moved_another(tmp_path: Path, pools: dict) -> None:
    """Two slow GPUs on n020, neither drained yet (a bound held it); a job on the milder one alone drains the
    node: the reason names the worse GPU and counts the other."""
    from gpuperf.files import config
    from gpuperf.fleet import ingest

    planted = {(20, 3): "slow_clock", (20, 5): "low_clock"}
    st = _fleet(tmp_path, pools, planted, jobs=20)
    ranked = [g for g in rank(st.gpus("n020"), st.model_stats(), 5.0) if g.flagged]
    assert len(ranked) == 2
    worst, milder = ranked   # rank puts the worst first
    later = next(s for s in fs.fleet(nodes=56, jobs=1, planted=planted, seed=11, pools=pools, h200_nodes=12)
                 if s["nodes"] == ["n020"])
    later = dict(later, job_id=10**6, fleet=[e for e in later["fleet"] if e["gpu"] == milder.idx])
    cfg = config.defaults()
    cfg.data["fleet"]["policy"] = "drain"
    slurm = _Slurm({fs.node_name(n): ("idle", "") for n in range(56)})
    out = ingest.on_node_summaries(cfg, [later], slurm=slurm, store=st)
    assert [(a["node"], a["action"], a["done"]) for a in out["actions"]] == [("n020", "drain", True)]
    (node, reason), = slurm.drained
    assert reason.startswith(f"gpuperf: gpu_slow: {worst.uuid} on n020 idx {worst.idx}: ") and reason.endswith(" (+1 more GPU)")
    # the fold kept both flagged: the drain did not come from the mild GPU alone turning worse
    assert [g.idx for g in rank(st.gpus("n020"), st.model_stats(), 5.0) if g.flagged] == [worst.idx, milder.idx]
