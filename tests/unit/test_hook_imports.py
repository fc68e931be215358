"""The hooks' common case imports only the standard library's light modules and the message codec.

Each hook runs as its real entry script does (``packaging/bin/``), in a fresh interpreter, and
reports the modules it imported. On the prolog's fast path a real daemon serves the hook socket;
the TaskProlog prints a job's exports from the plan its prolog cached. What must not load there is
what the figures in benchmarks/hook_latency.py depend on: the libraries the daemon and reports use,
gpuperf's checks and policies, and the standard library's costly imports (each listed with why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_daemon import Running, ScriptSampler, base  # noqa: E402,F401
from test_prolog_fast import HEALTHY, conf, job_env  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "packaging" / "bin"

# never on a hook's common case: imported there, each costs a fresh process milliseconds
HEAVY = (
    "zmq", "psutil", "rich", "plotly", "pynvml", "prometheus_client", "sqlite3", "orjson",  # the daemon's, the reports', the controller's
    "gpuperf.checks", "gpuperf.env.policy", "gpuperf.env.rules", "gpuperf.env.tuning", "gpuperf.env.ncclbench",
    "gpuperf.affinity.plan", "gpuperf.topology", "gpuperf.samplers", "gpuperf.controller", "gpuperf.prolog.envplan", "gpuperf.prolog.affinityplan",
    "gpuperf.prolog.health", "gpuperf.diagnosis", "gpuperf.access.slurm",  # checks, policies, discovery
    "tomllib",      # the config comes from gpuperf.hookbase.hookconf's cache
    "typing",       # pulls collections, functools, contextlib: annotations stay strings
    "collections",  # ~2 ms: gpuperf.env.plan keeps its records without namedtuple
    "re", "json",   # json imports re: gpuperf.files.jsonlite drives the same C codec
    "logging",      # loaded when there is something to log
    "socket",       # enum and selectors: the hook socket's client uses _socket
    "dataclasses", "inspect", "pathlib", "importlib.util", "subprocess", "tempfile", "glob",
)

PROBE = """
import os, sys

def report(code):
    sys.stdout.flush()
    with open({out!r}, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
    real_exit(code)

real_exit, os._exit = os._exit, report  # the scripts end with os._exit where nothing else needs the exit
try:
    exec(compile(open({script!r}).read(), {script!r}, "exec"))
except SystemExit as e:
    report(e.code or 0)
"""


def run_entry(script: str, env: dict[str, str], out: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run a hook's entry script in a fresh interpreter; its result and the modules it imported."""
    code = PROBE.format(script=str(SCRIPTS / script), out=str(out))
    env = dict(env, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd="/")
    return p, set(out.read_text().split())


def heavy_in(modules: set[str]) -> list[str]:
    """The HEAVY modules (or their submodules) among ``modules``."""
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_prolog_fast_path_imports_nothing_heavy(base, conf):
    env = {**job_env(4101), "GPUPERF_CONFIG": os.environ["GPUPERF_CONFIG"]}
    with Running(conf, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        for i, out in enumerate(("first", "cached")):  # the first run loads the TOML and caches it
            env["SLURM_JOB_ID"] = str(4101 + i)
            p, modules = run_entry("gpuperf-prolog", env, base / out)
            assert p.returncode == 0, p.stderr
            rec = json.loads((Path(conf.general.run_dir) / "jobs" / str(4101 + i) / "prolog.json").read_text())
            assert rec["data"]["via"] == "daemon"  # the fast path was taken: the daemon ran the steps
        assert set(r.d.running) == {4101, 4102}
    assert "gpuperf.prolog.fast" in modules and "gpuperf.daemon.hooksock" in modules
    assert heavy_in(modules) == [], heavy_in(modules)


def test_prolog_full_path_still_runs_when_the_daemon_is_absent(base, conf):
    """The check above means something: without a daemon the same entry loads the heavy modules."""
    env = {**job_env(4201), "GPUPERF_CONFIG": os.environ["GPUPERF_CONFIG"]}
    p, modules = run_entry("gpuperf-prolog", env, base / "modules")
    assert p.returncode == 0, p.stderr
    rec = json.loads((Path(conf.general.run_dir) / "jobs" / "4201" / "prolog.json").read_text())
    assert rec["data"]["fast_path"] == "no daemon hook socket" and "health" in rec["steps"]
    assert {"gpuperf.checks", "gpuperf.prolog.envplan", "logging"} <= set(heavy_in(modules))


def test_prolog_full_path_asks_the_daemon_without_pyzmq(base, conf):
    """Every step in the process (fast path off): health and registration still come from the daemon,
    over the hook socket, so the process never imports pyzmq (~20 ms of its start)."""
    full = base / "full-path.toml"
    text = Path(os.environ["GPUPERF_CONFIG"]).read_text()
    assert "prolog_fast_path = true" in text  # a broken config would run on defaults: the machine's own paths
    full.write_text(text.replace("prolog_fast_path = true", "prolog_fast_path = false"))
    env = {**job_env(4151), "GPUPERF_CONFIG": str(full)}
    with Running(conf, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        p, modules = run_entry("gpuperf-prolog", env, base / "modules")
        assert p.returncode == 0, p.stderr
        assert 4151 in r.d.running  # registered with the daemon
    rec = json.loads((Path(conf.general.run_dir) / "jobs" / "4151" / "prolog.json").read_text())
    assert "via" not in rec["data"] and {"health", "register"} <= set(rec["steps"])  # the steps ran here
    assert rec["data"]["register"]["ok"] is True
    # the daemon's cached results, not a local check run: its pcie_link warning is the one recorded
    assert any(c.get("code") == "pcie_link" and c.get("detail") == HEALTHY[1]["detail"]
               for c in rec["data"]["health"]["results"]), rec["data"]["health"]
    assert "gpuperf.daemon.hooksock" in modules and "zmq" not in modules


def test_epilog_hands_the_job_to_the_daemon_without_heavy_imports(base, conf):
    """The job stays COMPLETING until the Epilog exits: it finalises over the hook socket and leaves the
    node summary and its sending to the daemon, importing no heavy module (not pyzmq, json, logging)."""
    env = {**job_env(4300), "GPUPERF_CONFIG": os.environ["GPUPERF_CONFIG"]}
    with Running(conf, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        run_entry("gpuperf-epilog", env, base / "first")   # a job unknown here; caches the validated config
        env["SLURM_JOB_ID"] = "4301"
        assert r.call("register", {"job_id": 4301, "uid": 0, "user": "root", "gpus": [0, 1]})["ok"]
        p, modules = run_entry("gpuperf-epilog", env, base / "modules")
        assert p.returncode == 0, p.stderr
        assert 4301 not in r.d.running
        summary = Path(conf.general.run_dir) / "jobs" / "4301" / "node_summary.json"
        deadline = time.time() + 10
        while not summary.exists() and time.time() < deadline:   # written by the daemon after its reply
            time.sleep(0.05)
        assert summary.exists()
    rec = json.loads((Path(conf.general.run_dir) / "jobs" / "4301" / "epilog.json").read_text())
    assert rec["data"]["finalize"]["ok"] is True and rec["data"]["finalize"]["queued"] is True
    assert "gpuperf.daemon.hooksock" in modules
    assert heavy_in(modules) == [], heavy_in(modules)


@pytest.mark.parametrize("script", ["gpuperf-prolog", "gpuperf-taskprolog", "gpuperf-epilog"])
def test_entry_scripts_are_installed_as_plain_scripts(script):
    """setup.cfg installs packaging/bin/ (a pip console script would import re before the entry point)."""
    import configparser

    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    assert f"packaging/bin/{script}" in setup["options"]["scripts"].split()
    assert not any(line.split("=")[0].strip() == script
                   for line in setup["options.entry_points"]["console_scripts"].splitlines())
    installed = Path(sys.executable).with_name(script)
    if not installed.exists() or "import re" in installed.read_text().splitlines():
        pytest.skip(f"{installed}: absent or installed before packaging/bin (rerun packaging/install.sh)")
    entry = next(line for line in (SCRIPTS / script).read_text().splitlines() if line.endswith(" import main"))
    assert entry in installed.read_text().splitlines()


def test_taskprolog_imports_nothing_heavy(base, conf):
    from gpuperf.hookbase.hook import run_hook

    env = {**job_env(4301), "GPUPERF_CONFIG": os.environ["GPUPERF_CONFIG"]}
    assert run_hook("prolog", [("env", "gpuperf.prolog.envplan:step")], env=env) == 0  # caches the plan
    libs = base / "nccl-lib"  # a task whose LD_LIBRARY_PATH shows its NCCL, as after `module load nccl`
    libs.mkdir()
    (libs / "libnccl.so.2.21.5").write_bytes(b"")
    task = {**env, "SLURM_STEP_ID": "0", "SLURM_CPUS_PER_TASK": "8", "CUDA_VISIBLE_DEVICES": "0,1",
            "LD_LIBRARY_PATH": f"/nonexistent:{libs}", "PYTORCH_CUDA_ALLOC_CONF": "backend:native"}
    p, modules = run_entry("gpuperf-taskprolog", task, base / "modules")
    assert p.returncode == 0, p.stderr
    exported = dict(line[len("export "):].split("=", 1) for line in p.stdout.splitlines() if line.startswith("export "))
    assert exported["OMP_NUM_THREADS"] == "4" and "GPUPERF_ENV_SET" in exported
    assert "PYTORCH_CUDA_ALLOC_CONF" not in exported  # the user's own value wins
    step = json.loads((Path(conf.general.run_dir) / "jobs" / "4301" / "env" / "step-0.json").read_text())
    assert step["user_kept"] == ["PYTORCH_CUDA_ALLOC_CONF"]
    assert "gpuperf.prolog.envtask" in modules and "gpuperf.env.ncclver" in modules
    assert heavy_in(modules) == [], heavy_in(modules)
