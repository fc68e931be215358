"""AdminComment shared with jobstats on the real test cluster: a ``JS1:`` blob written before gpuperf's
(while the job runs) and after it (as jobstats' EpilogSlurmctld does, with sacctmgr, overwriting the
field) is kept beside gpuperf's part, and ``gpuperf report`` / ``gpuperf jobs`` read gpuperf's part.
Fixtures: tests/data/jobstats (jobstats' public encoder format). Run with ``GPUPERF_TEST_CLUSTER=coexist``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpuperf.diagnosis import jobsummary as summary
from gpuperf.model import acshare, admincomment
from test_report_slurm import _admin_comment, _collector, _node_summary, _queue_state, _send, _wait_running

pytestmark = pytest.mark.slurm

JS1 = (Path(__file__).resolve().parents[1] / "data" / "jobstats" / "js1_2node_unpadded.txt").read_text().strip()
RECHECK_S = 15.0


def _recheck(c, seconds: float) -> None:
    cfg = c.gpuperf_config()
    cfg.setdefault("controller", {})["admin_comment_recheck_s"] = seconds
    c.write_gpuperf_config(cfg)


def _jobstats_write(c, job: int) -> None:
    """What jobstats' slurm/slurmctldepilog.sh runs once the job ended: the value unquoted, over the field."""
    c.run("sacctmgr", "-i", "update", "job", "where", f"jobid={job}", "set", f"AdminComment={JS1}", check=True)


def _wait_field(c, job: int, pred, timeout: float = 30) -> str:
    end = time.time() + timeout
    text = ""
    while time.time() < end:
        text = _admin_comment(c, job)
        if pred(text):
            return text
        time.sleep(0.3)
    raise AssertionError(f"job {job}: AdminComment never as expected: {text[:200]!r}")


def _both(text: str, merged: dict) -> None:
    """Theirs first and whole (as the release stores it: 22.05 lowercases), gpuperf's part decoding."""
    assert acshare.same(acshare.split(text).theirs, JS1), text[:200]
    assert text.lower().startswith("js1:") and admincomment.decode(text) == merged


def test_js1_written_before_and_after_gpuperfs_part_keeps_both(slurm_cluster):
    c = slurm_cluster
    node = c.node_names[0]
    _recheck(c, RECHECK_S)
    try:
        with _collector(c):
            before = c.sbatch("sleep 3\n", "--gres=gpu:1")
            after = c.sbatch("sleep 3\n", "--gres=gpu:1")
            sums = {}
            for job in (before, after):
                _wait_running(c, job)
                sums[job] = _node_summary(job, node)
                sent = _send(c, node, sums[job])
                assert sent.returncode == 0, sent.stdout + sent.stderr
            # before: another tool's text in the field while the job runs (scontrol takes it then)
            c.run("scontrol", "update", f"JobId={before}", f"AdminComment={JS1}", check=True)
            assert c.wait(before) == "COMPLETED" and c.wait(after) == "COMPLETED"
            # after: gpuperf wrote first; jobstats' end-of-job write then replaces the whole field
            _wait_field(c, after, lambda t: admincomment.is_admincomment(t))
            _jobstats_write(c, after)
            assert not admincomment.is_admincomment(_admin_comment(c, after))
            assert _queue_state(c, before, timeout=90) == "done" and _queue_state(c, after, timeout=90) == "done"
    finally:
        c.reset_gpuperf_config()
    for job in (before, after):
        _both(_admin_comment(c, job), summary.merge([sums[job]], [node]))
    for job in (before, after):
        rep = json.loads(c.run("gpuperf", "report", job, "--source", "sacct", "--json", check=True).stdout)
        assert rep.pop("job_ref") == str(job) and rep == admincomment.decode(_admin_comment(c, job))
        rows = json.loads(c.run("gpuperf", "jobs", str(job), "--source", "sacct", "--json", check=True).stdout)
        assert [r["job_id"] for r in rows] == [job], rows
