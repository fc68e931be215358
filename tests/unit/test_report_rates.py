"""Every renderer says the job's rates the same way: the rate while it worked and the job's average, each with
what it covers, the kind of math and that kind's peak and error (issue 35, item 3)."""

from __future__ import annotations

import os

from gpuperf.diagnosis import jobsummary
from gpuperf.report import fromrecording, html, mailtext, rates, terminal

REC = os.path.join(os.path.dirname(__file__), "..", "data", "recordings", "zoo",
                   "zoo_app_cupy_nbody_fp32-h100-80gb-hbm3.jsonl.gz")


def _summary() -> dict:
    aggs, series = fromrecording.replay_job(REC, with_series=True)
    return jobsummary.node_summary(aggs, {"job_id": 1, "user": "u", "uid": 1000, "series": series})


def test_an_fp32_job_reads_its_working_rate_against_the_fp32_peak_with_the_job_average_beside_it():
    s = _summary()
    roof = s["diagnosis"]["roofline"]
    assert roof["kind"] == "fp32" and isinstance(roof.get("job_average"), dict)
    got = rates.lines(s)
    assert len(got) == 2, got
    work, avg = got
    assert work.startswith("While working:") and "FP32 non-tensor" in work and "(of 67 peak)" in work, work
    assert f"{roof['tflops']:.0f} TFLOP/s" in work and "±25%" in work and "working phases" in work, work
    assert "990" not in work, "an FP32 rate must not be set against the bf16 tensor peak"
    assert avg.startswith("Job average:") and f"{roof['job_average']['rate']:.0f} TFLOP/s" in avg, avg
    assert "start-up and idle" in avg


def test_a_job_whose_work_covers_it_whole_has_one_rate():
    s = _summary()
    s["diagnosis"]["roofline"].pop("job_average")
    s["diagnosis"]["roofline"]["covers"] = "the whole job"
    assert [x.split(":")[0] for x in rates.lines(s)] == ["While working"]
    assert rates.lines({"estimates": {"model": None, "note": "no GPUs"}}) == []


def test_terminal_html_and_mail_show_the_same_rate_lines():
    s = _summary()
    want = rates.lines(s)
    text = " ".join(terminal.render(s, None).split())
    page = html.render(s)
    mail = mailtext.job_lines("1", s)
    for line in want:
        assert " ".join(line.split()) in text, (line, text[-800:])
        assert html._e(line) in page
        assert line in mail, mail
