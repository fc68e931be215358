"""Jobs that hold no GPU on a node cost nothing: no registration, no finalisation, no summary
(unless ``report.cpu_jobs``); the controller writes no AdminComment for a zero-GPU summary."""

from __future__ import annotations

import pytest

from gpuperf.daemon import client
from gpuperf.epilog import finalize
from gpuperf.files import config
from gpuperf.hookbase import jobctx
from gpuperf.hookbase.hook import HookState
from gpuperf.prolog import register


def _cfg(tmp_path, cpu_jobs: bool):
    p = tmp_path / "gpuperf.toml"
    p.write_text(f'[general]\nrun_dir = "{tmp_path}/run"\nstate_dir = "{tmp_path}"\nlog_file = ""\n'
                 f'[daemon]\nsocket_dir = "{tmp_path}/nodaemon"\n[report]\ncpu_jobs = {str(cpu_jobs).lower()}\n')
    return config.load(str(p))


def _ctx(gpus: str | None):
    env = {"SLURM_JOB_ID": "41", "SLURM_JOB_UID": "1000", "SLURM_JOB_USER": "alice", "SLURMD_NODENAME": "n1"}
    if gpus is not None:
        env["SLURM_JOB_GPUS"] = gpus
    return jobctx.from_env("prolog", env), env


@pytest.fixture
def calls(monkeypatch):
    seen = []

    def call(cfg, op, job=None, **kw):
        seen.append(op)
        raise client.DaemonUnavailable("test: no daemon")

    monkeypatch.setattr(client, "call", call)
    return seen


@pytest.mark.parametrize("gpus", [None, "", "nodevs"])
def test_a_job_without_gpus_is_neither_registered_nor_finalised(tmp_path, calls, gpus):
    cfg = _cfg(tmp_path, cpu_jobs=False)
    ctx, env = _ctx(gpus)
    state = HookState(env)
    register.step(ctx, cfg, state)
    finalize.step(ctx, cfg, state)
    assert calls == []
    assert state.data["register"]["skipped"] == state.data["finalize"]["skipped"] == "no GPU on this node"
    assert not (tmp_path / "pending").exists()


def test_a_gpu_job_and_the_opt_in_still_ask_the_daemon(tmp_path, calls):
    ctx, env = _ctx("0,1")
    register.step(ctx, _cfg(tmp_path, cpu_jobs=False), HookState(env))
    cpu_ctx, cpu_env = _ctx(None)
    register.step(cpu_ctx, _cfg(tmp_path, cpu_jobs=True), HookState(cpu_env))
    finalize.step(cpu_ctx, _cfg(tmp_path, cpu_jobs=True), HookState(cpu_env))
    assert calls == ["register", "register", "finalize"]
