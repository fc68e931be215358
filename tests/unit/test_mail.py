"""gpuperf-mail (Slurm's MailProg): gpuperf's lines are added to end-of-job mails; anything else, or
any failure of gpuperf's own, reaches the real mail program exactly as Slurm wrote it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuperf.diagnosis import jobsummary as summary
from gpuperf.report import mailtext, units
from gpuperf.wrappers import mail
from report_fixtures import aggregates, context

ROOT = Path(__file__).resolve().parents[2]


def _summary(job_id=11, **means):
    return summary.node_summary(aggregates(job_id=job_id, ngpus=2, seconds=3600.0, **means), context(job_id=job_id))


def test_one_job_gets_its_headline_top_recommendation_and_the_command():
    s = _summary()
    text = mailtext.body([("8_3", s)])
    assert "Job 8_3: " in text and f"{s['job']['gpu_count']} GPUs" in text
    assert f"{s['job']['gpu_hours']:.2f} GPU-hours" in text and "gpuperf report 8_3" in text
    assert units.gpu_time(3 / 3600) == "3 GPU-seconds" and units.gpu_time(0.25) == "15.0 GPU-minutes"
    assert units.energy(0.004) == "4 Wh" and units.energy(1.5) == "1.50 kWh"
    recs = s["diagnosis"]["recommendations"]
    assert recs and f"Top recommendation: {recs[0]}" in text


def test_an_array_summary_lists_the_most_wasteful_tasks_first_and_counts_the_rest():
    found = [(f"8_{i}", _summary(job_id=100 + i, sm_active_pct=5.0 + i)) for i in range(12)]
    for i, (_, s) in enumerate(found):
        s["job"]["wasted_gpu_hours"] = float(i)
    text = mailtext.body(found, missing=1)
    lines = [ln for ln in text.splitlines() if ln.startswith("Job ")]
    assert len(lines) == mailtext.MAX_TASKS and lines[0].startswith("Job 8_11:")
    assert "... and 3 more task(s): gpuperf jobs 8" in text


SINK = """#!/bin/sh
{ printf 'ARGS:'; for a in "$@"; do printf ' [%s]' "$a"; done; echo; cat; } > "$SINK_OUT"
"""


@pytest.fixture
def sink(tmp_path):
    prog = tmp_path / "sink.sh"
    prog.write_text(SINK)
    prog.chmod(0o755)
    conf = tmp_path / "gpuperf.toml"
    conf.write_text(f'[general]\nstate_dir = "{tmp_path}"\nrun_dir = "{tmp_path}/run"\nlog_file = ""\n'
                    f'slurm_bin_dir = "{tmp_path}/noslurm"\n[daemon]\nsocket_dir = "{tmp_path}/nodaemon"\n'
                    f'[report]\nmail_program = "{prog}"\nmail_wait_s = 2.0\n')
    return tmp_path, conf


def _mail(tmp_path, conf, mail_type, body=b"slurm's body\n", **env):
    out = tmp_path / "got.txt"
    e = dict(os.environ, GPUPERF_CONFIG=str(conf), SINK_OUT=str(out), SLURM_JOB_ID="11",
             SLURM_JOB_MAIL_TYPE=mail_type, PYTHONPATH=str(ROOT), **env)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "gpuperf.wrappers.mail", "-s", "Slurm Job_id=11 Name=x Ended", "alice"],
                       input=body, env=e, capture_output=True, timeout=60)
    return p, out.read_bytes(), time.monotonic() - t0


def test_a_mail_that_is_not_a_job_end_goes_untouched_at_once(sink):
    p, got, took = _mail(*sink, "Began")
    assert p.returncode == 0 and got == b"ARGS: [-s] [Slurm Job_id=11 Name=x Ended] [alice]\nslurm's body\n"
    assert took < 5


def test_with_nothing_from_gpuperf_the_end_mail_goes_untouched_within_the_bound(sink):
    # no Slurm, no store: gpuperf has nothing, the mail is Slurm's own
    p, got, took = _mail(*sink, "Ended", body=b"")
    assert p.returncode == 0 and got == b"ARGS: [-s] [Slurm Job_id=11 Name=x Ended] [alice]\n", p.stderr
    assert took < 2.0 + mail.ALARM_MARGIN_S


def test_a_hanging_slurm_costs_the_mail_a_bounded_delay_not_the_mail(sink):
    tmp_path, conf = sink
    shim = tmp_path / "noslurm"
    shim.mkdir()
    for tool in ("sacct", "squeue"):
        (shim / tool).write_text("#!/bin/sh\nsleep 100\n")
        (shim / tool).chmod(0o755)
    p, got, took = _mail(tmp_path, conf, "Ended")
    assert p.returncode == 0 and got == b"ARGS: [-s] [Slurm Job_id=11 Name=x Ended] [alice]\nslurm's body\n"
    assert took < 2.0 + mail.ALARM_MARGIN_S + 2  # report.mail_wait_s + the alarm's margin
