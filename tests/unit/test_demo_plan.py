"""The demo replays recordings only on the GPUs each job holds, and only recordings of its node's GPU model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gpuperf.samplers.replay import from_spec

DEMO = Path(__file__).resolve().parents[2] / "packaging" / "demo.py"


def _demo():
    spec = importlib.util.spec_from_file_location("gpuperf_demo", DEMO)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_demo_jobs_replay_their_own_gpus_of_the_nodes_model():
    demo = _demo()
    model = demo.node_model()
    jobs = demo.plan(model)
    assert model == "NVIDIA H200" and len(jobs) >= 4
    for name, rec, gpus, backend in jobs:
        assert demo.recording_model(rec) == model, f"{name} replays {rec.name} on a {model} node"
        sampler = from_spec(backend.removeprefix("replay:"))
        # the daemon sees exactly the job's GPUs: nothing replays on GPUs no job holds
        assert sampler.gpu_count() == gpus
        assert {d["name"] for d in sampler.describe()} == {model}
    assert ("one-of-two-gpus", 2) in {(n, g) for n, _, g, _ in jobs}


def test_no_recording_of_another_model_is_replayed():
    assert _demo().plan("NVIDIA L40S") == []


def test_real_gpu_demo_runs_only_the_workloads_that_fit_the_node():
    demo = _demo()
    one = demo.real_plan(1)
    assert one and all(g == 1 for _, _, g in one)
    assert ("one-of-two-gpus", "one_busy.py", 2) in demo.real_plan(2)
    workloads = Path(demo.REPO) / "benchmarks" / "workloads"
    assert all((workloads / w.split()[0]).is_file() for _, w, _ in demo.real_plan(8))
