"""``gpuperf report`` and ``gpuperf jobs`` as commands: sources, JSON, and who may read what."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gpuperf.files import jobstate
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.commands import jobs as jobs_cmd
from gpuperf.controller import clusterstore
from report_fixtures import aggregates, context

try:
    from cluster.slurmcluster import TEST_USER, can_run, ensure_user
except ImportError:  # tests/ imported as a package
    from tests.cluster.slurmcluster import TEST_USER, can_run, ensure_user

GPUPERF = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf") + "/venv/bin/gpuperf"


@pytest.fixture
def site():
    """A config whose controller store holds three jobs of two users (ended 1 h, 2 d and 10 d ago)."""
    # not under pytest's tmp_path: its parents are private to root, and the job user must read the config
    tmp_path = Path(tempfile.mkdtemp(prefix="gpuperf-report-cli-"))
    tmp_path.chmod(0o755)
    conf = tmp_path / "gpuperf.toml"
    conf.write_text(f'[general]\nstate_dir = "{tmp_path}"\nrun_dir = "{tmp_path}/run"\nlog_file = ""\n'
                    f'slurm_bin_dir = "{tmp_path}/noslurm"\n[daemon]\nsocket_dir = "{tmp_path}/nodaemon"\n')
    conf.chmod(0o644)
    now = time.time()
    with clusterstore.ClusterStore(tmp_path / "cluster.sqlite") as st:
        for job_id, user, uid, ago, sm in ((11, "alice", 1000, 3600, 90.0), (12, "bob", 1001, 2 * 86400, 20.0),
                                           (13, "alice", 1000, 10 * 86400, 50.0)):
            a = aggregates(job_id=job_id, ngpus=2, sm_active_pct=sm)
            a["end"], a["start"] = now - ago, now - ago - 3600
            st.put_job(summary.node_summary(a, context(job_id=job_id, user=user, uid=uid)))
    yield tmp_path, dict(os.environ, GPUPERF_CONFIG=str(conf))
    shutil.rmtree(tmp_path, ignore_errors=True)


def _run(env, *args, user=None):
    argv = [GPUPERF, *map(str, args)]
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_parse_since():
    now = 1_000_000.0
    assert jobs_cmd.parse_since("7d", now) == now - 7 * 86400
    assert jobs_cmd.parse_since("12h", now) == now - 12 * 3600
    assert jobs_cmd.parse_since("2026-11-01") > 0
    with pytest.raises(ValueError, match="7d"):
        jobs_cmd.parse_since("last week", now)


def test_jobs_since_sort_and_user(site):
    _, env = site
    rows = json.loads(_run(env, "jobs", "--json").stdout)
    assert [r["job_id"] for r in rows] == [12, 11]                   # 10 days ago is outside 7d; most waste first
    rows = json.loads(_run(env, "jobs", "--since", "30d", "--user", "alice", "--json").stdout)
    assert [r["job_id"] for r in rows] == [13, 11]
    text = _run(env, "jobs", "--since", "30d", "--sort", "gpu-hours").stdout
    assert text.splitlines()[0].split()[:2] == ["JOBID", "USER"] and len(text.splitlines()) == 4
    bad = _run(env, "jobs", "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_report_from_the_controller_store_and_the_job_dir(site):
    tmp, env = site
    out = _run(env, "report", 11, "--json")
    assert out.returncode == 0, out.stderr
    with clusterstore.ClusterStore(tmp / "cluster.sqlite") as st:
        got = json.loads(out.stdout)
        # the job as users name it rides along (no Slurm here: the raw id is its name)
        assert got.pop("job_ref") == "11" and got == st.job(11)
    # gone from the controller store, still on the node (the epilog's node_summary.json)
    s = summary.node_summary(aggregates(job_id=77), context(job_id=77))
    jobstate.write_json(jobstate.job_dir(str(tmp / "run"), 77) / "node_summary.json", s)
    out = _run(env, "report", 77)
    assert out.returncode == 0 and "Job 77" in out.stdout and "node job dir" in out.stdout
    missing = _run(env, "report", 99)
    assert missing.returncode == 1 and "no summary for job 99" in missing.stderr


def test_users_read_only_their_own_jobs(site):
    why = can_run()
    if why:
        pytest.skip(why)
    tmp, env = site
    ensure_user()
    # an ordinary user cannot open the private controller store: no summary there for them
    denied = _run(env, "report", 11, "--source", "controller", user=TEST_USER)
    assert denied.returncode == 1 and "no summary" in denied.stderr
    # a summary the user could read (an older node's 0644 file) of someone else's job: refused by uid
    s = summary.node_summary(aggregates(job_id=78), context(job_id=78, uid=0, user="root"))
    jobstate.write_json(jobstate.job_dir(str(tmp / "run"), 78) / "node_summary.json", s, mode=0o644)
    other = _run(env, "report", 78, user=TEST_USER)
    assert other.returncode == 1 and "not yours" in other.stderr
    listing = _run(env, "jobs", "--user", "alice", user=TEST_USER)
    assert listing.returncode == 1 and "only admins" in listing.stderr


def test_a_store_of_the_first_layout_is_migrated(tmp_path):
    import sqlite3
    import zlib

    s = summary.node_summary(aggregates(job_id=5), context(job_id=5))
    db = sqlite3.connect(tmp_path / "old.sqlite")
    db.execute("CREATE TABLE jobs (job_id INTEGER PRIMARY KEY, user TEXT, uid INTEGER, start REAL, end REAL, nodes TEXT,"
               " gpus INTEGER, gpu_hours REAL, wasted_gpu_hours REAL, energy_j REAL, class TEXT, imbalanced INTEGER,"
               " partial INTEGER, stored REAL NOT NULL, summary BLOB NOT NULL)")
    db.execute("INSERT INTO jobs VALUES (5,'alice',1000,0,10,'n1',8,1.0,0.5,1.0,'compute_bound',0,0,0,?)",
               (zlib.compress(json.dumps(s).encode()),))
    db.commit()
    db.close()
    with clusterstore.ClusterStore(tmp_path / "old.sqlite") as st:
        assert st.job(5) == s and [r["job_id"] for r in st.jobs()] == [5]
        st.put_job(summary.node_summary(aggregates(job_id=6), context(job_id=6)))
        assert {r["job_id"] for r in st.jobs()} == {5, 6}
