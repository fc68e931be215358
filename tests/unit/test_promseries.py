"""The Prometheus reader's pure parts: the query's step and points, the node matcher, the answer's
parsing into the renderers' shape, and the config keys (the real server: tests/integration/test_report_prometheus.py)."""

from __future__ import annotations

import re
import socket

import pytest

from gpuperf.files import config
from gpuperf.report import promseries as ps


@pytest.mark.parametrize("span", [5.0, 60.0, 3600.0, 7 * 86400.0, 30 * 86400.0 + 7])
def test_plan_keeps_at_most_500_points_and_never_steps_below_the_scrape(span):
    first, last, step = ps.plan(1000.0, 1000.0 + span, 500, 15.0)
    n = int((last - first) / step + 1e-9) + 1
    assert n <= 500 and step >= 15.0 and last == 1000.0 + span
    assert first >= 1000.0 + min(step, span)  # no point averages time before the job began
    if span >= 15.0 * 499:
        assert n >= 490  # long jobs get (nearly) all their points


def _python_regex(matcher: str) -> tuple[str, re.Pattern]:
    label, _, quoted = matcher.partition("=~")
    return label, re.compile(quoted[1:-1].replace("\\\\", "\\"))


def test_node_matcher_takes_node_port_and_domain_but_not_a_longer_name():
    label, rx = _python_regex(ps.node_matcher("instance", ["gpu-a1", "n1"]))
    assert label == "instance"
    for ok in ("n1", "n1:9402", "n1.cluster.local:9402", "gpu-a1:9402"):
        assert rx.fullmatch(ok), ok  # Prometheus anchors label regexes
    for bad in ("n10:9402", "xn1:9402", "n1:port", "gpu-a10"):
        assert not rx.fullmatch(bad), bad


def test_node_names_with_regex_characters_are_escaped():
    _, rx = _python_regex(ps.node_matcher("node", ["a.b+c"]))
    assert rx.fullmatch("a.b+c:1") and not rx.fullmatch("axbbc:1")


def test_node_of_picks_the_longest_matching_node():
    assert ps.node_of("n1:9402", ["n1", "n10"]) == "n1" and ps.node_of("n10.x:9402", ["n1", "n10"]) == "n10"
    assert ps.node_of("n2:9402", ["n1", "n10"]) is None


def _answer(results):
    return {"status": "success", "data": {"resultType": "matrix", "result": results}}


def test_parse_keeps_the_jobs_gpus_converts_units_and_centres_points():
    w = ps.Window({"n1": frozenset({1}), "n2": frozenset({0})}, 100.0, 200.0)
    rows: dict = {}
    ps.parse(_answer([
        {"metric": {"instance": "n1:9402", "gpu": "1"}, "values": [[110, "0.5"], [120, "NaN"]]},
        {"metric": {"instance": "n1:9402", "gpu": "0"}, "values": [[110, "0.9"]]},   # not the job's GPU on n1
        {"metric": {"instance": "n2:9402", "gpu": "0"}, "values": [[110, "0.25"]]},
        {"metric": {"instance": "n3:9402", "gpu": "1"}, "values": [[110, "0.7"]]},   # not the job's node
    ]), "sm_active_pct", ps.METRICS["sm_active_pct"][1], "instance", w, 10.0, rows)
    ps.parse(_answer([{"metric": {"instance": "n1:9402", "gpu": "1"}, "values": [[110, "650.5"]]}]),
             "power_w", ps.METRICS["power_w"][1], "instance", w, 10.0, rows)
    out = ps.columns(rows)
    assert sorted(out) == ["n1:1", "n2:0"]
    assert out["n1:1"] == {"t": [105.0, 115.0], "power_w": [650.5, None], "sm_active_pct": [50.0, None]}
    assert out["n2:0"] == {"t": [105.0], "sm_active_pct": [25.0]}


def test_metric_names_are_the_exporters():
    assert ps.METRICS["sm_active_pct"] == ("gpuperf_gpu_sm_active_ratio", 100.0)
    assert ps.METRICS["power_w"] == ("gpuperf_gpu_power_watts", 1.0)
    assert ps.METRICS["nvlink_tx_bps"][0] == "gpuperf_gpu_nvlink_tx_bytes_per_second"


def test_query_selects_the_jobs_nodes_and_gpus_and_averages_each_step():
    w = ps.Window({"n1": frozenset({2, 3})}, 0.0, 60.0)
    q = ps.query("gpuperf_gpu_power_watts", "instance", w, 1.5)
    assert q.startswith("avg_over_time(gpuperf_gpu_power_watts{instance=~") and q.endswith('gpu=~"2|3"}[1500ms])')


def test_job_window_from_the_summary():
    s = {"gpus": [{"node": "n1", "gpu": 0}, {"node": "n2", "gpu": 3}], "start": 10.0, "end": 70.0}
    assert ps.job_window(s) == ps.Window({"n1": frozenset({0}), "n2": frozenset({3})}, 10.0, 70.0)
    assert ps.job_window(dict(s, live=True), now=99.0).end == 99.0  # a running job: up to now
    assert ps.job_window(dict(s, gpus=[])) is None and ps.job_window(dict(s, start=None)) is None


def test_unreachable_prometheus_is_one_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    w = {"gpus": [{"node": "n1", "gpu": 0}], "start": 0.0, "end": 60.0}
    with pytest.raises(ps.PrometheusError, match=f"cannot reach http://127.0.0.1:{port}"):
        ps.job_series(f"http://127.0.0.1:{port}", w, timeout_s=1.0)


def test_describe_drops_credentials_and_query():
    assert ps.describe("https://u:secret@prom.example:9090/p/?x=1") == "Prometheus https://prom.example:9090/p"


def test_config_validates_the_prometheus_keys(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[report]\nprometheus_url = "http://prom:9090"\nprometheus_scrape_s = 1.0\n')
    assert config.load(str(p)).report.prometheus_url == "http://prom:9090"
    assert config.defaults().report.prometheus_url == ""
    for bad, key in (('prometheus_url = "prom:9090"', "prometheus_url"), ("prometheus_timeout_s = 0", "prometheus_timeout_s")):
        p.write_text(f"[report]\n{bad}\n")
        with pytest.raises(config.ConfigError) as e:
            config.load(str(p))
        assert e.value.key.endswith(key) and e.value.line == 2
