"""Reports of any length (issue 24): a job of one sample or a few seconds shows its figures, not empty
charts over a millisecond axis; numbers read as a person writes them (no '500µ %', no '0.00 GPU-hours')."""

from __future__ import annotations

import json
import re

from gpuperf.diagnosis import jobsummary as summary
from gpuperf.report import html, terminal, timechart, units
from report_fixtures import aggregates, context

T0 = 1763700000.0


def _series(seconds: list[float], tensor: float = 0.0005) -> dict:
    n = len(seconds)
    return {"n1:0": {"t": [T0 + x for x in seconds], "sm_active_pct": [40.0] * n, "tensor_active_pct": [tensor] * n,
                     "dram_active_pct": [0.0] * n, "power_w": [0.2] * n, "nvlink_tx_bps": [0.0] * n,
                     "nvlink_rx_bps": [0.0] * n}}


def _short_job() -> dict:
    s = summary.node_summary(aggregates(ngpus=1, seconds=4.0), context())
    s["gpus"][0]["tensor_active_pct"] = s["job"]["tensor_active_pct"] = 0.0005  # an idle tensor pipe's trace
    return s


def test_units_read_as_a_person_writes_them():
    assert [units.pct(x) for x in (0, 0.0005, 0.6, 1.4, 42.4, 99.6, 100, None)] == \
        ["0%", "<1%", "<1%", "1%", "42%", ">99%", "100%", "n/a"]
    assert [units.duration(x) for x in (0.5, 4, 42.2, 150, 7200, None)] == ["0.5 s", "4 s", "42 s", "2.5 min", "2.0 h", "n/a"]
    assert units.time_axis(5) == (1.0, "s") and units.time_axis(600) == (60.0, "min") and units.time_axis(9000) == (3600.0, "h")
    assert units.gpu_time(4 / 3600) == "4 GPU-seconds" and units.energy(0.0004) == "0 Wh"
    assert units.gpu_time(0.1 / 3600) == "<1 GPU-second"


def _layout(series: dict, cid: str):
    """The layout of one time chart as the page draws it."""
    _, title, unit, fields, scale = next(c for c in html.CHARTS if c[0] == cid)
    fig = html._time_figure(title, unit, series, fields, scale, 2000)
    assert fig is not None, cid
    return fig.layout


def test_one_sample_draws_no_empty_chart_and_says_so():
    page = html.render(_short_job(), _series([0.0]))
    assert "chart-sm" not in page and "chart-tensor" not in page
    assert "id='short-series'" in page and "1 sample per GPU" in page
    assert "id=\"chart-roofline\"" in page  # the figures still have their place


def test_a_few_seconds_read_in_seconds_on_a_zero_to_hundred_scale():
    series = _series([0.0, 1.0, 2.0, 3.0, 4.0])
    sm = _layout(series, "sm")
    assert sm.xaxis.type != "date" and sm.xaxis.title.text == "time since start (s)"
    assert list(sm.yaxis.range) == [0, 100]
    assert list(_layout(series, "tensor").yaxis.range) == [0, 100]  # 0.0005 % on 0-100, not ticks of 500µ
    assert list(_layout(series, "power").yaxis.range) == [0, 1.0]   # 0.2 W: from zero to at least one watt
    page = html.render(_short_job(), series)
    # x values are seconds since the start, not epoch milliseconds
    xs = json.loads(re.search(r'"x":(\[[^\]]*\])', page.split('id="chart-sm"')[1]).group(1))
    assert xs == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert "<td>&lt;1</td>" in page  # the idle tensor pipe in the GPU table
    assert "GPU-seconds" in page and "0.00 GPU-hours" not in page


def test_an_hour_long_job_keeps_the_wall_clock_axis():
    assert _layout(_series([0.0, 1800.0, 3600.0]), "sm").xaxis.type == "date"


def test_terminal_chart_of_one_sample_and_of_a_few_seconds():
    one = timechart.render(_series([0.0]), width=80)
    assert "too short for a chart" in one and "<1%" in one and "·" not in one
    few = timechart.render(_series([0.0, 1.0, 2.0, 3.0, 4.0]), width=80)
    assert "(4 s, " in few and "0.0 min" not in few
    sm = [ln for ln in few.splitlines() if ln.strip().startswith("GPU n1:0")][0]
    assert "·" not in sm  # five samples, five columns: no dots between them
    text = terminal.render(_short_job(), width=110)
    assert "<1%" in text and "GPU-seconds" in text and "500µ" not in text
