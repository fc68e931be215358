"""The hook runner: steps run in order, a failing step never fails the hook, verdicts do."""

import json
import os
import sys
import types

import pytest

from gpuperf.hookbase import hook
from otheruser import OtherUserPython


@pytest.fixture
def steps_module(monkeypatch):
    mod = types.ModuleType("gpuperf_test_steps")
    calls = []

    def ok(ctx, cfg, state):
        calls.append("ok")
        state.data["seen_job"] = ctx.job_id

    def boom(ctx, cfg, state):
        calls.append("boom")
        raise RuntimeError("disk on fire")

    def verdict(ctx, cfg, state):
        calls.append("verdict")
        raise hook.HookVerdict(1, "node unhealthy")

    mod.ok, mod.boom, mod.verdict = ok, boom, verdict
    monkeypatch.setitem(sys.modules, "gpuperf_test_steps", mod)
    return calls


@pytest.fixture
def cfg_file(tmp_path, monkeypatch):
    p = tmp_path / "c.toml"
    p.write_text(f"[general]\nrun_dir = '{tmp_path}/run'\nlog_file = '{tmp_path}/log/g.log'\n")
    monkeypatch.setenv("GPUPERF_CONFIG", str(p))
    return tmp_path


ENV = {"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "0,1", "SLURM_JOB_USER": "root", "SLURM_JOB_UID": "0"}


def test_failing_step_is_recorded_and_later_steps_run(steps_module, cfg_file):
    rc = hook.run_hook("prolog", [("a", "gpuperf_test_steps:boom"), ("b", "gpuperf_test_steps:ok")], env=ENV)
    assert rc == 0
    assert steps_module == ["boom", "ok"]
    rec = json.loads((cfg_file / "run/jobs/5/prolog.json").read_text())
    assert rec["steps"]["a"]["ok"] is False and "disk on fire" in rec["steps"]["a"]["error"]
    assert rec["steps"]["b"]["ok"] is True
    assert rec["context"]["gpus"] == [0, 1] and rec["data"]["seen_job"] == 5
    assert "step a failed" in (cfg_file / "log/g.log").read_text()


def test_missing_step_module_does_not_fail(cfg_file):
    assert hook.run_hook("prolog", [("x", "gpuperf.no_such_module:step")], env=ENV) == 0


def test_verdict_stops_and_sets_exit_code(steps_module, cfg_file):
    rc = hook.run_hook("prolog", [("v", "gpuperf_test_steps:verdict"), ("b", "gpuperf_test_steps:ok")], env=ENV)
    assert rc == 1 and steps_module == ["verdict"]


def test_broken_config_logs_one_line_naming_key(steps_module, tmp_path, monkeypatch, capsys):
    p = tmp_path / "bad.toml"
    # [general] is salvaged from a broken file: the hook logs to tmp_path, not /var/log/gpuperf
    p.write_text(f"[daemon]\nintervall_s = 1\n[general]\nlog_file = \"{tmp_path / 'g.log'}\"\n")
    monkeypatch.setenv("GPUPERF_CONFIG", str(p))
    rc = hook.run_hook("epilog", [("b", "gpuperf_test_steps:ok")], env=ENV, record=False)
    assert rc == 0 and steps_module == ["ok"]
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if "daemon.intervall_s" in l]
    assert len(lines) == 1 and "bad.toml:2" in lines[0]
    assert "daemon.intervall_s" in (tmp_path / "g.log").read_text()


def test_main_guard_swallows_crashes(capsys):
    def crash():
        raise ValueError("x")

    assert hook.main_guard(crash) == 0
    assert "job unaffected" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a hook as another user")
def test_taskprolog_of_a_user_job_records_into_the_tasks_dir_the_prolog_made():
    import pwd
    import shutil
    import subprocess
    import tempfile

    nobody = pwd.getpwnam("nobody")
    base = tempfile.mkdtemp(prefix="gpuperf-hook-")
    try:
        os.chmod(base, 0o755)
        cfgp = os.path.join(base, "c.toml")
        with open(cfgp, "w") as f:
            f.write(f"[general]\nrun_dir = '{base}/run'\nlog_file = ''\n")
        os.chmod(cfgp, 0o644)
        env = {"SLURM_JOB_ID": "9", "SLURM_JOB_UID": str(nobody.pw_uid), "SLURM_JOB_USER": "nobody"}
        os.environ["GPUPERF_CONFIG"] = cfgp
        try:
            assert hook.run_hook("prolog", [], env=env) == 0
        finally:
            del os.environ["GPUPERF_CONFIG"]
        tasks = os.path.join(base, "run/jobs/9/tasks")
        assert os.stat(tasks).st_uid == nobody.pw_uid
        code = ("import os; from gpuperf.hookbase.hook import run_hook; "
                f"raise SystemExit(run_hook('taskprolog', [], env={env!r}))")
        # nobody's own readable copy of gpuperf: the checkout may be in a directory nobody cannot enter
        with OtherUserPython() as py:
            r = subprocess.run(["/usr/sbin/runuser", "-u", "nobody", "--", *py.argv, "-c", code],
                               env={"GPUPERF_CONFIG": cfgp, **py.env}, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        recs = [n for n in os.listdir(tasks) if n.startswith("taskprolog.")]
        assert len(recs) == 1 and "cannot record" not in r.stderr
    finally:
        shutil.rmtree(base)
