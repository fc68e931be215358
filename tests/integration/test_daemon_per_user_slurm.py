"""Issue 36 on the Slurm test cluster, the node daemon as its unit runs it (``test_hostile_files_slurm.py``'s
``hostile`` set-up: the unit's ExecStart in a memory cgroup at its MemoryMax): what one job user can cost it.

- The user rewrites their finished job's ``env.json`` with a 900,000-character key and sends hostile
  ``taskenv`` requests on ``user.sock`` at the rate limit (the key's plan, a 5,000-digit
  ``SLURM_CPUS_PER_TASK``, a step id naming ``/../../``), 6 blocks of 10 s alternated with 10 s quiet,
  while root's prologs (the real ``prolog`` op on ``hook.sock``, as the compiled hook sends it) run at
  10/s. Root's log (``<cluster>/log/gpuperf.log``, every gpuperf process's) grows within 1 MiB over the
  60 s of flood, no line of it a traceback.
- A process of the user whose ``/proc/PID/environ`` never answers (a FIFO bind-mounted over it: a stand-in
  for a FUSE page the kernel waits on) while the user's job runs: sampling goes on, ``hook.sock`` and
  ``user.sock`` answer, and a job's prolog and epilog run through the daemon.

Timings are figures, not asserts: ``<cluster dir>/daemon_per_user_figures.json``, rendered by
``benchmarks/daemon_per_user.py --cluster`` into ``benchmarks/results/security_daemon_work.md``.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from cluster import host  # tests/ is on sys.path (its conftest.py)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_files_slurm import _as_uid, hostile  # noqa: E402,F401 - hostile: the module's set-up

pytestmark = pytest.mark.slurm

LOG_BOUND = 1 << 20
FIGURES: dict = {}


def _cfg(c):
    from gpuperf.files import config

    return config.load(str(c.gpuperf_config_path))


def _prolog(cfg, digest: str, job_id: int) -> float | None:
    """ms of one prolog op on hook.sock for a job of root's (another user than the flooding one); finalised after."""
    from gpuperf.daemon import hooksock

    env = {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root", "SLURM_JOB_GPUS": "0",
           "SLURMD_NODENAME": os.uname().nodename.split(".")[0], "SLURM_JOB_CPUS_PER_NODE": "1",
           "CUDA_VISIBLE_DEVICES": "0"}
    t = time.perf_counter()
    try:
        r = hooksock.call(cfg.daemon.socket_dir, "prolog", {"env": env, "config": {"source": cfg.source, "digest": digest}}, 2.0)
    except Exception:  # noqa: BLE001 - unanswered
        return None
    ms = 1000 * (time.perf_counter() - t)
    try:
        hooksock.call(cfg.daemon.socket_dir, "finalize", {"job_id": job_id}, 2.0)
    except Exception:  # noqa: BLE001
        pass
    return ms if r.get("done") else None


def _flood(cfg, digest: str, job: int, seconds: float, rate: float = 20.0) -> dict:
    """Run in a child as the user: hostile taskenv requests at ``rate`` for ``seconds``."""
    from gpuperf.daemon import usersock

    kinds = [{"SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "0"},
             {"SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "0", "SLURM_CPUS_PER_TASK": "9" * 5000},
             {"SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "/../../../../var/lib/gpuperf/daemon"}]
    out = {"sent": 0, "answered": 0, "done": 0, "refused": 0}
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        req = {"env": kinds[i % 3], "config": {"source": cfg.source, "digest": digest}, "cpus": 1, "pid": 4242}
        i += 1
        out["sent"] += 1
        try:
            r = usersock.call(cfg.daemon.user_socket_dir, "taskenv", req, 2.0)
            out["answered"] += 1
            out["done"] += bool(r.get("done"))
            out["refused"] += not r.get("ok") or not r.get("done")
        except Exception:  # noqa: BLE001 - counted as unanswered
            pass
        time.sleep(max(0.0, 1.0 / rate - 0.002))
    return out


def test_a_users_hostile_taskenv_at_the_rate_limit_costs_roots_log_at_most_1_mib(hostile):
    from gpuperf.files import config

    c = hostile.c
    cfg = _cfg(c)
    digest = config.digest(cfg)
    user = pwd.getpwnam(c.user)
    job = c.sbatch("#!/bin/bash\ntrue\n", "--gres=gpu:1", user=c.user)
    assert c.wait(job, timeout=120) == "COMPLETED", c.job_output(job)
    plan = c.run_dir / "jobs" / str(job) / "env.json"
    host.wait_for(plan.exists, 30, "the job's plan")
    # the user rewrites their own job's plan (finding 1): a skipped entry holding a 900,000-character key
    big = json.loads(plan.read_text())
    big["skipped"] = [{"name": "x", "reason": "r", "rule": "q", "k" * 900_000: 1}]
    _as_uid(user.pw_uid, user.pw_gid, lambda: plan.write_text(json.dumps(big)) and {})
    log = c.layout.log_dir / "gpuperf.log"
    fig = {"flood": [], "quiet": [], "unanswered": {"flood": 0, "quiet": 0}, "log_flood_bytes": 0,
           "log_quiet_bytes": 0, "requests": [], "log_flood_hostile_bytes": 0}
    n = 400000
    for b in range(12):
        phase = "flood" if b % 2 == 0 else "quiet"
        size0 = log.stat().st_size
        got: dict = {}
        th = threading.Thread(target=lambda: got.update(_as_uid(user.pw_uid, user.pw_gid,
                                                                lambda: _flood(cfg, digest, job, 10.0))))
        if phase == "flood":
            th.start()
        end = time.monotonic() + 10.0
        while time.monotonic() < end:
            n += 1
            ms = _prolog(cfg, digest, n)
            if ms is None:
                fig["unanswered"][phase] += 1
            else:
                fig[phase].append(ms)
            time.sleep(0.1)
        if phase == "flood":
            th.join(30)
            fig["requests"].append(got)
        grown = log.stat().st_size - size0
        fig[f"log_{phase}_bytes"] += grown
        with open(log, "rb") as fh:
            fh.seek(size0)
            text = fh.read()
        assert b"Traceback" not in text and b"kkkkkkkkkk" not in text
        if phase == "flood":
            fig["log_flood_hostile_bytes"] += sum(len(x) + 1 for x in text.splitlines()
                                                  if f"uid {user.pw_uid}".encode() in x or b"taskenv" in x)
    FIGURES["flood"] = fig
    (c.dir / "daemon_per_user_figures.json").write_text(json.dumps(FIGURES, indent=1))
    assert hostile.daemon.poll() is None, "the node daemon died"
    assert all(r.get("answered") == r.get("sent") and r.get("done") == 0 for r in fig["requests"]), fig["requests"]
    assert fig["log_flood_bytes"] <= LOG_BOUND, fig["log_flood_bytes"]   # before: 141 MiB in 10 s
    assert not fig["unanswered"]["flood"] and not fig["unanswered"]["quiet"], fig["unanswered"]


def test_a_process_whose_environ_read_blocks_leaves_sampling_hooks_and_the_user_socket_answering(hostile):
    from gpuperf.daemon import usersock
    from gpuperf.files import config

    c = hostile.c
    cfg = _cfg(c)
    digest = config.digest(cfg)
    user = pwd.getpwnam(c.user)
    fifo = Path(tempfile.mkdtemp(prefix="gpuperf-fifo-")) / "environ"
    os.mkfifo(fifo)
    sleeper = subprocess.Popen(["sleep", "300"], preexec_fn=lambda: (os.setgid(user.pw_gid), os.setuid(user.pw_uid)))
    target = f"/proc/{sleeper.pid}/environ"
    subprocess.run(["mount", "--bind", str(fifo), target], check=True)
    fig: dict = {"prolog_ms": [], "ping_ms": [], "prolog_unanswered": 0, "ping_unanswered": 0, "pid": sleeper.pid}
    try:
        # a job of the user runs meanwhile: the host scan reads every process's environment
        running = c.sbatch("#!/bin/bash\nsleep 25\n", "--gres=gpu:1", user=c.user)
        assert c.wait(running, states=("RUNNING",), timeout=90) == "RUNNING", c.job_output(running)
        before = usersock.call(cfg.daemon.user_socket_dir, "ping", None, 2.0)["sweeps"]
        end, n = time.monotonic() + 20.0, 500000
        while time.monotonic() < end:
            n += 1
            ms = _prolog(cfg, digest, n)
            if ms is None:
                fig["prolog_unanswered"] += 1
            else:
                fig["prolog_ms"].append(ms)
            t = time.perf_counter()
            try:
                after = usersock.call(cfg.daemon.user_socket_dir, "ping", None, 2.0)["sweeps"]
                fig["ping_ms"].append(1000 * (time.perf_counter() - t))
            except Exception:  # noqa: BLE001
                fig["ping_unanswered"] += 1
            time.sleep(0.2)
        fig["sweeps"] = after - before
        # a whole job of the user through Slurm's prolog and epilog, the daemon answering them
        done = c.sbatch("#!/bin/bash\ntrue\n", "--gres=gpu:1", user=c.user)
        assert c.wait(done, timeout=120) == "COMPLETED", c.job_output(done)
        fig["named"] = [ln for ln in (c.layout.log_dir / "gpuperf.log").read_text(errors="replace").splitlines()
                        if f"pid {sleeper.pid} " in ln and "did not answer" in ln]
        FIGURES["stuck"] = fig
        (c.dir / "daemon_per_user_figures.json").write_text(json.dumps(FIGURES, indent=1))
        assert fig["sweeps"] > 0 and not fig["prolog_unanswered"] and not fig["ping_unanswered"], fig
        assert len(fig["named"]) == 1, fig["named"]
        c.wait(running, timeout=60)
    finally:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))   # the hung read returns
        except OSError:
            pass
        subprocess.run(["umount", target], check=False)
        sleeper.kill()
        sleeper.wait()
        fifo.unlink()
        fifo.parent.rmdir()
