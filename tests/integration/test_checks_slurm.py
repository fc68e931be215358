"""Health checks in a real Prolog: a bad GPU drains the node with gpuperf's reason and requeues the job
(never running it there); ``gpuperf check --resume`` brings the node back; a broken check drains nothing."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pytest

pytestmark = pytest.mark.slurm

NODES = Path(__file__).resolve().parents[1] / "data" / "nodes"
BASE = NODES / "pcie-l40s-2s"  # the test cluster's node: 4 GPUs, gres gpu:4


def _derived(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    dest = tmp_path / "node"
    shutil.copytree(BASE, dest, symlinks=True)
    snap = json.loads((dest / "gpus.json").read_text())
    edit(snap)
    (dest / "gpus.json").write_text(json.dumps(snap))
    return dest


def _use_node(c, root: Path) -> None:
    cfg = c.gpuperf_config()
    cfg.setdefault("general", {})["node_root"] = str(root)
    # a requeued job sends no node summary: do not let the slurmctld epilog wait 30 s for one
    cfg.setdefault("controller", {})["merge_wait_s"] = 1.0
    c.write_gpuperf_config(cfg)


def _reason(c, node: str) -> str:
    """The node's drain reason as sinfo -R shows it ('' when none)."""
    out = c.run("sinfo", "-h", "-N", "-n", node, "-o", "%E", check=True).stdout.strip()
    return "" if out == "none" else out


def _wait_drained(c, node: str, timeout: float = 15) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if "drain" in c.node_states().get(node, ""):
            return _reason(c, node)
        time.sleep(0.2)
    raise AssertionError(f"{node} not drained: {c.node_states()}\n{c.gpuperf_log()[-2000:]}")


def test_downtrained_gpu_requeues_the_job_and_drains_with_gpuperf_reason(gpuperf_config_reset, tmp_path):
    c = gpuperf_config_reset
    node = c.node_names[0]
    bad = _derived(tmp_path, lambda s: s["gpus"][1]["pcie"].update(width=8))
    bus1 = json.loads((BASE / "gpus.json").read_text())["gpus"][1]["bus_id"]
    _use_node(c, bad)
    try:
        job = c.sbatch("echo ran-on-node\n", "--gres=gpu:2", "--job-name=chk-bad")
        assert c.wait(job, ("REQUEUED",), timeout=30) == "REQUEUED", c.logs()
        reason = _wait_drained(c, node)
        # gpuperf's reason, not Slurm's "Prolog error": sinfo -R shows it too
        assert reason.startswith(f"gpuperf: pcie_downtrained: GPU 1 ({bus1}) PCIe gen4 x8, max gen4 x16"), reason
        sinfo = c.run("sinfo", "-R", "-h", "-o", "%E|%N", check=True).stdout
        assert f"{reason}|{node}" in sinfo.splitlines()
        info = c.job_info(job)
        # requeued without a hold: it will run as soon as a healthy node takes it
        assert info["JobState"] == "PENDING" and info["Priority"] != "0" and "held" not in info["Reason"].lower(), info
        health = c.wait_record(job, "prolog")["data"]["health"]
        assert health["action"] == "drained, job requeued" and health["gpus"] == [0, 1]
        assert not c.job_output(job).strip(), "the job ran on the drained node"

        # the node reads a healthy GPU again: resume brings it back, and the job runs
        _use_node(c, BASE)
        p = c.run("gpuperf", "check", "--resume", "--node", node)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"resume: {node} returned to service" in p.stdout
        assert c.wait(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=60) == "COMPLETED", c.logs()
        assert c.job_output(job).strip() == "ran-on-node"
        assert _reason(c, node) == ""
    finally:
        c.run("scancel", "--name=chk-bad")
        c.resume_all()


def test_resume_leaves_other_drain_reasons_alone(gpuperf_config_reset):
    c = gpuperf_config_reset
    node = c.node_names[0]
    c.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=admin: fan replacement", check=True)
    try:
        p = c.run("gpuperf", "check", "--resume", "--node", node, "--root", str(BASE))
        assert p.returncode == 0, p.stdout + p.stderr
        assert "drained for another reason, left alone: admin: fan replacement" in p.stdout
        assert _reason(c, node) == "admin: fan replacement"
        assert "drain" in c.node_states()[node]
    finally:
        c.resume_all()


def test_a_check_that_raises_drains_nothing(gpuperf_config_reset, tmp_path):
    c = gpuperf_config_reset
    node = c.node_names[0]

    def break_it(s: dict[str, Any]) -> None:
        s["gpus"][0]["nvlink"] = "garbage"  # nvlink_down raises on it
        s["gpus"][1]["ecc"] = ["not", "a", "dict"]  # ecc_uncorrectable cannot judge GPU 1
    _use_node(c, _derived(tmp_path, break_it))
    job = c.sbatch("echo still-runs\n", "--gres=gpu:2", "--job-name=chk-raise")
    assert c.wait(job, timeout=60) == "COMPLETED", c.logs()
    assert c.job_output(job).strip() == "still-runs"
    assert "drain" not in c.node_states()[node] and _reason(c, node) == ""
    res = {r["code"]: r for r in c.wait_record(job, "prolog")["data"]["health"]["results"]}
    assert res["nvlink_down"]["status"] == "error" and "check raised AttributeError" in res["nvlink_down"]["detail"]
    assert res["ecc_uncorrectable"]["status"] == "error" and "GPU 1 (" in res["ecc_uncorrectable"]["detail"]
    assert res["pcie_downtrained"]["status"] == "ok"


def test_safety_bound_keeps_a_bad_node_in_service_when_gpuperf_drained_too_many(slurm_cluster2, tmp_path):
    c = slurm_cluster2
    n1, n2 = c.node_names
    bad = _derived(tmp_path, lambda s: s["gpus"][0]["ecc"].update(volatile_uncorrected=3))
    c.run("scontrol", "update", f"NodeName={n2}", "State=DRAIN", "Reason=gpuperf: xid_fatal: earlier", check=True)
    try:
        cfg = c.gpuperf_config()
        cfg.setdefault("general", {})["node_root"] = str(bad)
        cfg.setdefault("checks", {})["max_drained_share"] = 0.4  # 1 of 2 nodes (50%) is already over it
        cfg.setdefault("controller", {})["merge_wait_s"] = 1.0
        c.write_gpuperf_config(cfg)
        job = c.sbatch("echo bound\n", "--gres=gpu:1", "--job-name=chk-bound")
        assert c.wait(job, ("COMPLETED", "FAILED", "CANCELLED", "REQUEUED"), timeout=60) == "COMPLETED", c.logs()
        assert "drain" not in c.node_states()[n1]
        health = c.wait_record(job, "prolog", node=n1)["data"]["health"]
        assert health["status"] == "fail" and health["reason"].startswith("gpuperf: ecc_uncorrectable: GPU 0 (")
        assert health["action"] == ("none (safety bound: 1 of 2 nodes drained by gpuperf (50%, "
                                    "bound checks.max_drained_share=40%))")
    finally:
        c.reset_gpuperf_config()
        c.resume_all()
