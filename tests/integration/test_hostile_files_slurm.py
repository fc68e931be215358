"""Issue 28 on the real test cluster: a user's hostile job name and job-dir files (findings 2, 3, 4)
leave the node daemon running, within its unit's memory, and every job delivered to the controller,
which writes each one's AdminComment.

The node daemon is the real one (replay backend) and sends its summaries to the real controller
service; the jobs run as the cluster's ordinary user. Figures (daemon peak RSS, the prolog's and
epilog's time and peak RSS per case) go to ``<cluster dir>/security_files_figures.json`` and
``benchmarks/results/security_files.md``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from cluster import host  # tests/ is on sys.path (its conftest.py)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_abuse_slurm import _vmhwm_kib  # noqa: E402
from test_daemon_slurm import _configure, _start  # noqa: E402
from test_report_slurm import _admin_comment, _collector, _queue_state  # noqa: E402

pytestmark = pytest.mark.slurm

UNIT_MEMORY_MAX_KIB = 256 * 1024   # packaging/gpuperf-daemon.service MemoryMax=256M
RSS_BOUND_KIB = 150 * 1024         # the abuse suite's bound for every root process


@pytest.fixture(scope="module")
def hostile(slurm_cluster):
    c = slurm_cluster
    cfg = _configure(c)
    cfg["controller"]["merge_wait_s"] = 15.0     # the daemon delivers after the epilog: wait for it
    # no cgroup here: the job's CPUs come from `scontrol show job -d`, the path a job name can reach
    cfg.setdefault("affinity", {})["cgroup_root"] = str(c.dir / "no-cgroup")
    c.write_gpuperf_config(cfg)
    with _collector(c):
        daemon = _start(c)
        figures: dict = {"daemon_vmhwm_kib_start": _vmhwm_kib(daemon.pid)}
        try:
            yield c, daemon, figures
        finally:
            figures["daemon_vmhwm_kib_end"] = _vmhwm_kib(daemon.pid) if daemon.poll() is None else None
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(10)
            (c.dir / "security_files_figures.json").write_text(json.dumps(figures, indent=1, sort_keys=True))
            c.reset_gpuperf_config()


def _case(h, name: str, script: str, *args: str, wait_s: float = 120) -> tuple[int, dict, dict]:
    """Run the user's job; check the daemon lives within its memory and the job is delivered; (job, summary, prolog)."""
    c, daemon, figures = h
    t0 = time.monotonic()
    job = c.sbatch(f"#!/bin/bash\nJ={c.run_dir}/jobs/$SLURM_JOB_ID\n{script}\n", "--gres=gpu:1", *args, user=c.user)
    assert c.wait(job, timeout=wait_s) == "COMPLETED", c.job_output(job)
    prolog = c.wait_record(job, "prolog")
    epilog = c.wait_record(job, "epilog", timeout=60)
    summary_path = c.run_dir / "jobs" / str(job) / "node_summary.json"
    host.wait_for(summary_path.exists, 60, f"job {job}'s node summary")
    assert daemon.poll() is None, "the node daemon died"
    hwm = _vmhwm_kib(daemon.pid)
    assert hwm < RSS_BOUND_KIB < UNIT_MEMORY_MAX_KIB, hwm
    assert not any("drain" in s or "down" in s for s in c.node_states().values())
    assert _queue_state(c, job, timeout=90) == "done"
    comment = _admin_comment(c, job)
    assert comment.startswith("gpuperf:v1 "), comment           # delivered: the controller wrote it
    figures[name] = {"job": job, "daemon_vmhwm_kib": hwm, "job_to_admincomment_s": round(time.monotonic() - t0, 1),
                     "prolog_s": prolog.get("elapsed_s"), "prolog_maxrss_kib": prolog.get("maxrss_kib"),
                     "epilog_s": epilog.get("elapsed_s"), "epilog_maxrss_kib": epilog.get("maxrss_kib"),
                     "admincomment_chars": len(comment)}
    return job, json.loads(summary_path.read_text()), prolog


def test_a_job_name_holding_scontrols_fields_costs_nothing_and_sets_no_cpus(hostile):
    c = hostile[0]
    node = c.node_names[0]
    # on the job's first line: Slurm's own detail line still decides (the job holds 1 CPU here)
    _, _, prolog = _case(hostile, "job-name-one-line", "srun -n1 true", f"--job-name=x Nodes={node} CPU_IDs=0-100000000 Mem=0 GRES=")
    aff = prolog["data"]["affinity"]
    assert aff["cpus_source"] == "scontrol" and aff["job_cpus"] in ("0", "0-1"), aff
    # a name and a comment with newlines and detail lines of their own: ambiguous, none believed
    fake = f"x\n     Nodes={node} CPU_IDs=0-15 Mem=0 GRES="
    _, _, prolog = _case(hostile, "job-name-newlines", "srun -n1 true", f"--job-name={fake}", f"--comment={fake}")
    assert prolog["data"]["affinity"]["cpus_source"] == "all", prolog["data"]["affinity"]


def test_a_cpus_record_of_a_hundred_million_cpus_fails_only_its_jobs_summary(hostile):
    c = hostile[0]
    job, s, _ = _case(hostile, "applied-cpus-bomb", 'srun -n1 true\n'
                      'echo "job=$SLURM_JOB_ID step=0 rank=0 status=ok gpus=0 numa=0 cpus=0-100000000" > $J/applied/0.0')
    q = s["quality"]
    assert q["partial"] and any("applied/0.0: cpus: CPU 100000000 above" in r for r in q["ignored"]), q
    # the next job of the node: delivered as ever
    _, s2, _ = _case(hostile, "next-job", "srun -n1 true")
    assert not s2["quality"].get("ignored")


def test_4096_step_records_of_64_kib_cost_the_daemon_its_budget(hostile):
    c = hostile[0]
    flood = ('srun -n1 true\nhead -c 65000 /dev/zero | tr "\\0" x > $J/env/.x\n'
             'for i in $(seq 0 4095); do printf \'{"step":"%d","exported":[["A","\' $i > $J/env/step-$i.json; '
             'cat $J/env/.x >> $J/env/step-$i.json; printf \'"]]}\' >> $J/env/step-$i.json; done\nrm $J/env/.x\n'
             'du -sh $J/env')
    job, s, _ = _case(hostile, "env-flood-4096x64k", flood, wait_s=300)
    assert "M" in c.job_output(job)                              # ~256 MB were written
    assert any("byte budget of env/" in r for r in s["quality"]["ignored"]), s["quality"]
    os.system(f"rm -rf {c.run_dir}/jobs/{job}/env")
