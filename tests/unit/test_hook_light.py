"""What the hooks' light paths replaced still behaves as before: logging set up late, NCCL file names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpuperf.env.ncclver import soname_version

REPO = Path(__file__).resolve().parents[2]

# a step module that logs through its own logger, as the prolog's steps do (imports logging itself)
STEPS = '''
from gpuperf.files import log

def own_logger(ctx, cfg, state):
    log.get("steps").warning("from the step's own logger")

def boom(ctx, cfg, state):
    raise RuntimeError("disk on fire")
'''
RUN = '''
import sys
sys.path.insert(0, {d!r})
from gpuperf.hookbase.hook import run_hook
sys.exit(run_hook("taskprolog", [("one", {spec!r})]))
'''


def _run(tmp_path: Path, spec: str) -> tuple[subprocess.CompletedProcess, str]:
    (tmp_path / "light_steps.py").write_text(STEPS)
    conf = tmp_path / "c.toml"
    conf.write_text(f"[general]\nrun_dir = '{tmp_path}/run'\nlog_file = '{tmp_path}/log/g.log'\n")
    env = {"GPUPERF_CONFIG": str(conf), "SLURM_JOB_ID": "7", "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", RUN.format(d=str(tmp_path), spec=spec)], env=env,
                       capture_output=True, text=True, timeout=60, cwd="/")
    log = tmp_path / "log" / "g.log"
    return p, log.read_text() if log.exists() else ""


def test_a_steps_own_logger_writes_to_the_hooks_log_file(tmp_path):
    p, log = _run(tmp_path, "light_steps:own_logger")
    assert p.returncode == 0
    assert re.search(r"gpuperf-taskprolog\[\d+\] WARNING from the step's own logger", log)


def test_a_failing_step_is_logged_though_nothing_had_set_logging_up(tmp_path):
    p, log = _run(tmp_path, "light_steps:boom")
    assert p.returncode == 0
    assert "ERROR job 7: step one failed: RuntimeError: disk on fire" in log
    assert "disk on fire" in p.stderr


def _by_regex(name: str):
    m = re.search(r"libnccl\.so\.(\d+\.\d+\.\d+)$", "/lib/" + name)  # what the glob + regex search found
    return tuple(int(x) for x in m.group(1).split(".")) if m and name.startswith("libnccl.so.") else None


@given(st.text(alphabet="libncl.so0123456789x-", max_size=24))
def test_soname_version_is_the_regex_it_replaced(tail):
    for name in (tail, "libnccl.so." + tail, "libnccl.so.libnccl.so." + tail):
        assert soname_version(name) == _by_regex(name)


END = '''
import sys
from gpuperf.hookbase.guard import exit_now
{before}
print("exports", end="")
exit_now(3)
'''


def _end(before: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", END.format(before=before)], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(REPO)}, cwd="/")


def test_exit_now_exits_with_the_code_and_everything_printed():
    p = _end()
    assert (p.returncode, p.stdout) == (3, "exports")


def test_exit_now_leaves_the_exit_to_python_when_something_waits_for_it():
    p = _end("import atexit; atexit.register(lambda: print(' and goodbye', end=''))")
    assert (p.returncode, p.stdout) == (3, "exports and goodbye")
