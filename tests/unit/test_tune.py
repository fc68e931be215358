"""gpuperf tune's decision on synthetic measurements, its rules file, and the NCCL benchmark's smoke mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuperf.env import ncclbench as nb, rules as envrules, tuning
from gpuperf.commands import tune

REPO = Path(__file__).resolve().parents[2]
SIZES = nb.sizes(256 * nb.KIB, 64 * nb.MIB)  # 256 KiB .. 64 MiB: 9 sizes


def result(name: str, level: dict[int, float] | float, noise: float = 0.005, rounds: int = 3, env=None) -> nb.SetResult:
    """busbw = level (per size or flat) with per-round offsets of +-noise (so spread = 2*noise)."""
    r = nb.SetResult(name, env or {})
    for k in range(rounds):
        factor = 1 + noise * (k - (rounds - 1) / 2)
        r.rounds.append({s: [(level[s] if isinstance(level, dict) else level) * factor] * 3 for s in SIZES})
    return r


def test_busbw_and_sizes():
    assert nb.busbw_gbps(1_000_000_000, 1.0, 4) == pytest.approx(1.5)
    assert nb.sizes(8 * nb.KIB, 64 * nb.KIB) == [8192, 16384, 32768, 65536]
    assert nb.human(nb.GIB) == "1 GiB" and nb.human(3000) == "3000 B"


def test_spread_is_round_to_round_range():
    r = result("x", 100.0, noise=0.01, rounds=3)
    assert r.spread(SIZES[0]) == pytest.approx(0.02)
    assert r.median(SIZES[0]) == pytest.approx(100.0)


def test_clear_win_everywhere_that_matters_is_accepted():
    base = result("baseline", 100.0)
    cand = result("NCCL_X=1", 105.0, env={"NCCL_X": "1"})
    v = tuning.decide(base, cand, SIZES)
    assert v.accepted, v.reason
    assert v.gain() == pytest.approx(1.05)
    ev = v.evidence()
    assert ev["sizes"] == SIZES and all(r == pytest.approx(1.05) for r in ev["ratio"])


def test_loss_at_one_size_above_1mib_rejects_even_with_big_wins():
    base = result("baseline", 100.0)
    levels = {s: 110.0 for s in SIZES}
    levels[2 * nb.MIB] = 97.0  # -3%, beyond the 1% spread
    v = tuning.decide(base, result("c", levels), SIZES)
    assert not v.accepted and "loses at 2 MiB" in v.reason


def test_win_within_the_spread_is_not_a_win():
    v = tuning.decide(result("baseline", 100.0, noise=0.02), result("c", 102.0, noise=0.02), SIZES)
    assert not v.accepted and "no clear win" in v.reason


def test_small_sizes_below_the_bar_do_not_count():
    levels = {s: (60.0 if s < nb.MIB else 104.0) for s in SIZES}  # loses at 256/512 KiB only
    v = tuning.decide(result("baseline", 100.0), result("c", levels), SIZES)
    assert v.accepted, v.reason
    strict = tuning.decide(result("baseline", 100.0), result("c", levels), SIZES, matter_min=256 * nb.KIB)
    assert not strict.accepted


def test_failed_measurement_is_never_a_rule():
    cand = result("c", 150.0)
    cand.errors.append("round 1: timed out")
    assert not tuning.decide(result("baseline", 100.0), cand, SIZES).accepted


def test_best_per_variable_keeps_the_largest_gain():
    base = result("baseline", 100.0)
    a = tuning.decide(base, result("P=a", 104.0, env={"P": "a"}), SIZES)
    b = tuning.decide(base, result("P=b", 108.0, env={"P": "b"}), SIZES)
    c = tuning.decide(base, result("Q=1", 103.0, env={"Q": "1"}), SIZES)
    assert [v.name for v in tuning.best_per_variable([a, b, c])] == ["P=b", "Q=1"]


def test_rules_file_loads_as_config_and_records_evidence():
    base = result("baseline", 100.0)
    win = tuning.decide(base, result("NCCL_PROTO=LL128", 106.0, env={"NCCL_PROTO": "LL128"}), SIZES)
    lose = tuning.decide(base, result("NCCL_ALGO=Tree", 70.0, env={"NCCL_ALGO": "Tree"}), SIZES)
    args = SimpleNamespace(nproc=4, device="cuda", matter_min=nb.MIB)
    info = {"gpus": ["NVIDIA H200"] * 4, "torch": "2.11", "nccl": "2.28.3"}
    text = tune.render_rules([win], [win, lose], info, {"shape": {"gpus": [0, 1, 2, 3]}}, 3, args)
    assert "rejected NCCL_ALGO=Tree: loses" in text
    rules = envrules.parse(tomllib.loads(text)["env"]["rules"])
    assert len(rules) == 1
    r = rules[0]
    assert r.set == {"NCCL_PROTO": "LL128"} and r.force  # a workload variable: only with its evidence
    assert r.match == {"gpu_model": "NVIDIA H200", "multi_node": False}
    assert r.evidence["ratio"][0] == pytest.approx(1.06) and r.evidence["nccl"] == "2.28.3"


def test_smoke_benchmark_with_gloo_on_cpu(tmp_path):
    pytest.importorskip("torch")
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "nccl_env.py"), "--backend", "gloo", "--device",
                        "cpu", "--nproc", "2", "--min-size", "8KiB", "--max-size", "16KiB", "--rounds", "1",
                        "--repeats", "2", "--env-root", str(REPO / "tests/data/nodes/h100-vm"), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stdout + p.stderr
    md = (tmp_path / "nccl_env.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| size"))
    for name in ("default", "gpuperf", "tree", "ring-simple", "gpuperf/default"):
        assert f" {name} |" in header
    rows = [line for line in md.splitlines() if line.startswith("| 8 KiB") or line.startswith("| 16 KiB")]
    assert len(rows) == 2 and all("failed" not in r for r in rows)
    data = json.loads((tmp_path / "nccl_env.json").read_text())
    assert data["sizes"] == [8192, 16384]
    assert set(data["sets"]) == {"default", "gpuperf", "tree", "ring-simple"}
    assert data["sets"]["gpuperf"]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert data["sets"]["tree"]["env"] == {"NCCL_ALGO": "Tree"}


@pytest.mark.parametrize("cand,words", [("LD_PRELOAD=/x.so", "unknown variable class"), ("NCCL_ALGO", "NAME=VALUE")])
def test_tune_refuses_bad_candidates_before_measuring(cand, words, capsys):
    from gpuperf import cli

    rc = cli.main(["tune", "--out", "/nonexistent/rules.toml", "--candidate", cand, "--device", "cpu"])
    assert rc == 2 and words in capsys.readouterr().err
