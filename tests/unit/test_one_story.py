"""One story per job (issue 35): every reader shows the judgement made once, where the series are, and kept.

For every recording (``tests/data/recordings``, ``zoo/`` included) a job is run through the product's path
without a cluster: its sweeps into a daemon store, the hand-over's series, the node summary the delivery
writes (``fromrecording.node_judgement``), the controller's intake, merge, store and AdminComment. Then
each reader is asked as it asks in production: the AdminComment decoded, ``gpuperf report --json`` as the
job's owner (from the node daemon's ``job`` op, and from sacct) and as an admin (the controller's store),
``gpuperf report --html`` (the summary embedded in the page, and the class and phases it shows) and the end
mail (``gpuperf-mail``). Class, phases and rates (the diagnosis and the estimates) must be the node's, or
for a job of two nodes the controller's merge, in every one.
"""

from __future__ import annotations

import argparse
import glob
import html as html_mod
import json
import os
import re
from pathlib import Path

import pytest

from gpuperf.access.slurm import Slurm
from gpuperf.commands import report as report_cmd
from gpuperf.controller import clusterstore, merge
from gpuperf.daemon import client, protocol
from gpuperf.daemon.ops import Access, Ops
from gpuperf.daemon.store import Store
from gpuperf.files import config
from gpuperf.jobrecords import summaries
from gpuperf.model import admincomment
from gpuperf.report import fromrecording, mailtext
from gpuperf.wrappers import mail
from report_fixtures import story

HERE = Path(__file__).resolve().parents[1] / "data" / "recordings"
RECORDINGS = sorted(glob.glob(str(HERE / "*.jsonl.gz")) + glob.glob(str(HERE / "zoo" / "*.jsonl.gz")))
OWNER = 64123                 # a uid with no passwd entry: an ordinary user, never an admin


def _cfg(base: Path, node: str) -> config.Config:
    cfg = config.defaults()
    cfg.data["general"].update(run_dir=str(base / node / "run"), state_dir=str(base / "state"), log_file="",
                               slurm_bin_dir=str(base / "noslurm"))
    cfg.data["daemon"].update(socket_dir=str(base / "nosock"), user_socket_dir=str(base / "nousock"))
    return cfg


def _node(cfg: config.Config, base: Path, path: str, job_id: int, node: str) -> tuple[dict, Store]:
    """The node's summary as sent, and its daemon store holding the job as finalised."""
    store = Store(base / f"{node}.sqlite")
    aggs, sent = fromrecording.node_judgement(path, cfg, store, job_id=job_id, node=node, uid=OWNER, user="owner")
    store.in_transaction(store.put_job, {"job_id": job_id, "uid": OWNER, "user": "owner", "gpus": [int(g) for g in aggs["gpus"]],
                                         "node": node, "start": aggs["start"]}, aggs["start"])
    store.in_transaction(store.finish_job, job_id, aggs["end"], False, aggs["end"])
    return sent, store


def _controller(cfg: config.Config, job_id: int, sent: list[dict]) -> str:
    """What the controller service does with the nodes' summaries: keep them, merge, store, AdminComment."""
    with clusterstore.ClusterStore(clusterstore.default_path(cfg)) as st:
        for s in sent:
            st.put_node_summary(json.loads(json.dumps(s)))          # as received: JSON over the transport
        parts = {n: s for n, s in st.node_summaries(job_id).items()}
        nodes = sorted(parts)
        merged = merge.merge_job(parts, nodes, {"job_id": job_id, "user": "owner", "uid": OWNER},
                                 max(s["end"] for s in sent), thresholds=cfg.report.thresholds)
        raw = admincomment.compressed(merged)
        st.put_job(merged, blob=raw)
    return admincomment.encode(merged, raw=raw)


def _daemon(monkeypatch, store: Store, cfg: config.Config) -> None:
    """The node daemon's ops on its store, asked by the job's owner on the user socket."""
    ops = Ops(access=Access(slurm_uid=None), jobs=argparse.Namespace(running={}), store=store, handover=None,
              view=None, health=lambda: None, facts=None, sampler=None, clock=lambda: 0.0, started=0.0,
              stats={"requests": 0, "bad_requests": 0}, cfg=cfg, log=None)

    def request(_cfg, op, job=None, timeout_s=None, channel=None):
        reply = ops.handle(protocol.encode(protocol.request(op, job)), OWNER, "user")
        if not reply.get("ok"):
            raise client.DaemonRefused(str(reply.get("error")))
        return reply

    monkeypatch.setattr(client, "request", request)


def _report(monkeypatch, capsys, cfg_path: str, job_id: int, *, source: str = "auto", html: str | None = None,
            owner: bool = False) -> dict:
    """``gpuperf report JOBID --json`` (or ``--html``), as the owner or as root; the summary it shows."""
    monkeypatch.setenv("GPUPERF_CONFIG", cfg_path)
    with monkeypatch.context() as m:
        if owner:
            m.setattr(os, "getuid", lambda: OWNER)
        args = argparse.Namespace(job_id=str(job_id), json=html is None, html=html, source=source,
                                  series_source="auto")
        assert report_cmd.run(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if html is None:
        return json.loads(out)
    page = Path(html).read_text()
    s = json.loads(html_mod.unescape(re.search(r"<pre>(.*?)</pre>", page, re.S).group(1)))
    shown = html_mod.unescape(re.search(r"id='diagnosis-class'>([^<]*)<", page).group(1))
    assert shown == str(s["diagnosis"]["class"]).replace("_", "-")
    phases = re.search(r"<ol id='phases'>(.*?)</ol>", page, re.S)
    assert len(re.findall("<li>", phases.group(1)) if phases else []) == len(s["diagnosis"].get("phases") or [])
    return s


def _mail(monkeypatch, cfg: config.Config, job_id: int) -> str:
    monkeypatch.setattr(Slurm, "sacct_jobs", lambda self, ids, fields: {int(j): {"AllocTRES": "gres/gpu=1"} for j in ids})
    return mail.added_text(cfg, {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_MAIL_TYPE": "Ended"}, "Slurm Job_id ended")


def _write_cfg(base: Path, cfg: config.Config) -> str:
    p = base / f"{Path(cfg.general.run_dir).parent.name}.toml"
    g = cfg.general
    p.write_text(f'[general]\nrun_dir = "{g.run_dir}"\nstate_dir = "{g.state_dir}"\nlog_file = ""\n'
                 f'slurm_bin_dir = "{g.slurm_bin_dir}"\n[daemon]\nsocket_dir = "{cfg.daemon.socket_dir}"\n'
                 f'user_socket_dir = "{cfg.daemon.user_socket_dir}"\n')
    return str(p)


def _readers(monkeypatch, capsys, tmp_path: Path, cfg: config.Config, job_id: int, ac: str) -> dict[str, dict]:
    """Every reader's summary of the job (the node daemon of ``cfg``'s node serving its owner)."""
    monkeypatch.setattr(Slurm, "admin_comment", lambda self, j: ac if int(j) == job_id else "")
    cfg_path = _write_cfg(tmp_path, cfg)
    got = {"AdminComment": admincomment.decode(ac),
           "admin --json": _report(monkeypatch, capsys, cfg_path, job_id),
           "owner --json (sacct)": _report(monkeypatch, capsys, cfg_path, job_id, source="sacct", owner=True),
           "admin --html": _report(monkeypatch, capsys, cfg_path, job_id, html=str(tmp_path / "job.html"))}
    # the owner on a node, where the controller's store is not theirs to read
    with monkeypatch.context() as m:
        m.setattr(summaries, "_from_controller", _unreadable)
        got["owner --json"] = _report(monkeypatch, capsys, cfg_path, job_id, owner=True)
        got["owner --html"] = _report(monkeypatch, capsys, cfg_path, job_id, owner=True, html=str(tmp_path / "own.html"))
    return got


def _unreadable(cfg, job_id):
    raise PermissionError("unable to open database file")


def _mail_says(s: dict, text: str) -> None:
    for line in mailtext.job_lines("x", s)[:-1]:
        assert line.partition(": ")[2] in text, (line, text)


@pytest.mark.parametrize("path", RECORDINGS, ids=[os.path.basename(p).split(".")[0] for p in RECORDINGS])
def test_every_reader_shows_the_nodes_stored_judgement(path, tmp_path, monkeypatch, capsys):
    cfg = _cfg(tmp_path, "n1")
    sent, store = _node(cfg, tmp_path, path, 7, "n1")
    ac = _controller(cfg, 7, [sent])
    _daemon(monkeypatch, store, cfg)
    want = story(sent)
    got = _readers(monkeypatch, capsys, tmp_path, cfg, 7, ac)
    # the node's own store, as its owner reads it before the controller has written anything
    got["owner --json (node daemon)"] = _report(monkeypatch, capsys, _write_cfg(tmp_path, cfg), 7, source="daemon", owner=True)
    for reader, s in got.items():
        assert story(s) == want, f"{reader} differs from the node's judgement"
        assert not s.get("live")
    _mail_says(sent, _mail(monkeypatch, cfg, 7))


@pytest.mark.parametrize("path", RECORDINGS, ids=[os.path.basename(p).split(".")[0] for p in RECORDINGS])
def test_a_job_of_two_nodes_is_judged_from_both_nodes_series_and_read_alike(path, tmp_path, monkeypatch, capsys):
    cfgs = {n: _cfg(tmp_path, n) for n in ("n1", "n2")}
    nodes = {n: _node(cfgs[n], tmp_path, path, 8, n) for n in cfgs}
    ac = _controller(cfgs["n1"], 8, [sent for sent, _ in nodes.values()])
    merged = admincomment.decode(ac)
    one = nodes["n1"][0]["diagnosis"]
    # the same work on two nodes is the same story: the merge found the phases each node found, from their series
    assert [(p["class"], p["share_pct"]) for p in merged["diagnosis"]["phases"]] == \
        [(p["class"], p["share_pct"]) for p in one["phases"]]
    # (the class may differ: a job of several nodes moving bytes over PCIe can be communicating, one node cannot)
    _daemon(monkeypatch, nodes["n1"][1], cfgs["n1"])
    got = _readers(monkeypatch, capsys, tmp_path, cfgs["n1"], 8, ac)
    for reader, s in got.items():
        assert story(s) == story(merged), f"{reader} differs from the controller's merge"
        assert "phase_series" not in s and s["nodes"] == ["n1", "n2"], reader
    _mail_says(merged, _mail(monkeypatch, cfgs["n1"], 8))


def test_the_daemon_keeps_a_finished_jobs_judgement_and_serves_it_to_its_owner_after_the_job_dir_is_gone(tmp_path, monkeypatch):
    import logging
    import shutil

    from gpuperf.daemon import handover
    from gpuperf.daemon.workers import Deliveries

    cfg = _cfg(tmp_path, "n1")
    store = Store(tmp_path / "n1.sqlite")
    deliveries = Deliveries(cfg, logging.getLogger("test"), send=False)
    hand = handover.Handover(store, deliveries.put, cfg.controller.series_points, logging.getLogger("test"), deliveries.kept)
    aggs, _ = fromrecording.replay_job(str(HERE / "phases-h100-80gb-hbm3.jsonl.gz"), job_id=9, store=store)
    store.in_transaction(store.put_job, {"job_id": 9, "uid": OWNER, "user": "owner", "gpus": [0], "start": aggs["start"]},
                         aggs["start"])
    store.in_transaction(store.finish_job, 9, aggs["end"], False, aggs["end"])
    hand.deliver_finalised(aggs, {"job_id": 9, "user": "owner", "uid": OWNER, "node": "n1"})
    th = deliveries.thread()
    th.start()
    deliveries.close()
    th.join(30)
    assert hand.keep_delivered() == 1
    jdir = Path(cfg.general.run_dir) / "jobs" / "9"
    written = json.loads((jdir / "node_summary.json").read_text())
    assert written["diagnosis"]["phases"]
    shutil.rmtree(jdir)                 # pruned after job_dir_keep_days: the store keeps the job for longer
    _daemon(monkeypatch, store, cfg)
    served = client.request(cfg, "job", {"job_id": 9})["summary"]
    assert story(served) == story(written) and "phase_series" not in served and "series" not in served


def test_a_job_of_many_nodes_is_judged_from_a_spread_of_its_nodes_series_and_says_so(tmp_path):
    from gpuperf.controller import mergework

    cfg = _cfg(tmp_path, "n1")
    one, _ = _node(cfg, tmp_path, str(HERE / "phases-h100-80gb-hbm3.jsonl.gz"), 11, "n1")
    nodes = [f"gpu{i:04d}" for i in range(300)]
    with clusterstore.ClusterStore(clusterstore.default_path(cfg)) as st:
        for n in nodes:
            st.put_node_summary(dict(json.loads(json.dumps(one)), nodes=[n], gpus=[dict(g, node=n) for g in one["gpus"]]),
                                commit=False)
        st.db.commit()
        parts = st.node_summaries(11, trim=mergework.trim_for(nodes))
    sent = sum("phase_series" in s for s in parts.values())
    assert 0 < sent < len(nodes)
    merged = merge.merge_job(parts, nodes, {"job_id": 11, "user": "owner", "uid": OWNER}, one["end"])
    assert [(p["class"], p["share_pct"]) for p in merged["diagnosis"]["phases"]] == \
        [(p["class"], p["share_pct"]) for p in one["diagnosis"]["phases"]]
    assert any(f"{sent} of the job's {len(nodes)} nodes" in n for n in merged["diagnosis"]["notes"])


def test_the_admincomments_reduced_form_keeps_the_class_the_phases_and_the_rates(tmp_path):
    cfg = _cfg(tmp_path, "n1")
    one, _ = _node(cfg, tmp_path, str(HERE / "phases-h100-80gb-hbm3.jsonl.gz"), 12, "n1")
    one.pop("phase_series", None)
    one.pop("series", None)
    # evidence too long for 4 KiB in any fuller form: only the reduced one fits
    one["diagnosis"] = dict(one["diagnosis"], evidence=[os.urandom(1500).hex()])
    text = admincomment.encode(one)
    got = admincomment.decode(text)
    assert "reduced" in got["truncated"]
    keep = ("start", "end", "share_pct", "class", "work")
    assert got["diagnosis"]["class"] == one["diagnosis"]["class"]
    assert [{k: p[k] for k in keep} for p in got["diagnosis"]["phases"]] == \
        [{k: p[k] for k in keep} for p in one["diagnosis"]["phases"]]
    for k in ("tflops_est_per_gpu", "dram_gbps", "tflops_est_job"):
        assert got["estimates"][k] == one["estimates"][k]


def _synthetic(kind: str) -> tuple[dict, int]:
    """(node summary as sent, phases the diagnosis must find) of issue 35's two synthetic jobs: 12 hours with a
    40-minute evaluation every 2 hours (the store's 1-minute means), and 3 minutes after a 30 s start-up (1 s)."""
    from gpuperf.diagnosis import jobsummary
    from report_fixtures import aggregates, context
    from test_diagnosis_phases import IDLE, TRAIN, _means, daemon_series, twelve_hours

    parts, step, want = (twelve_hours(), 60.0, 13) if kind == "12h" else ([(30.0, IDLE), (150.0, TRAIN)], 1.0, 2)
    seconds = sum(s for s, _ in parts)
    a = aggregates(job_id=7, ngpus=8, seconds=seconds, nvlink_tx_bps=0.0, nvlink_rx_bps=0.0, **_means(parts))
    for g in a["gpus"].values():
        g["idle_s"] = sum(s for s, v in parts if not v.get("util_gpu_pct"))
    sent = jobsummary.node_summary(a, context(job_id=7, user="owner", uid=OWNER, series=daemon_series(parts, step, 8)))
    return sent, want


@pytest.mark.parametrize("kind", ["12h", "3min"])
def test_the_synthetic_long_and_short_jobs_show_their_phases_in_every_reader(kind, tmp_path, monkeypatch, capsys):
    """Issue 35's bar: a 12-hour job with a 40-minute evaluation every 2 hours and a 3-minute job with a 30 s
    start-up show their phases in the AdminComment, the owner's and the admin's report (JSON, HTML) and the mail."""
    cfg = _cfg(tmp_path, "n1")
    sent, want = _synthetic(kind)
    assert len(sent["diagnosis"]["phases"]) == want
    store = Store(tmp_path / "n1.sqlite")
    store.in_transaction(store.put_job, {"job_id": 7, "uid": OWNER, "user": "owner", "gpus": list(range(8)),
                                         "node": "n1", "start": sent["start"]}, sent["start"])
    store.in_transaction(store.finish_job, 7, sent["end"], False, sent["end"])
    store.in_transaction(store.put_summary, 7, sent)
    ac = _controller(cfg, 7, [sent])
    assert len(ac) <= 4096 and f"phases={sent['diagnosis']['phases'][0]['class']}:" in ac
    _daemon(monkeypatch, store, cfg)
    got = _readers(monkeypatch, capsys, tmp_path, cfg, 7, ac)
    got["owner --json (node daemon)"] = _report(monkeypatch, capsys, _write_cfg(tmp_path, cfg), 7, source="daemon", owner=True)
    for reader, s in got.items():
        assert story(s) == story(sent), f"{reader} differs from the node's judgement"
        assert len(s["diagnosis"]["phases"]) == want, reader
    text = _mail(monkeypatch, cfg, 7)
    _mail_says(sent, text)
    assert text.count("%") >= want, text
