"""gpuperf-hook (the compiled client) against the real daemon: the prolog, epilog and TaskProlog it serves
leave what the Python hooks leave, and every doubt ends in the Python hook. Real daemon, real sockets, a
recorded node; the C client compiled as the packages build it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hookclient as hc  # noqa: E402
from test_daemon import Running, ScriptSampler, base, wait_for  # noqa: E402,F401
from test_prolog_fast import HEALTHY, _job_files, job_env, write_config  # noqa: E402

from gpuperf.daemon import protocol  # noqa: E402
from gpuperf.files import config  # noqa: E402
from gpuperf.hookbase import jobctx  # noqa: E402
from gpuperf.prolog import envtask, fast  # noqa: E402


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return hc.built_client(tmp_path_factory)


@pytest.fixture
def setup(base, exe, monkeypatch):
    path = write_config(base)
    monkeypatch.setenv("GPUPERF_CONFIG", str(path))
    monkeypatch.delenv("GPUPERF_SYSFS_ROOT", raising=False)
    return config.load(str(path)), hc.make_prefix(base / "prefix", exe), path


def _hook(prefix: Path, mode: str, env: dict[str, str], cfg_path: Path) -> subprocess.CompletedProcess:
    full = {"PATH": "/usr/bin:/bin", "GPUPERF_CONFIG": str(cfg_path), **env}
    return subprocess.run([str(prefix / "bin" / f"gpuperf-{mode}")], env=full, capture_output=True, text=True, timeout=20)


def test_prolog_taskprolog_epilog_served_by_the_daemon_leave_what_the_python_hooks_leave(setup):
    cfg, prefix, path = setup
    with Running(cfg, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        p = _hook(prefix, "prolog", job_env(101), path)
        assert p.returncode == 0 and hc.fell_back(prefix, "prolog") is None, p.stderr
        assert fast.try_daemon(job_env(102)).exit_code == 0              # the Python hook's fast path
        assert set(r.d.running) == {101, 102}
        c_files, py_files = _job_files(cfg.general.run_dir, 101), _job_files(cfg.general.run_dir, 102)
        assert c_files.pop("via") == py_files.pop("via") == "daemon"
        assert {**c_files.pop("context"), "job_id": 0} == {**py_files.pop("context"), "job_id": 0}
        assert c_files == py_files

        task_env = {**job_env(101), "SLURM_STEP_ID": "0", "SLURM_CPUS_PER_TASK": "4", "OMP_NUM_THREADS": "3",
                    "CUDA_VISIBLE_DEVICES": "0,1"}
        t = _hook(prefix, "taskprolog", task_env, path)
        assert t.returncode == 0 and hc.fell_back(prefix, "taskprolog") is None, t.stderr
        cache = envtask.read_cache(cfg, 101)
        want = envtask.task_output(jobctx.from_env("taskprolog", task_env), cfg, task_env, cache)
        assert t.stdout == want.text and "OMP_NUM_THREADS" not in t.stdout    # the user's 3 is kept
        jdir = Path(cfg.general.run_dir) / "jobs" / "101"
        assert json.loads((jdir / "env" / "step-0.json").read_text()) == json.loads(json.dumps(want.step_record))
        hooks = list((jdir / "tasks").glob("taskprolog.*.json"))
        assert len(hooks) == 1 and json.loads(hooks[0].read_text())["data"]["via"] == "daemon"

        e = _hook(prefix, "epilog", {**job_env(101), "SLURM_JOB_EXIT_CODE": "0"}, path)
        assert e.returncode == 0 and hc.fell_back(prefix, "epilog") is None, e.stderr
        assert 101 not in r.d.running and 102 in r.d.running
        rec = json.loads((jdir / "epilog.json").read_text())
        assert rec["data"]["via"] == "daemon" and rec["data"]["finalize"]["ok"] and rec["data"]["finalize"]["queued"]


def test_another_config_file_or_a_daemon_without_the_steps_falls_back_to_python(setup, exe, base):
    cfg, prefix, path = setup
    with Running(cfg, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        path.write_text(path.read_text() + "\n# edited after the daemon started\n")
        for mode in ("prolog", "epilog", "taskprolog"):
            p = _hook(prefix, mode, job_env(301), path)
            assert p.returncode == 0, p.stderr
            assert hc.fell_back(prefix, mode).startswith("declined: ") and "restart gpuperf-daemon" in hc.fell_back(prefix, mode)
        assert r.d.running == {}
    path.write_text(path.read_text().replace("\n# edited after the daemon started\n", ""))
    other = hc.make_prefix(base / "prefix2", exe)
    with Running(cfg, ScriptSampler(n=8), health_fn=lambda: HEALTHY, epilog=None, taskenv=None):
        for mode in ("epilog", "taskprolog"):
            assert _hook(other, mode, job_env(302), path).returncode == 0
            assert "without the" in hc.fell_back(other, mode)
    # no daemon at all: down, at once (no socket file)
    third = hc.make_prefix(base / "prefix3", exe)
    assert _hook(third, "prolog", job_env(303), path).returncode == 0
    assert hc.fell_back(third, "prolog").startswith("down: ")


def test_taskenv_reads_a_plan_only_for_its_owner(setup):
    cfg, prefix, path = setup
    with Running(cfg, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        assert _hook(prefix, "prolog", job_env(401), path).returncode == 0
        data = config.file_key(path.read_bytes())
        job = {"env": {**job_env(401), "SLURM_STEP_ID": "0"}, "config": {"source": str(path), "file": data}}
        frame = protocol.encode(protocol.request("taskenv", job))
        mine = r.d.ops.handle(frame, 0, "user")            # the plan is root's (job uid 0): its owner
        theirs = r.d.ops.handle(frame, 4242, "user")        # another user asks for that job's plan
    assert mine["ok"] and mine["done"] and "export " in mine["out"]
    assert theirs["ok"] and not theirs["done"] and "not read" in theirs["why"] and "out" not in theirs


def test_task_output_uses_what_the_task_listed_never_the_daemons_view(tmp_path):
    from gpuperf.env.ncclver import Listing, nccl_from_env

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libnccl.so.2.18.1").touch()
    env = {"LD_LIBRARY_PATH": str(lib)}
    assert nccl_from_env(env)[0] == (2, 18, 1)
    assert nccl_from_env(env, Listing({}, []))[0] is None              # the task could not list it
    assert nccl_from_env(env, Listing({str(lib): ["libnccl.so.2.27.3"]}, []))[0] == (2, 27, 3)
    venv = {"VIRTUAL_ENV": "/nowhere"}
    assert nccl_from_env(venv, Listing({}, ["nvidia_nccl_cu12-2.21.5.dist-info"]))[0] == (2, 21, 5)


def test_the_python_hooks_do_not_ask_again_what_the_client_asked(setup, monkeypatch):
    cfg, _, _ = setup
    from gpuperf import epilog, prolog

    with Running(cfg, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        for k, v in job_env(501).items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("GPUPERF_HOOK_FALLBACK", "declined: the daemon said no")
        assert prolog._run() == 0
        rec = json.loads((Path(cfg.general.run_dir) / "jobs" / "501" / "prolog.json").read_text())
        assert rec["data"]["fast_path"] == "the daemon said no" and rec["data"].get("via") is None
        assert 501 in r.d.running                      # the full prolog registered it itself
        # the client found no daemon: the epilog leaves its marker at once instead of asking again
        monkeypatch.setenv("GPUPERF_HOOK_FALLBACK", "down: hook.sock: Connection refused")
        assert epilog.main() == 0
        assert 501 in r.d.running
        fin = json.loads((Path(cfg.general.run_dir) / "jobs" / "501" / "epilog.json").read_text())["data"]
        assert fin["fast_path"].startswith("down: ") and fin["finalize"]["ok"] is False
        assert Path(fin["finalize"]["pending"]).name == "finalize-501.json"
    # "client": the client could not ask (a config it does not read): the Python prolog asks itself
    from gpuperf.prolog import fast

    assert fast.client_outcome("client: a config line it does not read") is None
    assert fast.client_outcome(None) is None and fast.client_outcome("garbage") is None
    assert fast.client_outcome("down: x").daemon_down
