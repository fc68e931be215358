"""The fleet policy with real Slurm: ``gpuperf fleet --apply`` under ``fleet.policy = "drain"`` drains the
node of a flagged GPU with ``gpuperf: gpu_slow: <evidence>``, holds back at the drained-share bound, and
resumes the node once its GPU is no longer flagged (here: the board is swapped, a new UUID)."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _fleet_store(path: Path, node: str) -> dict:
    """30 synthetic nodes from the real recordings; synthetic n020 (GPU 3 planted slow) is the cluster's node."""
    import fleet_synth as fs
    from gpuperf.fleet.fingerprint import FleetStore

    st = FleetStore(path)
    last = {}
    for s in fs.fleet(nodes=30, jobs=20, planted={(20, 3): "slow_clock"}, seed=3,
                      pools=fs.build_pools(random.Random(5), per_workload=6), h200_nodes=4):
        if s["nodes"] == ["n020"]:
            s = dict(s, nodes=[node])
            last = s
        st.ingest(s)
    st.close()
    return last


def _configure(c, store: Path, share: float) -> None:
    cfg = c.gpuperf_config()
    cfg["fleet"] = {"policy": "drain", "store": str(store)}
    cfg.setdefault("checks", {})["max_drained_share"] = share
    c.write_gpuperf_config(cfg)


def _reason(c, node: str) -> str:
    out = c.run("sinfo", "-h", "-N", "-n", node, "-o", "%E", check=True).stdout.strip()
    return "" if out == "none" else out


def test_fleet_drains_a_slow_gpus_node_within_the_bound_and_resumes_it(gpuperf_config_reset, tmp_path):
    c = gpuperf_config_reset
    node = c.node_names[0]
    store = tmp_path / "fleet.sqlite"
    last = _fleet_store(store, node)
    try:
        _configure(c, store, 0.0)           # the bound: no node may be drained by gpuperf
        p = c.run("gpuperf", "fleet", "--apply")
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"held {node}: gpuperf: gpu_slow: GPU-synth-020-3 on {node} idx 3: SM clock under load" in p.stdout
        assert "drain" not in c.node_states()[node]

        _configure(c, store, 1.0)
        p = c.run("gpuperf", "fleet", "--apply")
        assert p.returncode == 0 and f"drain {node}: " in p.stdout, p.stdout + p.stderr
        reason = _reason(c, node)
        assert reason.startswith(f"gpuperf: gpu_slow: GPU-synth-020-3 on {node} idx 3: ") and "hw_slowdown" in reason
        assert "drain" in c.node_states()[node]

        # a new board in slot 3: the slow one's fingerprint leaves the fleet; the node comes back
        from gpuperf.fleet.fingerprint import FleetStore

        st = FleetStore(store)
        st.ingest(dict(last, fleet=[dict(e, uuid="GPU-new") if e["gpu"] == 3 else e for e in last["fleet"]]))
        st.close()
        p = c.run("gpuperf", "fleet", "--apply")
        assert p.returncode == 0 and f"resume {node}: " in p.stdout, p.stdout + p.stderr
        assert _reason(c, node) == "" and "drain" not in c.node_states()[node]
    finally:
        c.resume_all()


def test_node_summaries_reach_the_fingerprints_through_the_controller_service(slurm_cluster):
    """A node summary sent as the node epilog sends it (munge, pyzmq) is folded by the real controller
    service into the fleet store; ``gpuperf fleet --json`` then lists the node's GPUs with the job counted."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from test_report_slurm import _collector, _node_summary, _queue_state, _send, _wait_running

    from gpuperf.fleet.fingerprint import FleetStore

    c = slurm_cluster
    node = c.node_names[0]
    cfg = c.gpuperf_config()
    store = Path(cfg.get("fleet", {}).get("store") or Path(cfg["general"]["state_dir"]) / "fleet.sqlite")

    def jobs_on_node() -> dict[tuple[int, str], int]:
        # by board: an earlier test's daemon (another recording, other UUIDs) may have left GPU 0 of this
        # node with another board's count, which this summary's board then replaces (starting fresh)
        if not store.exists():
            return {}
        st = FleetStore(store, readonly=True)
        try:
            return {(r["idx"], r["uuid"]): r["jobs_total"] for r in st.gpus(node)}
        finally:
            st.close()

    before = jobs_on_node()
    with _collector(c):
        job = c.sbatch("sleep 2\n", "--gres=gpu:2")
        _wait_running(c, job)
        s = _node_summary(job, node)
        assert [e["gpu"] for e in s["fleet"]] == [0, 1] and s["fleet"][0]["load"]["busy_s"] >= 0
        boards = {e["gpu"]: (e["gpu"], e.get("uuid") or "") for e in s["fleet"]}
        sent = _send(c, node, s)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert c.wait(job) == "COMPLETED"
        assert _queue_state(c, job) == "done"
        end = time.time() + 15     # the service folds on its tick; the merge may finish first
        while time.time() < end and any(jobs_on_node().get(b, 0) <= before.get(b, 0) for b in boards.values()):
            time.sleep(0.2)
    after = jobs_on_node()
    assert {g: after.get(b, 0) - before.get(b, 0) for g, b in boards.items()} == {0: 1, 1: 1}, (before, after)
    p = c.run("gpuperf", "fleet", "--json", "--limit", "0")
    assert p.returncode == 0, p.stderr
    listed = {(g["node"], g["gpu"]) for g in json.loads(p.stdout)["gpus"]}
    assert {(node, 0), (node, 1)} <= listed
