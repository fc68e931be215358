"""A real job on the Slurm test cluster, charted from a real Prometheus, then from the controller store.

The node daemon (replaying a real 2-GPU recording as the node's 4 GPUs) serves ``/metrics``; a real
Prometheus scrapes it every second with ``instance`` set to ``<node>:9402``, as a site's scrape of the
node would. The job's prolog registers it, its epilog sends the node summary and series to the
controller service. ``gpuperf report`` with ``report.prometheus_url`` draws the job's GPUs (the ones
Slurm gave it, no others) from Prometheus, with the values the daemon also sent to the store; with
Prometheus stopped the same command draws them from the node's daemon, then (daemon stopped too) from
the store, and says why. The shipped Grafana dashboard's job view, under this default scrape config,
finds the job's GPUs.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from gpuperf.files import config
from gpuperf.jobrecords import series as report
from gpuperf.controller import clusterstore

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import promserver  # noqa: E402
from test_daemon_slurm import _start as start_daemon  # noqa: E402
from test_report_slurm import _collector, _queue_state  # noqa: E402

pytestmark = pytest.mark.slurm
RECORDING = ROOT / "tests" / "data" / "recordings" / "one_busy-h200.jsonl.gz"
DASHBOARD = ROOT / "packaging" / "grafana" / "gpuperf-dashboard.json"


def _matching(prom: dict, store: dict, field: str) -> tuple[int, int]:
    """(Prometheus points of ``field`` equal to a store value sampled in or just before their step, all points)."""
    hits = total = 0
    for t, v in zip(prom["t"], prom[field]):
        if v is None:
            continue
        total += 1
        # a 1 s step centred on t holds scrapes of sweeps up to one scrape and one sweep older; the store keeps W as integers
        near = [s for ts, s in zip(store["t"], store[field]) if s is not None and t - 1.6 <= ts <= t + 0.6]
        hits += any(abs(v - s) <= 1.0 for s in near)
    return hits, total


def test_real_job_charts_from_prometheus_and_from_the_store_without_it(slurm_cluster, tmp_path):
    exe = promserver.binary()
    if not exe:
        pytest.skip("Debian's prometheus is not installed and could not be installed with apt-get")
    c = slurm_cluster
    node = c.node_names[0]
    cfg = c.gpuperf_config()
    mport = cfg["daemon"]["metrics_port"]
    cfg["daemon"].update(backend=f"replay:{RECORDING}?loop=1&gpus=4", interval_s=0.5, metrics_address="127.0.0.1",
                         request_timeout_s=1.0, user_socket_dir=str(c.dir / "run" / "daemon-user"))
    c.write_gpuperf_config(cfg)
    daemon = start_daemon(c)
    try:
        with promserver.running(exe, tmp_path / "prometheus", {f"127.0.0.1:{mport}": f"{node}:9402"}) as prom:
            end = time.time() + 30
            while not promserver.query(prom.url, "gpuperf_gpu_power_watts"):
                assert time.time() < end, "Prometheus has no sample of the daemon"
                time.sleep(0.2)
            with _collector(c):
                job = c.sbatch("sleep 5\n", "--gres=gpu:2")
                assert c.wait(job) == "COMPLETED"
                assert _queue_state(c, job) == "done"
            with clusterstore.ClusterStore(cfg["controller"]["store"], readonly=True) as st:
                ended = st.job(job)["end"]
            promserver.wait_scraped_after(prom.url, "gpuperf_gpu_power_watts", ended + 1.0)  # the job's last second is in
            cfg["report"] = {"prometheus_url": prom.url, "prometheus_scrape_s": 1.0, "prometheus_timeout_s": 2.0}
            c.write_gpuperf_config(cfg)
            page = c.dir / "out" / f"report-prom-{job}.html"
            rep = c.run("gpuperf", "report", job, "--html", page)
            loaded = config.load(str(c.gpuperf_config_path))
            with clusterstore.ClusterStore(cfg["controller"]["store"], readonly=True) as st:
                s = st.job(job)
            why = (f"job {job} {s.get('start')}..{s.get('end')} GPUs {[(g.get('node'), g.get('gpu')) for g in s.get('gpus', [])]} "
                   f"notes {(s.get('quality') or {}).get('reasons')}\n"
                   + promserver.scrape_health(prom.url, "gpuperf_gpu_power_watts", (s.get("start") or time.time() - 60) - 5,
                                              (s.get("end") or time.time()) + 2))
            assert rep.returncode == 0 and f"series from Prometheus {prom.url}" in rep.stderr, rep.stderr + why
            assert "id='series-source'" in page.read_text()
            # the dashboard's job view, as shipped, under this default scrape config: the job's GPUs mid-job
            expr = next(t["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for t in panel.get("targets", [])
                        if t["expr"].startswith("gpuperf_gpu_power_watts * on(instance, gpu)"))
            joined = promserver.query(prom.url, expr.replace("$job", str(job)), at=(s["start"] + s["end"]) / 2)
            assert sorted((r["metric"]["jobid"], int(r["metric"]["gpu"])) for r in joined) == \
                [(str(job), g) for g in sorted(g["gpu"] for g in s["gpus"])], joined
            from_prom = report.job_series(loaded, job, s, 2000, "prometheus")
            from_store = report.job_series(loaded, job, s, 2000, "controller")
            prom.stop()
        # the job's GPUs as Slurm gave them, none of the node's others
        gpus = c.job_record(job, "prolog")["context"]["gpus"]
        assert from_prom.source.startswith("Prometheus") and from_store.source == "controller store"
        assert sorted(from_prom.data) == sorted(f"{node}:{g}" for g in gpus) == sorted(from_store.data)
        for key in from_prom.data:
            hits, total = _matching(from_prom.data[key], from_store.data[key], "power_w")
            # most points are one scrape: the value the daemon also sent to the store at that time
            assert total >= 4 and hits >= 0.7 * total, (key, from_prom.data[key], from_store.data[key])
        # Prometheus gone: the same command takes the next source that has the series, and says why
        rep = c.run("gpuperf", "report", job)
        assert rep.returncode == 0 and "series from node daemon (Prometheus" in rep.stdout, rep.stdout + rep.stderr
        daemon.terminate()
        daemon.wait(10)
        page2 = c.dir / "out" / f"report-store-{job}.html"
        rep = c.run("gpuperf", "report", job, "--html", page2)
        assert rep.returncode == 0, rep.stderr
        assert "series from controller store (Prometheus" in rep.stderr and "cannot reach" in rep.stderr, rep.stderr
        text = page2.read_text()
        assert "id='no-series'" not in text and all(f"{node}:{g}" in text for g in gpus)
        assert json.loads(c.run("gpuperf", "report", job, "--json", check=True).stdout)["job_id"] == job
    finally:
        daemon.terminate()
        daemon.wait(10)
        c.reset_gpuperf_config()
