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

import math
import statistics

from gpuperf.env import interval as iv, ncclbench as nb, rules as envrules, tuning
from gpuperf.commands import tune

REPO = Path(__file__).resolve().parents[2]
SIZES = nb.sizes(256 * nb.KIB, 64 * nb.MIB)  # 256 KiB .. 64 MiB: 9 sizes


def result(name: str, level: dict[int, float] | float, noise: float = 0.005, rounds: int = 5, env=None,
           jitter: float = 0.002, colls=("allreduce",)) -> nb.SetResult:
    """busbw = level (per size or flat) x a drift shared by every set in a round (+-noise) x this set's own
    alternating +-jitter (what makes the paired ratios vary)."""
    r = nb.SetResult(name, env or {})
    for k in range(rounds):
        factor = (1 + noise * (k - (rounds - 1) / 2)) * (1 + jitter * (-1) ** k)
        r.rounds.append({c: {s: [(level[s] if isinstance(level, dict) else level) * factor] * 3 for s in SIZES}
                         for c in colls})
    return r


def test_busbw_and_sizes():
    assert nb.busbw_gbps(1_000_000_000, 1.0, 4) == pytest.approx(1.5)
    assert nb.busbw_gbps(1_000_000_000, 1.0, 4, "allgather") == pytest.approx(0.75)
    assert nb.busbw_gbps(1_000_000_000, 1.0, 2, "reducescatter") == pytest.approx(0.5)
    assert nb.sizes(8 * nb.KIB, 64 * nb.KIB) == [8192, 16384, 32768, 65536]
    assert nb.human(nb.GIB) == "1 GiB" and nb.human(3000) == "3000 B"


def test_per_round_values_median_or_best_and_failed_rounds_stay_aligned():
    r = nb.SetResult("x", {})
    r.rounds = [{"allreduce": {8: [10.0, 2.0, 9.0]}}, {}, {"allreduce": {8: [7.0, 8.0, 6.0]}}]
    assert r.per_round(8) == [9.0, None, 7.0]
    assert r.per_round(8, best=True) == [10.0, None, 8.0]
    assert r.per_round(8, "allgather") == [None, None, None]
    assert r.spread(8) == pytest.approx(2 / 8)


def test_interval_is_a_t_interval_on_log_ratios():
    ratios = [1.02, 0.98, 1.01, 0.99]
    i = iv.ratio_interval(ratios)
    logs = [math.log(x) for x in ratios]
    half = 3.182 * statistics.stdev(logs) / 2  # t(0.975, 3 df) * s / sqrt(4)
    assert i.n == 4 and i.lo == pytest.approx(math.exp(statistics.fmean(logs) - half))
    assert i.hi == pytest.approx(math.exp(statistics.fmean(logs) + half))
    assert iv.classify(i, 0.05) == "same" and iv.classify(i, 0.001) == "unsettled"
    assert iv.classify(iv.ratio_interval([1.10, 1.12, 1.11]), 0.02) == "win"
    assert iv.classify(iv.ratio_interval([0.90, 0.91, 0.92]), 0.02) == "loss"
    assert iv.below_bar(iv.ratio_interval([0.90, 0.91, 0.92]), 0.02)
    assert not iv.below_bar(iv.ratio_interval([0.90, 1.1, 0.92]), 0.02)  # wide: not a proven loss
    assert iv.classify(iv.ratio_interval([1.3]), 0.02) == "unmeasured"  # one round: no interval
    assert iv.paired_ratios([100.0, None, 50.0], [110.0, 90.0, None]) == [pytest.approx(1.1)]
    assert iv.tolerance(nb.MIB) == 0.02 and iv.tolerance(nb.MIB - 1) == 0.05


def test_clear_win_everywhere_that_matters_is_accepted():
    base = result("baseline", 100.0)
    cand = result("NCCL_X=1", 105.0, env={"NCCL_X": "1"}, jitter=0.004)
    v = tuning.decide(base, cand, SIZES)
    assert v.accepted, v.reason
    assert v.gain() == pytest.approx(1.05, rel=1e-3)
    ev = v.evidence()
    assert ev["sizes"] == SIZES and all(r == pytest.approx(1.05, rel=0.01) for r in ev["ratio"])
    assert all(lo > 1.02 for lo in ev["ci95_low"]) and ev["paired_rounds"] == [5] * len(SIZES)


def test_proven_loss_at_one_size_above_1mib_rejects_even_with_big_wins():
    base = result("baseline", 100.0)
    levels = {s: 110.0 for s in SIZES}
    levels[2 * nb.MIB] = 97.0  # -3%, an interval wholly below 1 - 2%
    v = tuning.decide(base, result("c", levels, jitter=0.004), SIZES)
    assert not v.accepted and "loses at allreduce 2 MiB" in v.reason


def test_noisy_win_is_not_a_proven_win():
    v = tuning.decide(result("baseline", 100.0), result("c", 102.0, jitter=0.05), SIZES)
    assert not v.accepted and "no proven win" in v.reason and "unsettled" in v.reason
    assert not tuning.default_is_best([v])  # unsettled: more rounds could still tell


def test_within_tolerance_is_the_same_and_default_is_best():
    v = tuning.decide(result("baseline", 100.0), result("c", 100.5, jitter=0.002), SIZES)
    assert not v.accepted and all(c.verdict == "same" for c in v.checks if c.matters)
    assert tuning.default_is_best([v])


def test_a_small_size_loss_rejects_unless_the_admin_accepts_it_and_then_the_rule_names_it():
    levels = {s: (60.0 if s < nb.MIB else 104.0) for s in SIZES}  # loses at 256/512 KiB only
    v = tuning.decide(result("baseline", 100.0), result("c", levels, jitter=0.004), SIZES)
    assert not v.accepted and v.reason.startswith("loses at allreduce 256 KiB") and "512 KiB" in v.reason
    assert "--accept-small-loss" in v.reason          # says how to take the large-message win anyway
    paid = tuning.decide(result("baseline", 100.0), result("c", levels, jitter=0.004), SIZES, accept_cost=True)
    assert paid.accepted and "accepted with a cost" in paid.reason
    assert "allreduce 256 KiB 0.600" in paid.reason and "allreduce 512 KiB 0.600" in paid.reason
    # the admin's consent covers sizes below those that matter, never a loss where it matters
    levels[2 * nb.MIB] = 97.0
    assert not tuning.decide(result("baseline", 100.0), result("c", levels, jitter=0.004), SIZES,
                             accept_cost=True).accepted


def test_a_wide_interval_below_the_sizes_that_matter_is_a_possible_loss_not_settled():
    cand = result("c", {s: (95.0 if s < nb.MIB else 110.0) for s in SIZES}, jitter=0.004)
    for k, r in enumerate(cand.rounds):       # small messages noisy: +-20% from round to round
        for s in (x for x in SIZES if x < nb.MIB):
            r["allreduce"][s] = [x * (1 + 0.2 * (-1) ** k) for x in r["allreduce"][s]]
    v = tuning.decide(result("baseline", 100.0), cand, SIZES)
    small = [c for c in v.checks if c.size < nb.MIB]
    assert all(c.verdict == "unsettled" and c.risks and not c.loses for c in small)
    assert not v.accepted and "may lose at allreduce" in v.reason and "not ruled out" in v.reason


def test_recorded_socket_table_rejects_2x2_or_carries_its_small_message_loss_in_the_rule(tmp_path):
    """2x H200, TCP over loopback, 6 paired rounds (benchmarks/results/h200x2/tune-socket-superseded.json, the table issue 29 replaced): 2x2 sockets
    win from 1 MiB but 8 KiB (0.622 [0.276, 1.400]) and 128 KiB (0.762 [0.516, 1.125]) may lose."""
    rec = json.loads((REPO / "benchmarks/results/h200x2/tune-socket-superseded.json").read_text())
    sets = {n: nb.SetResult.from_dict(d) for n, d in rec["sets"].items()}
    name = "NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2"
    v = tuning.decide(sets["baseline"], sets[name], rec["sizes"])
    assert not v.accepted and "8 KiB (0.622 [0.276, 1.400]" in v.reason and "128 KiB 0.762" in v.reason
    assert [c.verdict for c in v.checks] == ["unsettled", "unsettled", "win", "win", "win"]
    paid = tuning.decide(sets["baseline"], sets[name], rec["sizes"], accept_cost=True)
    assert paid.accepted
    args = SimpleNamespace(nproc=2, device="cuda", matter_min=nb.MIB, transport="socket")
    info = {"gpus": ["NVIDIA H200"] * 2, "torch": "2.11", "nccl": "2.28.9"}
    text = tune.render_rules([paid], [paid], info, {"shape": {"gpus": [0, 1]}}, 6, args)
    rule = envrules.parse(tomllib.loads(text)["env"]["rules"])[0]
    assert "allreduce 8 KiB 0.622 [0.276, 1.400] (may lose)" in rule.reason
    assert "allreduce 128 KiB 0.762 [0.516, 1.125] (may lose)" in rule.reason
    assert "allreduce 8 KiB: 0.622 [0.276, 1.400] unsettled (a loss is not ruled out)" in text
    # what `gpuperf env --explain` prints for a variable the rule set
    from gpuperf.commands import env as envcmd

    plan = SimpleNamespace(disabled=None, skipped=[], notes=[], vars=[SimpleNamespace(
        name="NCCL_SOCKET_NTHREADS", value="2", reason=rule.reason, rule=rule.name)])
    assert "8 KiB 0.622" in envcmd.render_text(plan, explain=True)
    # 4x4 loses at the small sizes and is unsettled at 1 MiB: rejected with or without consent
    four = "NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4"
    assert not tuning.decide(sets["baseline"], sets[four], rec["sizes"], accept_cost=True).accepted


def test_failed_measurement_is_never_a_rule():
    cand = result("c", 150.0)
    cand.errors.append("round 1: timed out")
    assert not tuning.decide(result("baseline", 100.0), cand, SIZES).accepted
    assert "nothing measured" in tuning.decide(result("baseline", 100.0), nb.SetResult("c", {}), SIZES).reason


def test_best_per_variable_keeps_the_largest_gain():
    base = result("baseline", 100.0)
    a = tuning.decide(base, result("P=a", 104.0, env={"P": "a"}), SIZES)
    b = tuning.decide(base, result("P=b", 108.0, env={"P": "b"}), SIZES)
    c = tuning.decide(base, result("Q=1", 103.0, env={"Q": "1"}), SIZES)
    assert [v.name for v in tuning.best_per_variable([a, b, c])] == ["P=b", "Q=1"]
    both = tuning.decide(base, result("P=c Q=2", 110.0, env={"P": "c", "Q": "2"}), SIZES)
    # a set of variables competes with every candidate that sets one of them
    assert [v.name for v in tuning.best_per_variable([a, b, c, both])] == ["P=c Q=2"]


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
    assert r.evidence["ratio"][0] == pytest.approx(1.06, rel=1e-3) and r.evidence["nccl"] == "2.28.3"
    assert r.evidence["ci95_low"][0] > 1.02 and "# ACCEPTED NCCL_PROTO=LL128" in text


def test_socket_path_rules_are_multi_node_and_say_so_or_default_is_best():
    base = result("baseline", 100.0)
    cands = tune._candidates(SimpleNamespace(transport="socket", quick=False, candidate=None))
    assert cands == {c: dict(p.split("=") for p in c.split()) for c in tune.SOCKET_CANDIDATES}
    assert all("NCCL_SOCKET_NTHREADS" in e for e in cands.values())
    name, env = next(iter(cands.items()))
    win = tuning.decide(base, result(name, 180.0, env=env, jitter=0.01), SIZES)
    args = SimpleNamespace(nproc=2, device="cuda", matter_min=nb.MIB, transport="socket")
    info = {"gpus": ["NVIDIA H200"] * 2, "torch": "2.11", "nccl": "2.28.9"}
    text = tune.render_rules([win], [win], info, {"shape": {"gpus": [0, 1]}}, 5, args)
    r = envrules.parse(tomllib.loads(text)["env"]["rules"])[0]
    assert r.match == {"multi_node": True} and r.set == env and not r.force
    assert "emulated network path" in r.reason and r.evidence["transport"] == "socket over loopback"
    assert "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1" in text
    flat = tuning.decide(base, result(name, 100.3, env=env), SIZES)
    text = tune.render_rules([], [flat], info, {"shape": {"gpus": [0, 1]}}, 5, args)
    assert "# Default is best:" in text and "\n[[env.rules]]" not in text
    assert "allreduce 1 MiB: 1.00" in text  # the evidence: every size's ratio and interval


def test_smoke_benchmark_with_gloo_on_cpu(tmp_path):
    pytest.importorskip("torch")
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "nccl_env.py"), "--backend", "gloo", "--device",
                        "cpu", "--nproc", "2", "--sizes", "8KiB,16KiB", "--ablation-sizes", "8KiB", "--rounds", "2",
                        "--repeats", "2", "--colls", "allreduce", "--env-root", str(REPO / "tests/data/nodes/h100-vm"),
                        "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode in (0, 1), p.stdout + p.stderr  # 1: the bar missed (gloo on a busy 2-core VM)
    md = (tmp_path / "nccl_env.md").read_text()
    assert "gpuperf/default [95% CI]" in md and "2 paired round(s)" in md
    rows = [line for line in md.splitlines() if line.startswith("| 8 KiB") or line.startswith("| 16 KiB")]
    assert len(rows) == 4 and all("failed" not in r and "[" in r for r in rows)  # both readings, each an interval
    assert "| allreduce | 8 KiB |" in md  # the ablation: each injected variable alone
    data = json.loads((tmp_path / "nccl_env.json").read_text())
    assert data["sizes"] == [8192, 16384]
    assert set(data["sets"]) == {"default", "gpuperf", "only:PYTORCH_CUDA_ALLOC_CONF", "only:OMP_NUM_THREADS"}
    assert data["sets"]["gpuperf"]["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert len(data["sets"]["default"]["rounds"]) == 2 and "16384" not in data["sets"]["only:OMP_NUM_THREADS"]["rounds"][0]["allreduce"]


@pytest.mark.parametrize("cand,words", [("LD_PRELOAD=/x.so", "unknown variable class"), ("NCCL_ALGO", "NAME=VALUE")])
def test_tune_refuses_bad_candidates_before_measuring(cand, words, capsys):
    from gpuperf import cli

    rc = cli.main(["tune", "--out", "/nonexistent/rules.toml", "--candidate", cand, "--device", "cpu"])
    assert rc == 2 and words in capsys.readouterr().err


def test_tune_queued_timing_reaches_the_benchmark_and_the_record(tmp_path, monkeypatch, capsys):
    """--timing queued (issue 29: the socket path at every size with the collectives queued behind a GPU
    sleep) is what the workers time, and the rules file and its JSON say so; without CUDA it is refused."""
    from gpuperf import cli

    seen = {}

    def fake_measure(sets, nproc, backend, device, size_list, rounds, repeats, **kw):
        seen.update(kw, sizes=size_list)
        return {n: result(n, 100.0 if n == "baseline" else 100.1, env=e) for n, e in sets.items()}

    monkeypatch.setattr(nb, "measure", fake_measure)
    monkeypatch.setattr(nb, "versions", lambda: {"gpus": ["NVIDIA H200"] * 2, "torch": "2.11", "nccl": "2.28.9"})
    monkeypatch.setattr(nb, "gpuperf_exports", lambda nproc, root=None: ({"OMP_NUM_THREADS": "8"}, {}))
    out = tmp_path / "tune.toml"
    rc = cli.main(["tune", "--out", str(out), "--transport", "socket", "--timing", "queued", "--min-size", "8192",
                   "--max-size", str(256 << 20), "--sizes", ",".join(map(str, SIZES))])
    assert rc == 0, capsys.readouterr().err
    assert seen["timing"] == "queued"
    assert json.loads(out.with_suffix(".json").read_text())["timing"] == "queued"
    assert "# Timing: queued" in out.read_text()
    rc = cli.main(["tune", "--out", str(out), "--timing", "queued", "--device", "cpu", "--nproc", "2"])
    assert rc == 2 and "needs --device cuda" in capsys.readouterr().err
