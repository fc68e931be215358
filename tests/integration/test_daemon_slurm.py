"""The node daemon with the real Slurm test cluster: the cluster's prolog registers each job and its
epilog finalises it; with the daemon down, jobs still complete and the daemon finalises them later.

The daemon replays a recording from ``tests/data/recordings/`` (made with ``nvml`` on real GPUs) when
one is there; otherwise it runs the unit tests' scripted sampler (same daemon, same sockets).
Run with ``GPUPERF_TEST_CLUSTER=daemon`` beside other engineers' clusters.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
_REC_DIR = ROOT / "tests" / "data" / "recordings"
RECORDINGS = sorted(_REC_DIR.glob("matmul*.jsonl*")) + sorted(_REC_DIR.glob("*.jsonl*"))

SCRIPTED = r"""
import signal, sys
sys.path.insert(0, sys.argv[1])
from test_daemon import ScriptSampler
from gpuperf.files import config, log
from gpuperf.daemon.server import Daemon
cfg = config.load()
log.setup("daemon", cfg.general.log_file, "info", stderr=True)
d = Daemon(cfg, ScriptSampler(n=4, power_w=180.0), health_fn=None, metrics=False, send_summaries=False)
signal.signal(signal.SIGTERM, lambda *a: d.stop())
d.run()
"""


def _configure(c) -> dict:
    cfg = c.gpuperf_config()
    d = cfg.setdefault("daemon", {})
    d.update(user_socket_dir=str(c.dir / "run" / "daemon-user"), metrics_port=0, interval_s=0.2,
             request_timeout_s=1.0, checkpoint_s=1.0)
    # no collector runs here: the slurmctld epilog need not wait for node summaries
    cfg.setdefault("controller", {})["merge_wait_s"] = 1.0
    if RECORDINGS:
        # 4 GPUs (the node's gres) at 5x speed: a sweep every 0.2 s
        d["backend"] = f"replay:{RECORDINGS[0]}?loop=1&gpus=4&speed=5"
    c.write_gpuperf_config(cfg)
    return cfg


def _start(c) -> subprocess.Popen:
    if RECORDINGS:
        cmd = [os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf") + "/venv/bin/gpuperf", "daemon", "--foreground"]
    else:
        script = c.dir / "scripted_daemon.py"
        script.write_text(SCRIPTED)
        cmd = [sys.executable, str(script), str(ROOT / "tests" / "unit")]
    p = subprocess.Popen(cmd, env=c.env, stderr=subprocess.PIPE, text=True)
    from gpuperf.files import config
    from gpuperf.daemon import client

    cfg = config.load(str(c.gpuperf_config_path))
    # the real daemon's first health checks run in the background after it answers pings: until they are done
    # it turns prologs away ("no health result in the daemon yet"), so wait for them there
    op = "health" if RECORDINGS else "ping"
    end = time.time() + 20
    while time.time() < end:
        assert p.poll() is None, f"daemon exited: {p.stderr.read()}"
        try:
            if client.call(cfg, op, timeout_s=0.5)["ok"]:
                return p
        except client.DaemonUnavailable:
            pass
        time.sleep(0.1)
    p.kill()
    raise AssertionError(f"daemon did not answer {op}")


@pytest.fixture
def daemon_cluster(gpuperf_config_reset):
    c = gpuperf_config_reset
    _configure(c)
    yield c


def _aggregates(c, job) -> dict:
    path = c.run_dir / "jobs" / str(job) / "aggregates.json"
    end = time.time() + 15
    while time.time() < end and not path.exists():
        time.sleep(0.1)
    return json.loads(path.read_text())


def test_prolog_registers_and_epilog_finalises(daemon_cluster):
    c = daemon_cluster
    p = _start(c)
    try:
        job = c.sbatch("sleep 3\n", "--gres=gpu:2", user=c.user)
        assert c.wait(job) == "COMPLETED"
        prolog = c.job_record(job, "prolog")
        assert prolog["data"]["register"]["ok"] is True, prolog
        if RECORDINGS:
            # the real daemon has a fresh health result: it ran the prolog's steps (the fast path)
            assert prolog["data"].get("via") == "daemon", prolog["data"].get("fast_path")
            assert prolog["data"]["health"]["source"] == "daemon" and prolog["data"]["health"]["status"] in ("ok", "warn")
            assert all(st["ok"] for st in prolog["steps"].values()), prolog["steps"]
            jdir = c.run_dir / "jobs" / str(job)
            env_cache = jdir / "env.json"
            assert env_cache.stat().st_uid == pwd.getpwnam(c.user).pw_uid
            assert json.loads(env_cache.read_text())["job_id"] == job
            assert f"job={job} " in (jdir / "affinity.plan").read_text()
        epilog = c.wait_record(job, "epilog")
        assert epilog["data"]["finalize"]["ok"] is True, epilog
        a = _aggregates(c, job)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    gpus = prolog["context"]["gpus"]
    assert sorted(a["gpus"]) == sorted(str(g) for g in gpus) and len(gpus) == 2
    assert a["job_id"] == job and a["partial"] is False and a["gaps"] == []
    # about 3 s of the job at 0.2 s per sweep
    assert all(g["samples"] >= 5 for g in a["gpus"].values())
    assert all(g["metrics"]["power_w"]["mean"] > 0 and g["metrics"]["mem_used_mib"]["max"] > 0 for g in a["gpus"].values())
    assert 2.5 <= a["end"] - a["start"] <= 30
    assert a["host"]["cpus_allocated"] is not None


def test_epilog_with_daemon_down_then_daemon_finalises(daemon_cluster):
    c = daemon_cluster
    p = _start(c)
    p.send_signal(signal.SIGKILL)          # down hard: the stale socket stays, hooks must time out
    p.wait()
    t0 = time.time()
    job = c.sbatch("sleep 1\n", "--gres=gpu:1")
    assert c.wait(job) == "COMPLETED"
    assert time.time() - t0 < 30
    prolog = c.job_record(job, "prolog")
    epilog = c.wait_record(job, "epilog")
    assert prolog["data"]["register"]["ok"] is False and prolog["data"]["register"]["pending"]
    assert epilog["data"]["finalize"]["ok"] is False and epilog["data"]["finalize"]["pending"]
    # each hook waited at most its request timeout for the daemon
    assert prolog["steps"]["register"]["ms"] < 1000 * 1.0 + 500
    assert epilog["steps"]["finalize"]["ms"] < 1000 * 1.0 + 500
    p = _start(c)
    try:
        a = _aggregates(c, job)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    assert a["job_id"] == job and a["partial"] is True
    # the end is the epilog's time, not the daemon's late finalisation
    assert abs(a["end"] - epilog["started"]) < 5
    assert not list((Path(c.gpuperf_config()["general"]["state_dir"]) / "pending").glob(f"*-{job}.json"))


def test_user_sees_only_own_jobs_in_top(daemon_cluster):
    c = daemon_cluster
    p = _start(c)
    jobs = []
    try:
        mine = c.sbatch("sleep 30\n", "--gres=gpu:1", user=c.user)
        root_job = c.sbatch("sleep 30\n", "--gres=gpu:1")
        jobs = [mine, root_job]
        end = time.time() + 20
        while time.time() < end:
            recs = [c.job_record(j, "prolog") for j in jobs]
            if all(r and r.get("data", {}).get("register", {}).get("ok") for r in recs):
                break
            time.sleep(0.2)
        time.sleep(0.5)
        as_user = c.run("gpuperf", "top", "--json", user=c.user)
        as_root = c.run("gpuperf", "top", "--json")
    finally:
        for j in jobs:
            c.run("scancel", j)
        for j in jobs:
            c.wait(j)
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    assert as_user.returncode == 0, as_user.stdout + as_user.stderr
    user_view, root_view = json.loads(as_user.stdout), json.loads(as_root.stdout)
    assert [j["job_id"] for j in user_view["jobs"]] == [mine]
    assert sorted(j["job_id"] for j in root_view["jobs"]) == sorted(jobs)
    my_gpus = user_view["jobs"][0]["gpus"]
    assert [g["gpu"] for g in user_view["gpus"]] == my_gpus and len(root_view["gpus"]) == 4


BURSTS, BURST_CPU_S = 8, 0.3  # short steps, each far shorter than the daemon's host scan interval
# each step burns BURST_CPU_S of its own CPU clock: a loaded machine stretches the wall time, not the CPU
BURST = f"srun -n1 python3 -c 'import time\nwhile time.process_time() < {BURST_CPU_S}: pass'\n"


def test_job_cpu_time_from_the_job_cgroup(daemon_cluster):
    """Steps that start and end between two process scans: only the job's cgroup counter sees them."""
    c = daemon_cluster
    if not c.layout.cgroup:
        pytest.skip("Slurm's cgroup plugins are not used on this instance (multi-node or no cgroup v1)")
    cfg = c.gpuperf_config()
    cfg["daemon"]["host_interval_s"] = 5.0
    c.write_gpuperf_config(cfg)
    p = _start(c)
    try:
        # the trailing sleep lets a scan see the batch shell, which is how the job's cgroup is found
        job = c.sbatch(BURST * BURSTS + "sleep 6\n", "--gres=gpu:1", user=c.user)
        assert c.wait(job) == "COMPLETED"
        a = _aggregates(c, job)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    host = a["host"]
    assert host["cpu_source"] == "cgroup", host
    busy = BURSTS * BURST_CPU_S
    # the bursts' CPU plus the steps' start-up (interpreters, srun) that the cgroup also counts
    assert 0.95 * busy <= host["cpu_time_s"] <= busy + 2.5, host
    # a scan every 5 s caught at most a couple of the short steps while they ran
    assert host["cpu_time_s"] - host["cpu_time_procs_s"] >= 1.0, host
