"""Rendering: the terminal report, and the HTML page as headless Chromium shows it (no network)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuperf.diagnosis import jobsummary as summary
from gpuperf.report import html, terminal
from report_fixtures import aggregates, context

CHARTS = ("chart-sm", "chart-tensor", "chart-dram", "chart-power", "chart-nvlink", "chart-roofline")


def _job(ngpus: int = 4, **means) -> dict:
    return summary.node_summary(aggregates(ngpus=ngpus, **means), context())


def _series(ngpus: int = 4, points: int = 5000) -> dict:
    t0 = 1763700000.0
    out = {}
    for g in range(ngpus):
        t = [t0 + 60.0 * i for i in range(points)]
        out[str(g)] = {"t": t, "sm_active_pct": [50 + 40 * ((i // 100) % 2) for i in range(points)],
                       "tensor_active_pct": [30.0 + g] * points, "dram_active_pct": [20.0] * points,
                       "power_w": [400.0 + g * 10] * points, "nvlink_tx_bps": [1e9] * points, "nvlink_rx_bps": [2e9] * points}
    return out


# -- terminal -------------------------------------------------------------------------------------

def test_terminal_report_has_a_bar_row_per_gpu_and_the_diagnosis():
    s = _job(ngpus=4, util_gpu_pct=100.0, sm_active_pct=12.0, tensor_active_pct=1.0, dram_active_pct=4.0,
             nvlink_tx_bps=0.0, nvlink_rx_bps=0.0)
    out = terminal.render(s, width=120)
    assert "UNDERFILLED" in out
    rows = [l for l in out.splitlines() if re.match(r"^│\s*\d+\s*│", l)]
    assert len(rows) == 4 and all("█" in r or "░" in r for r in rows)
    for i, rec in enumerate(s["diagnosis"]["recommendations"], 1):
        assert f"{i}. {rec[:40]}" in out.replace("\n", " ") or rec[:30] in out
    assert "SM active 12%" in out and "difference" in out


def test_terminal_report_says_partial_and_names_missing_nodes():
    m = summary.merge([_job()], ["n1", "n9"])
    out = terminal.render(m, width=120)
    assert "PARTIAL" in out and "n9" in out


def test_terminal_report_of_a_summary_without_gpus_still_renders():
    out = terminal.render(summary.merge([], ["n1"]), width=100)
    assert "PARTIAL" in out and "no summary from n1" in out


# -- HTML -----------------------------------------------------------------------------------------

def test_html_is_self_contained_and_downsampled():
    page = html.render(_job(), _series(points=5000), max_points=500)
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\s*['\"]?https?:", page)
    assert page.count("Plotly.newPlot") == len(CHARTS)
    # every trace downsampled: 500 x values per GPU line instead of 5000
    first = re.search(r'"x":\[([^\]]*)\]', page.split('id="chart-sm"')[1]).group(1)
    assert first.count(",") + 1 == 500


def test_html_without_series_has_roofline_and_says_why_no_charts():
    page = html.render(_job(), None)
    assert "id=\"chart-roofline\"" in page and "no-series" in page and "chart-sm" not in page


def test_downsample_averages_buckets_and_skips_none():
    t, (y,) = html.downsample([0, 1, 2, 3], [[1.0, None, 3.0, 5.0]], 2)
    assert t == [0.5, 2.5] and y == [1.0, 4.0]


def _chromium() -> str | None:
    exe = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if exe or os.geteuid() != 0 or not shutil.which("apt-get"):
        return exe
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],):
        p = subprocess.run(cmd, capture_output=True, env=env, timeout=900)
        if p.returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=300)
            subprocess.run(cmd, capture_output=True, env=env, timeout=900)
    return shutil.which("chromium")


@pytest.fixture(scope="module")
def chromium():
    exe = _chromium()
    if not exe:
        pytest.skip("Debian's chromium is not installed and could not be installed with apt-get")
    return exe


def _run_chromium(exe: str, tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
            # every host name resolves to nothing: a page that needed the network would show no charts
            "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=10000", *extra, url]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_html_renders_every_chart_in_headless_chromium(chromium, tmp_path):
    s = _job(ngpus=4)
    page = tmp_path / "report.html"
    page.write_text(html.render(s, _series()))
    p = _run_chromium(chromium, tmp_path, page.as_uri(), "--dump-dom")
    dom = p.stdout
    assert "</html>" in dom, p.stderr[-2000:]
    for cid in CHARTS:
        part = dom.split(f'id="{cid}"', 1)
        assert len(part) == 2, f"{cid} missing"
        chart = part[1].split('class="chart"', 1)[0]
        # plotly drew it: an SVG with a plot area and at least one trace
        assert 'class="main-svg"' in chart, f"{cid} not rendered"
        assert re.search(r'class="trace scatter', chart), f"{cid} has no trace"
    sm = dom.split('id="chart-sm"', 1)[1].split('class="chart"', 1)[0]
    assert len(re.findall(r'class="trace scatter', sm)) == 4     # one line per GPU
    assert s["diagnosis"]["class"].replace("_", "-") in dom
    shot = tmp_path / "report.png"
    _run_chromium(chromium, tmp_path, page.as_uri(), "--window-size=1280,2600", f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 20000
    keep = os.environ.get("GPUPERF_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_terminal_chart_takes_the_node_daemons_short_labels_and_lines_them_up():
    from gpuperf.report import timechart

    # the node's daemon names its GPUs "0", "1" (no node): the chart once raised on such short labels
    data = {g: {"t": [0.0, 10.0, 20.0], "sm_active_pct": [0.0, 50.0, 100.0]} for g in ("0", "1", "10")}
    rows = [ln for ln in timechart.render(data, width=60).splitlines() if ln.strip().startswith("GPU ")]
    assert len(rows) == 3
    assert len({ln.index(" mean ") for ln in rows}) == 1, rows  # every GPU's columns line up
