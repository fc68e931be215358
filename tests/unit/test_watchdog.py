"""Each hook's work is bounded in time ([watchdog]): past the bound one log line, exit 0 (or the verdict)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuperf.files import config
from gpuperf.hookbase import watchdog

LIVENESS_S = 60  # only a hook the watchdog failed to end reaches this


def _hook_blocked_on_fifo(tmp_path: Path, hook: str, bound_key: str, decide: int | None = None) -> tuple[int, str, str]:
    """Run ``hook`` in a child whose one step blocks for ever reading a FIFO; (exit code, stderr, log)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "c.toml").write_text(f"[general]\nrun_dir = '{tmp_path}/run'\nlog_file = '{tmp_path}/g.log'\n"
                                     f"[watchdog]\n{bound_key} = 1\n")
    (tmp_path / "blocking_step.py").write_text(textwrap.dedent(f"""
        from gpuperf.hookbase import watchdog
        def step(ctx, cfg, state):
            if {decide!r} is not None:
                watchdog.decided({decide!r})
            open({str(fifo)!r}).read()     # what a planted FIFO did to the epilog before safeio
    """))
    code = (f"import sys; from gpuperf.hookbase import hook; "
            f"sys.exit(hook.main_guard(lambda: hook.run_hook({hook!r}, [('block', 'blocking_step:step')])))")
    env = dict(os.environ, GPUPERF_CONFIG=str(tmp_path / "c.toml"), SLURM_JOB_ID="9", PYTHONPATH=f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=LIVENESS_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the watchdog did not end the {hook} within {LIVENESS_S} s")
    return p.returncode, p.stderr, (tmp_path / "g.log").read_text()


@pytest.mark.parametrize("hook, key", [("epilog", "epilog_s"), ("prolog", "prolog_s"), ("taskprolog", "taskprolog_s")])
def test_a_blocked_hook_is_ended_with_exit_0_and_one_log_line(tmp_path, hook, key):
    rc, err, logged = _hook_blocked_on_fifo(tmp_path, hook, key)
    assert rc == 0
    expected = f"watchdog: {hook} still running after 1 s ([watchdog] {key}); its work is ended, exit 0"
    assert logged.count(expected) == 1 and expected in err


def test_a_drain_decided_before_the_bound_keeps_its_non_zero_exit(tmp_path):
    rc, _, logged = _hook_blocked_on_fifo(tmp_path, "prolog", "prolog_s", decide=1)
    assert rc == 1 and "its work is ended, exit 1" in logged


def test_a_hook_that_finishes_disarms_its_watchdog():
    watchdog.arm("epilog", 0.2)
    watchdog.disarm()
    import time
    time.sleep(0.4)  # still alive: the timer was cancelled (else os._exit would end pytest here)


@pytest.mark.parametrize("text, err", [
    ("[watchdog]\nepilog_s = 0\n", "watchdog.epilog_s' must be > 0 and <= 3600 seconds"),
    ("[watchdog]\nprolog_s = 7200\n", "watchdog.prolog_s' must be > 0 and <= 3600 seconds"),
])
def test_bounds_are_validated_naming_the_key_and_line(text, err):
    with pytest.raises(config.ConfigError) as e:
        config.parse(text, "w.toml")
    assert err in str(e.value) and "w.toml:2" in str(e.value)


def test_every_hook_has_a_bound_below_slurms_timeout_in_the_snippet():
    snippet = (Path(__file__).parents[2] / "packaging" / "slurm.conf.snippet").read_text()
    timeout = int(next(l.split("=", 1)[1] for l in snippet.splitlines() if l.startswith("PrologEpilogTimeout=")))
    cfg = config.defaults()
    for hook in ("prolog", "epilog"):
        assert watchdog.bound_of(cfg, hook) < timeout
