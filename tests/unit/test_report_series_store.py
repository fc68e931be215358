"""``gpuperf report`` on the controller for a job that ran on another node: time series from the store.

The node is not reachable (no daemon socket, no job dir): the charts come from the series the node
sent with its summary. The page is opened in headless Chromium where it is installed (Debian's
``chromium``), and plotly must have drawn the charts; the terminal chart is checked as text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gpuperf.model import series
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.controller import clusterstore, merge
from report_fixtures import aggregates, context

GPUPERF = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf") + "/venv/bin/gpuperf"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def controller():
    """A controller's config and store holding job 21, run on node far1 (8 GPUs, 600 s of series)."""
    tmp = Path(tempfile.mkdtemp(prefix="gpuperf-series-store-"))
    conf = tmp / "gpuperf.toml"
    conf.write_text(f'[general]\nstate_dir = "{tmp}"\nrun_dir = "{tmp}/run"\nlog_file = ""\n'
                    f'slurm_bin_dir = "{tmp}/noslurm"\n[daemon]\nsocket_dir = "{tmp}/nodaemon"\n')
    end = time.time() - 3600
    a = aggregates(job_id=21, node="far1", ngpus=8)
    a["start"], a["end"] = end - 600, end
    ns = summary.node_summary(a, context(job_id=21, node="far1"))
    t = [end - 600 + i for i in range(600)]
    daemon = {str(g): {"t": t, "sm_active_pct": [float(50 + 40 * ((i // 60) % 2)) for i in range(600)],
                       "tensor_active_pct": [30.0] * 600, "dram_active_pct": [20.0] * 600,
                       "power_w": [400.0 + g] * 600, "nvlink_tx_bps": [1e9] * 600, "nvlink_rx_bps": [1e9] * 600}
              for g in range(8)}
    value = series.compact(daemon, 500)
    with clusterstore.ClusterStore(tmp / "cluster.sqlite") as st:
        st.put_node_summary(ns, 0, series=series.pack(value))  # the frame as a node sends it
        st.put_job(merge.merge_job({"far1": ns}, ["far1"], {"job_id": 21, "user": "alice", "uid": 1000}, end))
    yield tmp, dict(os.environ, GPUPERF_CONFIG=str(conf))
    shutil.rmtree(tmp, ignore_errors=True)


def test_html_report_charts_a_job_of_another_node_from_the_store(controller):
    tmp, env = controller
    page = tmp / "job21.html"
    p = subprocess.run([GPUPERF, "report", "21", "--html", str(page)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    text = page.read_text()
    assert "id='no-series'" not in text
    for cid in ("chart-sm", "chart-tensor", "chart-dram", "chart-power", "chart-nvlink"):
        assert f'id="{cid}"' in text or f"id='{cid}'" in text, cid
    # the embedded chart data: the node's eight GPUs, and the SM line alternating 50/90 as sent
    assert all(f"far1:{g}" in text for g in range(8))
    assert re.search(r'"y":\[50(\.0)?,', text) and "90" in text
    if not CHROMIUM:
        pytest.skip("chromium not installed: checked the embedded chart data only")
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    # plotly drew each chart: an SVG per chart div, with one trace per GPU in the SM chart
    sm = dom[dom.index('id="chart-sm"'):]
    sm = sm[:sm.index('id="chart-tensor"')] if 'id="chart-tensor"' in sm else sm
    assert 'class="main-svg"' in sm, dom[:2000]
    assert sm.count('class="trace scatter') == 8


def test_terminal_report_draws_the_series_from_the_store(controller):
    _, env = controller
    p = subprocess.run([GPUPERF, "report", "21"], env=dict(env, COLUMNS="120"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Time series" in p.stdout and "SM active (0-100 %)" in p.stdout and "no time series" not in p.stdout
    rows = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("GPU far1:")]
    assert len(rows) >= 8 * 4  # 8 GPUs x (SM, tensor, DRAM, power)
