"""packaging/grafana/gpuperf-dashboard.json queries only metrics the daemon really exports (its exporter's
registry, fed with samples replayed from a real GPU recording), and never puts a job label on GPU series."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuperf.files import config
from gpuperf.daemon.metrics import DaemonCollector
from gpuperf.samplers import open_sampler

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "packaging" / "grafana" / "gpuperf-dashboard.json"
RECORDING = ROOT / "tests" / "data" / "recordings" / "matmul_bf16-h100-80gb-hbm3.jsonl.gz"


def _exported() -> dict[str, set[str]]:
    """Series name -> label names, as a Prometheus scrape of a daemon would see them."""
    sampler = open_sampler(f"replay:{RECORDING}?gpus=2&loop&clock=virtual&speed=100", config.defaults())
    samples = sampler.sample()
    view = {"samples": samples, "jobs": [(42, "alice", [0, 1])],
            "stats": {"sweeps": 3, "skipped": 0, "errors": 0, "mismatches": 0, "sweep_s": 0.001}}
    reg = CollectorRegistry(auto_describe=False)
    reg.register(DaemonCollector(lambda: view, job_labels=True))   # the dashboard's job panels need it
    names: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        # a family the recording has no values for (GPM fields on some GPUs) is still declared
        names.setdefault(fam.name + ("_total" if fam.type == "counter" else ""), set())
        for s in fam.samples:
            names.setdefault(s.name, set()).update(s.labels)
    return names


def _exprs(dash: dict) -> list[str]:
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    out += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return out


def test_every_metric_the_dashboard_queries_is_exported():
    dash = json.loads(DASHBOARD.read_text())
    exported = _exported()
    used = {m for e in _exprs(dash) for m in re.findall(r"\bgpuperf_[a-z0-9_]+", e)}
    assert used, "no gpuperf metric in the dashboard"
    assert sorted(used - set(exported)) == []
    # the three views are there
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert [r.split()[0] for r in rows] == ["Cluster", "Node", "Job"]


def test_only_the_info_series_carries_a_job_label_and_the_dashboard_joins_through_it():
    exported = _exported()
    # "jobid": a "job" label would be renamed exported_job by a default scrape (the scrape's own job wins)
    assert not [n for n, labels in exported.items() if "job" in labels]
    with_job = sorted(n for n, labels in exported.items() if "jobid" in labels)
    assert with_job == ["gpuperf_job_gpu_info"]
    dash = json.loads(DASHBOARD.read_text())
    for e in _exprs(dash):
        rest = re.sub(r"gpuperf_job_gpu_info(\{[^}]*\}|, jobid)?|group_left\(jobid, user\)|gpuperf_daemon_running_jobs", "", e)
        if "job" in rest:
            raise AssertionError(f"a query filters or groups by job outside the info join: {e}")
    assert any("group_left(jobid, user) gpuperf_job_gpu_info" in e for e in _exprs(dash))
