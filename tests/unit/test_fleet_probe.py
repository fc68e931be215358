"""The active probe without a GPU: unavailable without a CUDA Python (never a failure), a stand-in probe
Python that prints canned gpuperf.probe.v1 JSON for the rest (the real script is proven on GPUs by
benchmarks/device/fleet_probe.py), the figures' way into the fingerprints, and the daemon's idle probes."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from gpuperf.files import config
from gpuperf.checks.base import CheckEnv
from gpuperf.checks.builtin import gpu_probe
from gpuperf.checks import probe
from gpuperf.fleet.fingerprint import FleetStore
from gpuperf.model.load import node_figures
from gpuperf.fleet.ranking import rank

sys.path.insert(0, str(Path(__file__).parent))
from test_daemon import Running, ScriptSampler, base, make_cfg, wait_for  # noqa: E402,F401


def _gpu(i: int, tflops: float, membw: float = 3000.0, p2p: float = 180.0) -> dict:
    return {"index": i, "name": "NVIDIA H200", "uuid": f"GPU-{i}", "gemm_tflops": tflops, "gemm_runs": [tflops] * 3,
            "membw_gbs": membw, "membw_runs": [membw] * 3, "p2p_gbs": {str(1 - i): p2p}, "seconds": 2.5}


def fake_python(tmp: Path, gpus: list[dict] | None = None, sleep_s: float = 0.0, error: str | None = None) -> str:
    """An executable standing in for the admin's CUDA Python: prints what the probe script would."""
    out = {"schema": "gpuperf.probe.v1", "t": 1.8e9, "gpus": gpus or []}
    if error:
        out["error"] = error
    exe = tmp / "fakepython"
    exe.write_text(f"#!/bin/sh\nsleep {sleep_s} &\necho $! > {tmp / 'sleeper.pid'}\nwait\n"
                   f"echo 'warming up'\necho '{json.dumps(out)}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """The process has exited (or is a zombie not yet reaped) within ``within_s``: SIGKILL is delivered
    asynchronously, and the pipe closes a moment before the exit completes."""
    import time

    end = time.monotonic() + within_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except OSError:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def _cfg(tmp: Path, py: str = "", **fleet) -> config.Config:
    cfg = config.defaults()
    cfg.data["general"]["state_dir"] = str(tmp / "state")
    cfg.data["fleet"].update(probe_python=py, **fleet)
    return cfg


def test_without_a_cuda_python_the_probe_cannot_run_and_says_why(tmp_path: Path) -> None:
    r = probe.run(_cfg(tmp_path))
    assert r.status == "unavailable" and "fleet.probe_python is not set" in r.why
    r = probe.run(_cfg(tmp_path, str(tmp_path / "nope")))
    assert r.status == "unavailable" and "not an executable" in r.why
    # this machine's own Python has no CUDA (no torch, or torch without a GPU): the real script says so
    r = probe.run(_cfg(tmp_path, sys.executable))
    assert r.status == "unavailable" and ("PyTorch not importable" in r.why or "CUDA not available" in r.why), r
    res = gpu_probe.check({}, {}, [], _cfg(tmp_path, sys.executable), CheckEnv(live=True))
    assert res.status == "skip" and "probe cannot run here" in res.detail
    assert not (tmp_path / "state" / probe.RESULTS).exists()


def test_probe_results_judged_kept_and_joined_to_the_fingerprints(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, fake_python(tmp_path, [_gpu(0, 700.0), _gpu(1, 420.0, p2p=120.0)]))
    r = probe.run(cfg)
    assert r.status == "ok" and [g["p2p_link_gbs"] for g in r.gpus] == [150.0, 150.0]   # one link, both ways
    verdict = {v["index"]: v for v in probe.judge(r.gpus)}
    assert not verdict[0]["slow"] and verdict[1]["slow"]
    assert "GEMM 420.0 TFLOP/s, best 700.0 on this node (40% lower)" in verdict[1]["evidence"][0]
    assert not any("P2P" in e for e in verdict[1]["evidence"])        # the shared link is nobody's fault here
    res = gpu_probe.check({}, {}, [], cfg, CheckEnv(live=True))
    assert res.status == "warn" and "GPU 1 (GPU-1): GEMM 420.0" in res.detail
    kept = probe.load(cfg.general.state_dir)
    assert kept["1"]["probe_tflops"] == 420.0 and kept["0"]["probe_p2p_gbs"] == 150.0
    # the next node summary carries them (for the same board only) and the controller folds them once
    aggs = {"gpus": {str(i): {"uuid": f"GPU-{i}", "name": "NVIDIA H200", "seconds": 10.0, "load": {"busy_s": 0}}
                     for i in range(2)}}
    figs = node_figures(aggs, None, kept)
    assert [f["probe"]["probe_tflops"] for f in figs] == [700.0, 420.0]
    aggs["gpus"]["1"]["uuid"] = "GPU-swapped"
    assert "probe" not in node_figures(aggs, None, kept)[1]
    st = FleetStore(tmp_path / "fleet.sqlite")
    for n in range(10):  # ten nodes of the same model, node n009's GPU 1 is the slow one
        f = [dict(e, probe=dict(e["probe"], probe_tflops=700.0 + n if (n, e["gpu"]) != (9, 1) else 420.0))
             for e in node_figures(dict(aggs, gpus={k: dict(v, uuid=f"GPU-{k}") for k, v in aggs["gpus"].items()}), None, kept)]
        st.ingest({"nodes": [f"n{n:03d}"], "fleet": f})
    st.ingest({"nodes": ["n009"], "fleet": f})          # the same probe run again: counted once
    ranks = rank(st.gpus(), st.model_stats(), 5.0)
    assert [(g.node, g.idx) for g in ranks if g.flagged] == [("n009", 1)]
    assert "probe GEMM 420.0 TFLOP/s, model median 70" in ranks[0].headline


def test_p2p_charges_the_gpu_whose_links_are_slow_not_its_neighbours() -> None:
    fast, slow = 360.0, 200.0
    gpus = [{"index": i, "name": "H", "p2p_gbs": {str(j): (slow if 3 in (i, j) else fast) for j in range(4) if j != i}}
            for i in range(4)]
    verdict = {v["index"]: v for v in probe.judge(probe.link_figures(gpus))}
    assert [i for i, v in verdict.items() if v["slow"]] == [3]
    assert "P2P (median link) 200.0 GB/s, best 360.0" in verdict[3]["evidence"][0]


def test_probe_bounded_by_its_timeout_and_stopped_by_a_job(tmp_path: Path) -> None:
    r = probe.run(_cfg(tmp_path, fake_python(tmp_path, [_gpu(0, 1.0)], sleep_s=60), probe_timeout_s=2))
    assert r.status == "error" and r.why == "timed out after 2 s"
    pid = (tmp_path / "sleeper.pid").read_text().strip() if (tmp_path / "sleeper.pid").exists() else ""
    assert not pid or _gone(int(pid))   # the probe's own children are killed with it (a 60 s sleep here)
    r = probe.run(_cfg(tmp_path, fake_python(tmp_path, [_gpu(0, 1.0)], sleep_s=5)), keep_going=lambda: False)
    assert r.status == "unavailable" and "a job started" in r.why
    r = probe.run(_cfg(tmp_path, fake_python(tmp_path, error="CUDA not available to /x (torch 2.1)")))
    assert r.status == "unavailable" and "CUDA not available" in r.why
    bad = tmp_path / "bad"
    bad.write_text("#!/bin/sh\necho oops\nexit 3\n")
    bad.chmod(0o755)
    r = probe.run(_cfg(tmp_path, str(bad)))
    assert r.status == "error" and "exit 3" in r.why


def test_daemon_probes_only_an_idle_node(base: Path) -> None:
    cfg = make_cfg(base)
    cfg.data["fleet"].update(probe_python=fake_python(base, [_gpu(0, 700.0), _gpu(1, 690.0)]), probe_every_s=0.2)
    kept = base / "state" / probe.RESULTS
    with Running(cfg, ScriptSampler(n=2)) as r:
        assert r.call("register", {"job_id": 5, "uid": 0, "gpus": [0, 1]})["ok"]
        wait_for(lambda: r.d.stats["sweeps"] > 10)
        assert not kept.exists()                      # a job runs: no probe
        assert r.call("finalize", {"job_id": 5})["ok"]
        wait_for(lambda: kept.exists(), timeout=10)
        assert r.d.prober.last["status"] == "ok"
    assert json.loads(kept.read_text())["1"]["probe_tflops"] == 690.0
    assert os.stat(kept).st_mode & 0o777 == 0o644


def test_bursts_are_sized_from_warm_calls_not_the_cold_first_one(monkeypatch) -> None:
    """The first call of a fresh process is slow (library start-up); sized from it, the GEMM bursts were 3
    calls long on real GPUs and read 5-9% low. A stand-in op on a stand-in clock: 0.3 s cold, then 2 ms."""
    import types

    sys.path.insert(0, str(Path(probe.SCRIPT).parent))
    import probe_script

    clock = [0.0]
    monkeypatch.setattr(probe_script, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def op() -> None:
        clock[0] += 0.3 if clock[0] == 0.0 else 0.002

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda d: None))
    runs, iters = probe_script._bursts(fake, op, (0,), reps=2, target_s=0.1, settle_s=0.0)
    assert 45 <= iters <= 50 and runs == [pytest.approx(0.002)] * 2   # the cold call alone would have sized 3


def test_probe_figures_join_the_board_whatever_the_uuid_spelling() -> None:
    """PyTorch names a board without NVML's ``GPU-`` prefix (recorded on an H100 under Slurm,
    benchmarks/results/fleet_probe_h100.json): the probe's figures still ride on that board's entry."""
    rec = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "fleet_probe_h100.json").read_text())
    torch_uuid = rec["runs"][0]["probe"][0]["uuid"]
    assert not torch_uuid.startswith("GPU-")
    kept = {"0": {"t": 1.0, "uuid": torch_uuid, "name": "NVIDIA H100 80GB HBM3", "probe_tflops": 667.7}}
    aggs = {"gpus": {"0": {"uuid": f"GPU-{torch_uuid}", "name": "NVIDIA H100 80GB HBM3", "seconds": 10.0,
                           "load": {"busy_s": 0}}}}
    assert node_figures(aggs, None, kept)[0]["probe"]["probe_tflops"] == 667.7
    aggs["gpus"]["0"]["uuid"] = "GPU-another-board"
    assert "probe" not in node_figures(aggs, None, kept)[0]
