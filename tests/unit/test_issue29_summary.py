"""benchmarks/issue29_summary.py: the device call's last table, from the stages' files (synthetic here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import issue29_summary as s  # noqa: E402


def test_nothing_run_says_so(tmp_path):
    assert [r for _, r in s.lines(tmp_path)] == ["not run"] * 4


def test_every_part_read(tmp_path, capsys):
    (tmp_path / "multi.log").write_text("....\n4 passed in 120.1s\n")
    (tmp_path / "multi.json").write_text(json.dumps({"multi_ranks": {"busbw_gbps": 352.1, "plan_noop": "1 NUMA node"},
                                                     "multi_attribution": {"mismatches": 0.0},
                                                     "multi_one_busy": {"diagnosis": {"class": "unused_gpus"}}}))
    (tmp_path / "cost.json").write_text(json.dumps({"busbw_gbps_ratio_on_off": {"mean": 0.999, "lo": 0.995, "hi": 1.003, "n": 6},
                                                    "wall_ratio_on_off": {"mean": 1.01, "lo": 1.0, "hi": 1.02, "n": 6}}))
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "rows.md").write_text("| a |\n\n4 of 4 classed as labelled.\n")
    (tmp_path / "tune").mkdir()
    (tmp_path / "tune" / "tune-socket.md").write_text(
        "| NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2 | rejected | rejected | why |\n"
        "| NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4 | accepted | accepted | why |\nRule check: ok (every)\n")
    assert s.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4 passed; busbw 352.1 GB/s, plan no-op; mismatches 0.0; one-of-two unused_gpus" in out
    assert "0.9990 [0.9950, 1.0030] n=6" in out and "4 of 4 classed as labelled." in out
    assert "Rule check: ok (every); accepted: NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4" in out
    assert s.main([str(tmp_path / "missing")]) == 2
