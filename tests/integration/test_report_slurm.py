"""The per-job report with the real Slurm test cluster: node summaries travel (munge, pyzmq) to the
collector, the real EpilogSlurmctld merges them and writes the AdminComment with sacctmgr, and
``gpuperf report`` reads it back from sacct alone.

Node summaries are built here with gpuperf's own functions (from a real recording when
``tests/data/recordings`` has one, else synthetic aggregates) and sent from inside each node's
network namespace, as the node epilog would. Run with ``GPUPERF_TEST_CLUSTER=report``.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpuperf.model import admincomment
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.controller import clusterstore
from gpuperf.report import fromrecording

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
PY = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf") + "/venv/bin/python"
RECORDINGS = sorted((ROOT / "tests" / "data" / "recordings").glob("*.jsonl*"))
SEND = ("import json, sys\nfrom gpuperf.files import config\nfrom gpuperf.controller import transport\n"
        "cfg = config.load()\ns = json.load(open(sys.argv[1]))\n"
        "try:\n    print(json.dumps(transport.send_node_summary(cfg, s, timeout_s=3, attempts=1)))\n"
        "except transport.TransportError as e:\n    print('REFUSED', e)\n    sys.exit(3)\n")


def _aggregates(job_id: int, node: str) -> dict:
    if RECORDINGS:
        return fromrecording.replay_job(str(RECORDINGS[0]), job_id=job_id, node=node, gpus=2)[0]
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from report_fixtures import aggregates

    return aggregates(job_id=job_id, node=node, ngpus=2, seconds=60.0)


def _node_summary(job_id: int, node: str) -> dict:
    a = _aggregates(job_id, node)
    # the recording's times moved to now: the service compares a node's job end with slurmctld's
    shift = time.time() - a["end"]
    a["start"], a["end"] = a["start"] + shift, a["end"] + shift
    return summary.node_summary(a, {"job_id": job_id, "node": node, "user": "root", "uid": 0})


def _queue_state(c, job: int, timeout: float = 60) -> str:
    """The controller service's state of a job once final (done, skipped, unavailable, orphan)."""
    end = time.time() + timeout
    while time.time() < end:
        with clusterstore.ClusterStore(c.gpuperf_config()["controller"]["store"]) as st:
            row = st.db.execute("SELECT state FROM ended WHERE job_id=?", (job,)).fetchone()
        if row and row[0] not in ("merge", "write"):
            return row[0]
        time.sleep(0.2)
    raise AssertionError(f"job {job} not final in the controller's queue: {row}")


@contextmanager
def _collector(c):
    """The controller service, as the instance's config says (port, store, spool), with the real sacctmgr."""
    p = subprocess.Popen([PY, "-m", "gpuperf.controller.service"], env=c.env, stderr=subprocess.PIPE, text=True)
    port = c.gpuperf_config()["controller"]["port"]
    end = time.time() + 15
    import socket

    while time.time() < end:
        assert p.poll() is None, f"collector exited: {p.stderr.read()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    try:
        yield p
    finally:
        p.terminate()
        p.wait(10)


def _send(c, node: str, s: dict, user: str | None = None) -> subprocess.CompletedProcess:
    """Send a node summary from inside the node's network namespace (as root, or as ``user``)."""
    path = c.dir / "out" / f"summary-{s['job_id']}-{node}.json"
    path.write_text(json.dumps(s))
    path.chmod(0o644)
    argv = [PY, "-c", SEND, str(path)]
    if user:
        argv = ["/usr/sbin/runuser", "-u", user, "--", *argv]
    return subprocess.run(c.node_cmd(node, argv), env=c.node_env(node), capture_output=True, text=True, timeout=30)


def _wait_running(c, job: int, timeout: float = 30) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if c.job_state(job) == "RUNNING":
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job} not running: {c.job_state(job)}")


def _admin_comment(c, job: int) -> str:
    out = c.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment%65535", check=True).stdout
    return next((l for l in out.splitlines() if l.strip()), "")


def _set_wait(c, merge_wait_s: float) -> None:
    cfg = c.gpuperf_config()
    cfg.setdefault("controller", {})["merge_wait_s"] = merge_wait_s
    c.write_gpuperf_config(cfg)


def test_admin_comment_in_sacct_decodes_to_the_summary(slurm_cluster):
    c = slurm_cluster
    node = c.node_names[0]
    with _collector(c):
        job = c.sbatch("sleep 2\n", "--gres=gpu:2")
        _wait_running(c, job)
        s = _node_summary(job, node)
        sent = _send(c, node, s)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert c.wait(job) == "COMPLETED"
        hook = c.wait_record(job, "epilog-slurmctld", timeout=60)
        rec = c.wait_record(job, "merge", timeout=60)
        assert _queue_state(c, job) == "done"
    assert hook["steps"]["notify"]["ok"] and hook["data"]["notify"]["notice"].endswith(f"/{job}.ended"), hook
    assert rec["steps"]["merge"]["ok"], rec
    text = _admin_comment(c, job)
    assert text.startswith("gpuperf:v1 class=")
    decoded = admincomment.decode(text)
    assert decoded == summary.merge([s], [node])
    with clusterstore.ClusterStore(c.gpuperf_config()["controller"]["store"]) as st:
        assert st.job(job) == decoded
    # plain sacct shows the headline
    short = c.run("sacct", "-j", job, "-X", "-o", "JobID,AdminComment%120", check=True).stdout
    assert f"class={decoded['diagnosis']['class']}" in short
    # the report from sacct alone, for root; another user may not read it
    rep = c.run("gpuperf", "report", job, "--source", "sacct", "--json", check=True)
    got = json.loads(rep.stdout)
    assert got.pop("job_ref") == str(job) and got == decoded  # the job as users name it rides along
    other = c.run("gpuperf", "report", job, "--source", "sacct", user=c.user)
    assert other.returncode == 1 and "not yours" in other.stderr


def test_job_without_gpus_is_not_waited_for(slurm_cluster):
    c = slurm_cluster
    with _collector(c):
        job = c.sbatch("true\n")
        assert c.wait(job) == "COMPLETED"
        # no node reports a job without GPUs: after the merge wait, one sacct call tells the service so
        assert _queue_state(c, job) == "skipped"
    assert c.job_record(job, "merge") is None
    assert _admin_comment(c, job) == ""


def test_two_node_job_gets_one_merged_summary(slurm_cluster2):
    c = slurm_cluster2
    n1, n2 = c.node_names
    _set_wait(c, 20.0)
    with _collector(c):
        job = c.sbatch("sleep 3\n", "-N2", "--gres=gpu:2")
        _wait_running(c, job)
        parts = [_node_summary(job, n) for n in (n1, n2)]
        for n, s in zip((n1, n2), parts):
            sent = _send(c, n, s)
            assert sent.returncode == 0, sent.stdout + sent.stderr
        assert c.wait(job) == "COMPLETED"
        c.wait_record(job, "merge", timeout=60)
        assert _queue_state(c, job) == "done"
    decoded = admincomment.decode(_admin_comment(c, job))
    assert decoded["nodes"] == sorted([n1, n2]) and decoded["job"]["gpu_count"] == 4
    assert not decoded["quality"]["partial"]
    assert decoded == summary.merge(parts, [n1, n2])


def test_silent_node_makes_it_partial_within_the_bound_and_forged_summary_is_rejected(slurm_cluster2):
    c = slurm_cluster2
    n1, n2 = c.node_names
    wait_s = 8.0
    _set_wait(c, wait_s)
    try:
        with _collector(c):
            job = c.sbatch("sleep 2\n", "-N2", "--gres=gpu:2")
            _wait_running(c, job)
            assert _send(c, n1, _node_summary(job, n1)).returncode == 0
            # n2 "reports" as an ordinary user: munge vouches for that uid, the collector refuses it
            forged = _send(c, n2, _node_summary(job, n2), user=c.user)
            assert forged.returncode == 3 and "not authenticated" in forged.stdout, forged.stdout + forged.stderr
            assert c.wait(job) == "COMPLETED"
            hook = c.wait_record(job, "epilog-slurmctld", timeout=60)
            # the EpilogSlurmctld did not hold the job while waiting for n2: Slurm let it complete and
            # the service is still waiting
            assert c.job_record(job, "merge") is None and hook["steps"]["notify"]["ok"], hook
            rec = c.wait_record(job, "merge", timeout=60)
            assert _queue_state(c, job) == "done"
    finally:
        c.reset_gpuperf_config()
    merge = rec["data"]["merge"]
    assert merge["reported"] == [n1] and merge["partial"]
    assert wait_s <= merge["waited_s"] < wait_s + 3
    decoded = admincomment.decode(_admin_comment(c, job))
    assert decoded["quality"]["partial"] and decoded["quality"]["nodes_missing"] == [n2]
    assert admincomment.decode_headline(_admin_comment(c, job))["partial"] == "1"
    with clusterstore.ClusterStore(c.gpuperf_config()["controller"]["store"]) as st:
        assert list(st.node_summaries(job)) == [n1]


@contextmanager
def _replay_daemon(c, recording: Path):
    """The node daemon replaying ``recording`` (a sweep every 0.2 s, looped), with its user socket; the
    instance's config as it was afterwards."""
    from gpuperf.files import config
    from gpuperf.daemon import client

    cfg = c.gpuperf_config()
    cfg.setdefault("daemon", {}).update(backend=f"replay:{recording}?loop=1", interval_s=0.2, metrics_port=0,
                                        request_timeout_s=1.0, user_socket_dir=str(c.dir / "run" / "daemon-user"))
    c.write_gpuperf_config(cfg)
    daemon = subprocess.Popen([os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf") + "/venv/bin/gpuperf", "daemon", "--foreground"], env=c.env,
                              stderr=subprocess.PIPE, text=True)
    try:
        loaded = config.load(str(c.gpuperf_config_path))
        end = time.time() + 20
        while True:
            assert daemon.poll() is None, f"daemon exited: {daemon.stderr.read()[-2000:]}"
            try:
                if client.call(loaded, "ping", timeout_s=0.5)["ok"]:
                    break
            except client.DaemonUnavailable:
                assert time.time() < end, "daemon did not answer"
                time.sleep(0.1)
        yield daemon
    finally:
        daemon.terminate()
        daemon.wait(10)
        c.reset_gpuperf_config()


def test_end_to_end_with_the_node_daemon(slurm_cluster):
    """The node daemon (replaying a real recording) finalises the job, its epilog sends the node summary,
    the EpilogSlurmctld writes it: sacct ends up with exactly what the node computed. Live report too."""
    if not RECORDINGS:
        pytest.skip("no recording in tests/data/recordings for the daemon to replay")
    c = slurm_cluster
    node = c.node_names[0]
    matmul = next((p for p in RECORDINGS if p.name.startswith("matmul")), RECORDINGS[0])
    with _replay_daemon(c, matmul):
        with _collector(c):
            job = c.sbatch("sleep 4\n", "--gres=gpu:2")
            _wait_running(c, job)
            time.sleep(1.5)
            live = c.run("gpuperf", "report", job, "--json")
            assert live.returncode == 0, live.stderr
            live_s = json.loads(live.stdout)
            assert live_s["live"] is True and live_s["job_id"] == job and live_s["job"]["gpu_count"] == 2
            assert c.wait(job) == "COMPLETED"
            rec = c.wait_record(job, "merge", timeout=60)
            assert _queue_state(c, job) == "done"
    node_s = json.loads((c.run_dir / "jobs" / str(job) / "node_summary.json").read_text())
    # the node sent its series with its summary: with its daemon gone, the report charts the job
    # from the controller's store alone (what an admin sees on the controller days later)
    assert node_s["series"]["schema"] == "gpuperf.series.v1" and "0" in node_s["series"]["gpus"]
    page = c.dir / "out" / f"report-{job}.html"
    rep = c.run("gpuperf", "report", job, "--source", "controller", "--html", page)
    assert rep.returncode == 0, rep.stderr
    html_text = page.read_text()
    assert "id='no-series'" not in html_text and "chart-sm" in html_text and f"{node}:0" in html_text
    term = c.run("gpuperf", "report", job, "--source", "controller", check=True).stdout
    assert "SM active (0-100 %)" in term and f"GPU {node}:0" in term
    assert rec["data"]["merge"]["reported"] == [node] and not rec["data"]["merge"]["partial"]
    decoded = admincomment.decode(_admin_comment(c, job))
    # the service keeps a node's series apart from its summary (the store's series frame), then merges
    assert decoded == summary.merge([{k: v for k, v in node_s.items() if k != "series"}], [node])
    assert decoded["quality"]["samples"] > 0 and decoded["job"]["gpu_count"] == 2
    # what the env and affinity prolog steps left in the job's dir travelled with it
    assert node in decoded["env"] and node in decoded["affinity"]


MAIL = ("import sys\nfrom gpuperf.files import config\nfrom gpuperf.wrappers import mail\n"
        "print(mail.added_text(config.load(), {'SLURM_JOB_ID': sys.argv[1], 'SLURM_JOB_MAIL_TYPE': 'Ended'}, 'ended'))\n")


def _shown(c, job: int, *args: str, user: str | None = None) -> dict:
    """The summary ``gpuperf report JOBID`` shows, as ``user``: its --json, or the one its --html page embeds."""
    if "--html" not in args:
        p = c.run("gpuperf", "report", job, "--json", *args, user=user)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    d = c.dir / "out" / f"html-{job}-{user or 'root'}"
    d.mkdir(exist_ok=True)
    d.chmod(0o777)
    p = c.run("gpuperf", "report", job, *args, d / "job.html", user=user)
    assert p.returncode == 0, p.stderr
    page = (d / "job.html").read_text()
    import html as html_mod
    import re

    s = json.loads(html_mod.unescape(re.search(r"<pre>(.*?)</pre>", page, re.S).group(1)))
    assert html_mod.unescape(re.search(r"id='diagnosis-class'>([^<]*)<", page).group(1)) == \
        s["diagnosis"]["class"].replace("_", "-")
    return s


def test_every_reader_shows_the_judgement_the_node_made(slurm_cluster):
    """Issue 35: an ordinary user's job, judged once by its node (the daemon replays a job with phases) and kept
    by the controller: the AdminComment, the owner's report --json (through sacct, and through the node
    daemon), the admin's (the controller's store), both HTML pages and the end mail show one class, the same
    phases and the same rates; ``gpuperf jobs`` and the terminal report the same class."""
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from report_fixtures import story
    from gpuperf.report import mailtext

    rec = next((p for p in RECORDINGS if p.name.startswith("phases")), None)
    if rec is None:
        pytest.skip("no recording of a job with phases in tests/data/recordings")
    c = slurm_cluster
    with _replay_daemon(c, rec), _collector(c):
        job = c.sbatch("sleep 12\n", "--gres=gpu:1", user=c.user)
        assert c.wait(job, timeout=60) == "COMPLETED"
        c.wait_record(job, "merge", timeout=60)
        assert _queue_state(c, job) == "done"
        # the owner, on the node, before anything else: the daemon serves the summary it kept at the job's end
        got = {"owner --json (node daemon)": _shown(c, job, "--source", "daemon", user=c.user)}
    node_s = json.loads((c.run_dir / "jobs" / str(job) / "node_summary.json").read_text())
    assert node_s["diagnosis"]["phases"], "the replayed job showed no phases: nothing for the readers to lose"
    got.update({"AdminComment": admincomment.decode(_admin_comment(c, job)),
                "owner --json": _shown(c, job, user=c.user),          # the controller's store is not theirs: sacct
                "admin --json": _shown(c, job),
                "owner --html": _shown(c, job, "--html", user=c.user),
                "admin --html": _shown(c, job, "--html")})
    for reader, s in got.items():
        assert story(s) == story(node_s), f"{reader} shows another judgement than the node's"
    cls = node_s["diagnosis"]["class"]
    # the listings and the terminal report: the same class (and the terminal the same phases)
    for user in (c.user, None):
        rows = json.loads(c.run("gpuperf", "jobs", job, "--json", user=user, check=True).stdout)
        assert [r["class"] for r in rows] == [cls], (user, rows)
        term = c.run("gpuperf", "report", job, user=user, check=True).stdout
        assert cls.replace("_", "-").upper() in term and term.count("◦ phase") == len(node_s["diagnosis"]["phases"]), term
    text = c.run(PY, "-c", MAIL, job, check=True).stdout
    for line in mailtext.job_lines(str(job), node_s)[:3]:
        assert line in text, (line, text)


def test_users_list_their_own_jobs_from_sacct_in_one_call(slurm_cluster):
    """An ordinary user (no access to the controller's store) lists their jobs with class, GPU-hours,
    waste and energy from the AdminComments, through exactly one sacct call; root sees everyone's."""
    c = slurm_cluster
    node = c.node_names[0]
    with _collector(c):
        mine = c.sbatch("sleep 2\n", "--gres=gpu:1", user=c.user)
        _wait_running(c, mine)
        s = _node_summary(mine, node)
        s["user"], s["uid"] = c.user, pwd.getpwnam(c.user).pw_uid
        assert _send(c, node, s).returncode == 0
        assert c.wait(mine) == "COMPLETED"
        assert _queue_state(c, mine) == "done"
    # accounting holds the job whole (its GPUs, its AdminComment) before the user lists it
    row = c.wait_sacct(mine, "COMPLETED", timeout=60, fields=("JobID", "Start", "End", "AllocTRES", "AdminComment%60"))
    assert "gres/gpu" in row.get("AllocTRES", "") and row.get("AdminComment", "").startswith("gpuperf:"), row
    # a shim bin dir that logs every Slurm call the command makes, then runs the real tool
    shim = c.dir / "out" / "slurm-shim"
    shim.mkdir(exist_ok=True)
    calls = c.dir / "out" / "slurm-calls.log"
    calls.write_text("")
    calls.chmod(0o666)
    for tool in ("sacct", "scontrol", "sacctmgr"):
        (shim / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexec /usr/bin/{tool} "$@"\n')
        (shim / tool).chmod(0o755)
    shim.chmod(0o755)
    cfg = c.gpuperf_config()
    cfg["general"]["slurm_bin_dir"] = str(shim)
    c.write_gpuperf_config(cfg)
    try:
        # --limit 0: the default top 50 by waste leaves out a 2-second job once the suite has run 50 others
        # in the hour (seen in a full CI run)
        # sacct's period query leaves out for a second or two a job that -j already shows COMPLETED
        # (measured: listed 0.1-1.9 s later); the user lists again, one sacct call each time
        end = time.monotonic() + 30
        while True:
            calls.write_text("")
            out = c.run("gpuperf", "jobs", "--since", "1h", "--json", "--limit", "0", user=c.user)
            assert out.returncode == 0, out.stderr
            rows = json.loads(out.stdout)
            if mine in [r["job_id"] for r in rows] or time.monotonic() > end:
                break
            time.sleep(0.5)
        if mine not in [r["job_id"] for r in rows]:
            # what the user's one sacct call returned for this job, as root sees it: why it was left out
            argv = calls.read_text().split()[1:]
            seen = c.run("sacct", *[a for a in argv if a not in ("-u", c.user)], "-j", str(mine))
            pytest.fail(f"job {mine} not listed; stderr {out.stderr!r}; calls {calls.read_text()!r}; "
                        f"sacct for it: {seen.stdout!r} {seen.stderr!r}; listed {[r['job_id'] for r in rows]}")
        assert all(r["user"] == c.user for r in rows)
        row = next(r for r in rows if r["job_id"] == mine)
        decoded = admincomment.decode(_admin_comment(c, mine))
        assert row["class"] == decoded["diagnosis"]["class"] and row["gpu_hours"] == decoded["job"]["gpu_hours"]
        assert row["wasted_gpu_hours"] == decoded["job"]["wasted_gpu_hours"] and row["energy_j"] == decoded["job"]["energy_j"]
        assert [ln.split()[0] for ln in calls.read_text().splitlines()] == ["sacct"], calls.read_text()
        text = c.run("gpuperf", "jobs", "--since", "1h", "--limit", "0", user=c.user, check=True).stdout
        assert str(mine) in text and row["class"] in text
        admin = json.loads(c.run("gpuperf", "jobs", "--since", "1h", "--source", "sacct", "--json", "--limit", "0",
                                 check=True).stdout)
        assert mine in [r["job_id"] for r in admin]
    finally:
        c.reset_gpuperf_config()
