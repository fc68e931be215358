"""A job's files on a node are private: after a real job of an ordinary user, with the node daemon
delivering it, no other user can read anything gpuperf left in ``run_dir`` or ``state_dir``; the job's
own user reads its affinity plan (its tasks pin from it) and its report through gpuperf's own paths.

"Another user" is a uid with no account (root setuids to it in a child, which then tries to open every
file and list every directory): what the kernel lets it read is what counts, ACLs and all.
"""

from __future__ import annotations

import json
import pwd
import signal
import sys
from pathlib import Path

import pytest

from cluster import host  # tests/ is on sys.path (its conftest.py)

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_daemon_slurm import _configure, _start  # noqa: E402
from test_security_files import OTHER_UID, readable_as  # noqa: E402

pytestmark = pytest.mark.slurm

# what another user may list (names only, never a file's content), each with why
LISTABLE = {
    "jobs": "job ids of the node (as squeue shows them to everyone)",
    "daemon-user": "the user socket's directory (0755): every user may connect, SO_PEERCRED decides",
}


@pytest.fixture(scope="module")
def job(slurm_cluster):
    c = slurm_cluster
    _configure(c)
    daemon = _start(c)
    try:
        j = c.sbatch("#!/bin/bash\nsrun -n1 true\nsleep 1\n", "--gres=gpu:1", user=c.user)
        assert c.wait(j) == "COMPLETED", c.job_output(j)
        c.wait_record(j, "epilog")
        jdir = c.run_dir / "jobs" / str(j)
        host.wait_for((jdir / "node_summary.json").exists, 15, f"job {j}'s node summary")
        yield c, j, jdir
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(10)
        c.reset_gpuperf_config()


def _state_dir(c) -> Path:
    return Path(c.node_config(c.node_names[0])["general"]["state_dir"])


def test_no_other_user_reads_anything_gpuperf_left_after_a_job(job):
    c, j, jdir = job
    names = {p.name for p in jdir.iterdir()}
    assert {"affinity.plan", "node_summary.json", "aggregates.json", "prolog.json", "epilog.json"} <= names, names
    for top in (c.run_dir, _state_dir(c)):
        # other jobs' dirs may be older tests' (before this code): this job's, and everything not a job's
        got = [p for p in readable_as(OTHER_UID, top) if not p.startswith("jobs/") or p.split("/")[1] == str(j)]
        leaked = [p for p in got if not (Path(top, p).is_dir() and (Path(p).name in LISTABLE or Path(p).parent.name == "jobs"))]
        assert leaked == [], (top, leaked)


def test_the_jobs_own_user_reads_its_plan_and_its_report_through_gpuperf(job):
    c, j, jdir = job
    uid = pwd.getpwnam(c.user).pw_uid
    mine = readable_as(uid, jdir)
    assert "affinity.plan" in mine and "node_summary.json" not in mine and "prolog.json" not in mine, mine
    # the job's tasks applied the plan (the SPANK plugin or gpuperf-run read it as the user)
    rec = json.loads((jdir / "node_summary.json").read_text())
    assert "n1" in str(rec.get("nodes")) or rec.get("nodes")
    r = c.run("gpuperf", "report", "--json", str(j), user=c.user)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["job_id"] == j
