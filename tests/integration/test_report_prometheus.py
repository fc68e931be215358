"""``gpuperf report`` charts a job from a real Prometheus, and falls back to the controller store.

A real node daemon (``gpuperf daemon``, replaying a real 2-GPU recording as 4 GPUs: 0 and 2 busy,
1 and 3 idle) serves ``/metrics`` on loopback; a real Prometheus (Debian's package, installed with
apt when missing, as the Slurm cluster's packages are) scrapes it every second, with the target's
``instance`` relabelled to ``far1:9402`` as a site's scrape of node far1 would read. The controller
store holds job 31 (GPUs 1 and 2 of far1, a window of the daemon's run) with a synthetic series at a
constant 400 W, so each chart says by its values which source drew it. Nothing of Prometheus is left
running or listening afterwards; everything lives in one temp dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from gpuperf.files import config
from gpuperf.model import series
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.jobrecords import series as report
from gpuperf.controller import clusterstore, merge

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
sys.path.insert(0, str(ROOT / "tests"))
from report_fixtures import aggregates, context  # noqa: E402

import promserver  # noqa: E402

GPUPERF = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf") + "/venv/bin/gpuperf"
RECORDING = ROOT / "tests" / "data" / "recordings" / "one_busy-h200.jsonl.gz"
NODE, JOB, GPUS = "far1", 31, (1, 2)
WINDOW_S = 6.0
STORE_POWER_W = 400.0


def _wait(cond, timeout: float, what: str) -> None:
    end = time.time() + timeout
    while not cond():
        assert time.time() < end, what
        time.sleep(0.2)


def _exported_power(metrics_port: int) -> dict[int, set[float]]:
    """GPU -> the power values the daemon's /metrics shows now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {int(g): {float(v)} for g, v in re.findall(r'^gpuperf_gpu_power_watts\{gpu="(\d+)"\} (\S+)$', text, re.M)}


@pytest.fixture(scope="module")
def stack():
    """Daemon + Prometheus + a controller store holding job 31; yields what the tests need, then stops it all."""
    exe = promserver.binary()
    if not exe:
        pytest.skip("Debian's prometheus is not installed and could not be installed with apt-get")
    tmp = Path(tempfile.mkdtemp(prefix="gpuperf-prom-"))
    mport = promserver.free_port()
    base = (f'[general]\nstate_dir = "{tmp}/state"\nrun_dir = "{tmp}/run"\nlog_file = ""\nslurm_bin_dir = "{tmp}/noslurm"\n'
            f'[daemon]\nbackend = "replay:{RECORDING}?loop=1&gpus=4"\ninterval_s = 0.5\nsocket_dir = "{tmp}/run/daemon"\n'
            f'user_socket_dir = "{tmp}/run/daemon-user"\nmetrics_port = {mport}\nmetrics_address = "127.0.0.1"\nmetrics_job_labels = true\n'
            f'[controller]\nstore = "{tmp}/cluster.sqlite"\n')
    (tmp / "daemon.toml").write_text(base)
    daemon = subprocess.Popen([GPUPERF, "daemon", "--foreground"], env=dict(os.environ, GPUPERF_CONFIG=str(tmp / "daemon.toml")),
                              stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "w"))
    try:
        with promserver.running(exe, tmp / "prometheus", {f"127.0.0.1:{mport}": f"{NODE}:9402"}) as prom:
            yield _job_in_store(tmp, base, mport, prom)
    finally:
        daemon.terminate()
        daemon.wait(15)
        shutil.rmtree(tmp, ignore_errors=True)


def _job_in_store(tmp: Path, base: str, mport: int, prom: promserver.Server) -> dict:
    """Job 31 over the next WINDOW_S of the daemon's run, with the store's synthetic series; what the tests need."""
    url = prom.url
    _wait(lambda: promserver.listening(mport), 30, "daemon's /metrics did not start")
    _wait(lambda: promserver.query(url, "gpuperf_gpu_power_watts"), 30, "Prometheus has no sample of the daemon")
    # the job's window: the daemon's power values seen on /metrics meanwhile (every 0.1 s: each one it shows)
    start = time.time()
    exported: dict[int, set[float]] = {}
    while time.time() < start + WINDOW_S:
        for g, v in _exported_power(mport).items():
            exported.setdefault(g, set()).update(v)
        time.sleep(0.1)
    end = time.time()
    promserver.wait_scraped_after(url, "gpuperf_gpu_power_watts", end + 1.0)  # the last scrape of the window is in
    a = aggregates(job_id=JOB, node=NODE, ngpus=max(GPUS) + 1, seconds=WINDOW_S)
    a["gpus"] = {str(g): a["gpus"][str(g)] for g in GPUS}
    a["start"], a["end"] = start, end
    ns = summary.node_summary(a, context(job_id=JOB, node=NODE))
    t = [start + 0.5 * i for i in range(int(WINDOW_S * 2))]
    stored = {str(g): {"t": t, "sm_active_pct": [10.0] * len(t), "power_w": [STORE_POWER_W] * len(t)} for g in GPUS}
    with clusterstore.ClusterStore(tmp / "cluster.sqlite") as st:
        st.put_node_summary(ns, 0, series=series.pack(series.compact(stored, 500)))
        st.put_job(merge.merge_job({NODE: ns}, [NODE], {"job_id": JOB, "user": "alice", "uid": 1000}, end))

    def configure(**keys) -> dict:
        text = base + "[report]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
        (tmp / "report.toml").write_text(text)
        return dict(os.environ, GPUPERF_CONFIG=str(tmp / "report.toml"))

    return {"tmp": tmp, "url": url, "pport": prom.port, "mport": mport, "exported": exported, "summary": ns,
            "configure": configure, "prometheus": prom.proc}


def _report(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([GPUPERF, "report", str(JOB), *args], env=env, capture_output=True, text=True, timeout=120)


def _power_lines(page: str) -> dict[str, list[float | None]]:
    """GPU label -> the y values of the page's power chart (plotly's embedded data)."""
    chart = page[page.index('"chart-power"'):]
    chart = chart[chart.index("Plotly.newPlot"):chart.index("</script>")]
    out = {}
    for label, ys in re.findall(r'"name":"GPU ([^"]+)".*?"y":\[([^\]]*)\]', chart):
        out[label] = [None if v == "null" else float(v) for v in ys.split(",") if v]
    return out


def test_html_report_charts_the_job_from_prometheus(stack):
    env = stack["configure"](prometheus_url=stack["url"], prometheus_scrape_s=1.0)
    page = stack["tmp"] / "prom.html"
    p = _report(env, "--html", str(page))
    assert p.returncode == 0, p.stderr
    assert f"series from Prometheus {stack['url']}" in p.stderr, p.stderr
    text = page.read_text()
    assert "id='series-source'" in text and f"Time series from Prometheus {stack['url']}" in text
    lines = _power_lines(text)
    # joined by node and GPU index: the job's two GPUs only, not the node's other two
    assert sorted(lines) == [f"{NODE}:1", f"{NODE}:2"], sorted(lines)
    for g in GPUS:
        ys = [y for y in lines[f"{NODE}:{g}"] if y is not None]
        seen = stack["exported"][g]
        assert len(ys) >= WINDOW_S - 2, ys
        # each point is the mean of what Prometheus scraped in its second: within what the daemon showed
        assert all(min(seen) - 1e-6 <= y <= max(seen) + 1e-6 for y in ys), (g, ys, sorted(seen))
        # and most are one scrape exactly: a value the daemon exported, not the store's 400 W
        assert sum(any(abs(y - v) < 1e-6 for v in seen) for y in ys) >= len(ys) / 2, (ys, sorted(seen))
        assert STORE_POWER_W not in ys
    # the recording's GPU 0 worked, GPU 1 idled: GPU 2 plays 0, GPU 1 plays 1
    assert max(lines[f"{NODE}:1"], key=lambda v: v or 0) < 150 < max(lines[f"{NODE}:2"], key=lambda v: v or 0)
    from test_report_render import _chromium  # Debian's chromium, installed with apt when missing (as there)

    chromium = _chromium()
    if not chromium:
        return  # the embedded chart data is checked above
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={stack['tmp'] / 'chromium'}", "--host-resolver-rules=MAP * ~NOTFOUND",
                          "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    # plotly drew the Prometheus series: an SVG in the power chart, one trace per GPU of the job
    power = dom[dom.index('id="chart-power"'):]
    power = power[:power.index('id="chart-nvlink"')] if 'id="chart-nvlink"' in power else power
    assert 'class="main-svg"' in power and power.count('class="trace scatter') == 2, dom[:2000]


def test_terminal_report_says_prometheus_and_at_most_500_points(stack):
    env = stack["configure"](prometheus_url=stack["url"], prometheus_scrape_s=1.0)
    p = _report(env)
    assert p.returncode == 0, p.stderr
    assert f"series from Prometheus {stack['url']})" in p.stdout and f"GPU {NODE}:2" in p.stdout
    got = report.job_series(config.load(env["GPUPERF_CONFIG"]), JOB, stack["summary"], 2000)
    assert got.source.startswith("Prometheus") and all(len(v["t"]) <= 500 for v in got.data.values())
    assert set(got.data[f"{NODE}:2"]) >= {"t", "power_w", "sm_active_pct", "tensor_active_pct", "dram_active_pct"}


@pytest.mark.parametrize("case", ["unreachable", "error", "no_data"])
def test_report_falls_back_to_the_store_and_says_why(stack, case):
    url = {"unreachable": f"http://127.0.0.1:{promserver.free_port()}",
           # a server that is not Prometheus (the daemon's /metrics): it answers an HTTP error
           "error": f"http://127.0.0.1:{stack['mport']}",
           "no_data": stack["url"]}[case]
    keys = {"prometheus_url": url, "prometheus_scrape_s": 1.0, "prometheus_timeout_s": 2.0}
    if case == "no_data":
        keys["prometheus_node_label"] = "node"  # the scrape sets no such label: nothing matches
    page = stack["tmp"] / f"fallback-{case}.html"
    p = _report(stack["configure"](**keys), "--html", str(page))
    assert p.returncode == 0, p.stderr
    why = {"unreachable": "cannot reach", "error": "HTTP 405", "no_data": "no data for this job"}[case]
    assert "series from controller store (Prometheus" in p.stderr and why in p.stderr, p.stderr
    lines = _power_lines(page.read_text())
    assert sorted(lines) == [f"{NODE}:1", f"{NODE}:2"] and all(y == STORE_POWER_W for y in lines[f"{NODE}:1"])


def test_explicit_prometheus_source_with_prometheus_stopped_keeps_the_report(stack):
    env = stack["configure"](prometheus_url=stack["url"], prometheus_scrape_s=1.0)
    urllib.request.urlopen(urllib.request.Request(f"{stack['url']}/-/quit", method="POST"), timeout=5).read()
    stack["prometheus"].wait(30)
    assert not promserver.listening(stack["pport"])
    page = stack["tmp"] / "stopped.html"
    p = _report(env, "--html", str(page), "--series-source", "prometheus")
    assert p.returncode == 0, p.stderr
    text = page.read_text()
    assert "id='no-series'" in text and "cannot reach" in text and "id='gpus'" in text
    # auto: the store's series, said so
    p = _report(env)
    assert p.returncode == 0 and "series from controller store (Prometheus" in p.stdout, p.stdout + p.stderr
