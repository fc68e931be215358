"""Jobs as Slurm users name them, on the real test cluster: array tasks (``A_3``), het components
(``H+1``), steps, and CPU-only jobs that gpuperf leaves alone.

The node daemon (replaying a recording) and the controller service run as in production; the
summaries come from the cluster's own prolog, epilog and EpilogSlurmctld. ``gpuperf report A_3``
must show task 3 of array A, never job int("A_3") = A3. Run with ``GPUPERF_TEST_CLUSTER=names``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpuperf.model import admincomment
from test_daemon_slurm import RECORDINGS, _configure, _start
from test_report_slurm import _admin_comment, _collector, _node_summary, _queue_state, _send, _set_wait

pytestmark = pytest.mark.slurm
PREFIX = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf")


def _allocations(c, ref: str, count: int, timeout: float = 60) -> list[tuple[int, str]]:
    """(raw id, name) of the ``count`` started allocations ``ref`` names, once all have ended."""
    end = time.time() + timeout
    got: list[tuple[int, str, str]] = []
    while time.time() < end:
        out = c.run("sacct", "-n", "-P", "-X", "-j", ref, "-o", "JobIDRaw,JobID,State").stdout
        got = [tuple(ln.split("|")) for ln in out.splitlines() if ln.count("|") == 2 and "[" not in ln]
        if len(got) == count and all(s.split()[0] not in ("PENDING", "RUNNING", "COMPLETING") for _, _, s in got):
            return sorted((int(r), n) for r, n, _ in got)
        time.sleep(0.3)
    raise AssertionError(f"{ref}: {got}")


@contextmanager
def _services(c, **report):
    """The node daemon and the controller service up on the one-node cluster, both reading the config
    (with ``report`` keys set)."""
    if not RECORDINGS:
        pytest.skip("no recording in tests/data/recordings for the daemon to replay")
    cfg = _configure(c)
    if report:
        cfg.setdefault("report", {}).update(report)
        c.write_gpuperf_config(cfg)
    daemon = _start(c)
    try:
        with _collector(c):
            yield c
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(10)


@pytest.fixture
def daemon_and_collector(gpuperf_config_reset):
    with _services(gpuperf_config_reset) as c:
        yield c


def _each_task_holds_its_own_comment(c, tasks: list[tuple[int, str]]) -> None:
    """Every task's AdminComment names it (EpilogSlurmctld's SLURM_ARRAY_*) and holds its own summary."""
    for raw, name in tasks:
        text = _admin_comment(c, name)
        head = text.split(" z=")[0]
        assert head.startswith("gpuperf:v1 class=") and head.endswith(f" job={name}"), (name, head)
        assert admincomment.decode(text)["job_id"] == raw


# Known, not yet understood (2026-11-27, commit 4afc3df): on 24.11 and 26.05, run after test_report_slurm and
# test_coexist_slurm in one cluster (tests/run-suites.sh's order), the array's last task (the one under the array's
# own id) is reported with gpu_count 0; alone it passes on both, and on 22.05 it passes in the whole suite. Kept
# running there, marked, so it is seen and not silently dropped.
@pytest.mark.xfail(os.environ.get("GPUPERF_SLURM_SUITE") in ("trixie", "sid"), strict=False,
                   reason="24.11/26.05: the array's last task reads gpu_count 0 after the report and coexist tests")
def test_array_tasks_are_reported_and_listed_by_their_names(daemon_and_collector):
    c = daemon_and_collector
    array = c.sbatch("sleep 2\n", "-a", "1-3", "--gres=gpu:1")
    tasks = _allocations(c, str(array), 3)
    assert sorted(n for _, n in tasks) == [f"{array}_1", f"{array}_2", f"{array}_3"]
    for raw, _ in tasks:
        assert c.wait(raw) == "COMPLETED"
        assert _queue_state(c, raw) == "done"
    raw3 = dict((n, r) for r, n in tasks)[f"{array}_3"]
    _each_task_holds_its_own_comment(c, tasks)
    # the task that runs under the array's own id, written again: its siblings keep theirs (sacctmgr's
    # jobid=<array id> would select every task)
    last = next(n for r, n in tasks if r == array)
    again = (f"import json; from gpuperf.controller.accounting import SacctWriter; "
             f"print(json.dumps(SacctWriter('/usr/bin').write([({array}, {_admin_comment(c, last)!r})])))")
    wrote = c.run(f"{PREFIX}/venv/bin/python", "-c", again, check=True).stdout
    assert json.loads(wrote) == {str(array): None}, wrote
    _each_task_holds_its_own_comment(c, tasks)

    rep = c.run("gpuperf", "report", f"{array}_3", "--json")
    assert rep.returncode == 0, rep.stderr
    s = json.loads(rep.stdout)
    # task 3 of the array: its own raw id, its own name; int("A_3") would have been job A3
    assert s["job_id"] == raw3 and s["job_ref"] == f"{array}_3" and s["job"]["gpu_count"] == 1
    term = c.run("gpuperf", "report", f"{array}_3")
    assert term.returncode == 0 and f"Job {array}_3" in term.stdout, term.stderr
    page = c.dir / "out" / f"report-{array}_3.html"
    assert c.run("gpuperf", "report", f"{array}_3", "--html", page).returncode == 0
    assert f"job {array}_3</h1>" in page.read_text()
    step = c.run("gpuperf", "report", f"{array}_3.batch", "--json")
    assert step.returncode == 0 and json.loads(step.stdout)["job_id"] == raw3
    assert f"{array}_3.batch is a step" in step.stderr

    whole = c.run("gpuperf", "report", str(array))
    assert whole.returncode == 1 and f"array job of 3 allocations ({array}_1, {array}_2, {array}_3)" in whole.stderr
    missing = c.run("gpuperf", "report", f"{array}_9")
    assert missing.returncode == 1 and f"knows no job {array}_9" in missing.stderr
    bad = c.run("gpuperf", "report", f"{array}_x")
    assert bad.returncode == 2 and "10+1" in bad.stderr and "Traceback" not in bad.stderr

    for source in ("store", "sacct"):
        rows = json.loads(c.run("gpuperf", "jobs", str(array), "--source", source, "--json", check=True).stdout)
        assert sorted(r["job"] for r in rows) == sorted(n for _, n in tasks), (source, rows)
        assert sorted(r["job_id"] for r in rows) == sorted(r for r, _ in tasks)
    one = json.loads(c.run("gpuperf", "jobs", f"{array}_2", "--json", check=True).stdout)
    assert [r["job"] for r in one] == [f"{array}_2"]
    text = c.run("gpuperf", "jobs", "--since", "1h", check=True).stdout
    assert f"{array}_1" in text and f"{array}_3" in text


def test_cpu_only_job_costs_nothing_and_says_nothing(daemon_and_collector):
    c = daemon_and_collector
    job = c.sbatch("sleep 1\n")
    assert c.wait(job) == "COMPLETED"
    prolog, epilog = c.job_record(job, "prolog"), c.wait_record(job, "epilog")
    assert prolog["data"]["register"] == {"ok": True, "skipped": "no GPU on this node"}, prolog["data"]
    assert epilog["data"]["finalize"] == {"ok": True, "skipped": "no GPU on this node"}, epilog["data"]
    assert _queue_state(c, job) == "skipped"
    assert _admin_comment(c, job) == ""
    assert not (c.run_dir / "jobs" / str(job) / "node_summary.json").exists()
    for flags in ((), ("--cpu-jobs",)):
        rows = json.loads(c.run("gpuperf", "jobs", str(job), *flags, "--json", check=True).stdout)
        assert rows == []
    # a GPU job beside it is followed as before
    gpu_job = c.sbatch("sleep 1\n", "--gres=gpu:1")
    assert c.wait(gpu_job) == "COMPLETED"
    assert c.job_record(gpu_job, "prolog")["data"]["register"]["ok"] is True
    assert _queue_state(c, gpu_job) == "done" and _admin_comment(c, gpu_job).startswith("gpuperf:v1")
    assert "job=" not in _admin_comment(c, gpu_job).split(" z=")[0]  # a plain job: sacct's JobID names it


def test_cpu_jobs_opt_in_follows_them(gpuperf_config_reset):
    with _services(gpuperf_config_reset, cpu_jobs=True) as c:
        job = c.sbatch("sleep 1\n")
        assert c.wait(job) == "COMPLETED"
        assert "skipped" not in c.job_record(job, "prolog")["data"]["register"]
        assert _queue_state(c, job) == "done" and "gpus=0" in _admin_comment(c, job)
        assert json.loads(c.run("gpuperf", "jobs", str(job), "--json", check=True).stdout) == []
        rows = json.loads(c.run("gpuperf", "jobs", str(job), "--cpu-jobs", "--json", check=True).stdout)
        assert [r["job_id"] for r in rows] == [job]


def test_het_job_components_by_name(slurm_cluster2):
    c = slurm_cluster2
    _set_wait(c, 20.0)
    try:
        with _collector(c):
            # component 0 holds no GPU, component 1 one GPU (het components of one job get separate nodes)
            het = c.sbatch("sleep 3\n", "--mem=100", ":", "--mem=100", "--gres=gpu:1")
            end = time.time() + 60
            while time.time() < end:
                out = c.run("squeue", "-h", "-j", str(het), "-o", "%A|%i|%T|%N").stdout
                lines = [ln.split("|") for ln in out.splitlines()]
                if len(lines) == 2 and all(ln[2] == "RUNNING" for ln in lines):
                    break
                time.sleep(0.3)
            comps = {name: (int(raw), node) for raw, name, _, node in lines}
            assert set(comps) == {f"{het}+0", f"{het}+1"}, lines
            raw1, node1 = comps[f"{het}+1"]
            raw0, node0 = comps[f"{het}+0"]
            sent = _send(c, node1, _node_summary(raw1, node1))
            assert sent.returncode == 0, sent.stdout + sent.stderr
            _allocations(c, str(het), 2)
            assert _queue_state(c, raw1) == "done"
            assert _queue_state(c, raw0) == "skipped"
            assert _admin_comment(c, raw1).split(" z=")[0].endswith(f" job={het}+1")
        assert c.job_record(raw0, "prolog", node=node0)["data"]["register"]["skipped"] == "no GPU on this node"
        rep = c.run("gpuperf", "report", f"{het}+1", "--json")
        assert rep.returncode == 0, rep.stderr
        s = json.loads(rep.stdout)
        assert s["job_id"] == raw1 and s["job_ref"] == f"{het}+1"
        # the raw id of a component names it too
        assert json.loads(c.run("gpuperf", "report", raw1, "--json", check=True).stdout)["job_ref"] == f"{het}+1"
        whole = c.run("gpuperf", "report", het)
        assert whole.returncode == 1 and "heterogeneous job of 2 allocations" in whole.stderr
        cpu = c.run("gpuperf", "report", f"{het}+0")
        assert cpu.returncode == 1 and f"no summary for job {het}+0" in cpu.stderr
        rows = json.loads(c.run("gpuperf", "jobs", het, "--json", check=True).stdout)
        assert [r["job"] for r in rows] == [f"{het}+1"]
    finally:
        c.reset_gpuperf_config()


MAIL_SINK = """#!/bin/sh
# a local mail sink: records what the mail program got (arguments, body), one file per mail
f={out}/mail.$$
{{ printf 'ARGS:'; for a in "$@"; do printf ' [%s]' "$a"; done; echo; cat; }} > $f.tmp && mv $f.tmp $f.txt
"""


def _mails(out: Path, count: int, timeout: float = 90) -> list[str]:
    end = time.time() + timeout
    while time.time() < end:
        got = sorted(out.glob("mail.*.txt"))
        if len(got) >= count:
            return [p.read_text() for p in got]
        time.sleep(0.3)
    raise AssertionError(f"{len(list(out.glob('mail.*.txt')))} of {count} mails")


def test_end_mail_carries_the_headline_and_falls_back_untouched(gpuperf_config_reset):
    """MailProg=gpuperf-mail (README's lines): the end mail of a GPU job gets the job's headline and top
    recommendation, an array's summary mail a line per task; a CPU-only job's mail is Slurm's own."""
    from test_doctor_slurm import slurm_conf_variant

    c = gpuperf_config_reset
    out = c.dir / "out" / "mails"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    sink = c.dir / "out" / "mail-sink.sh"
    sink.write_text(MAIL_SINK.format(out=out))
    sink.chmod(0o755)
    # what an admin points MailProg at: the installed gpuperf-mail (here with the instance's config)
    wrapper = c.dir / "out" / "gpuperf-mail"
    wrapper.write_text(f"#!/bin/sh\nexport GPUPERF_CONFIG={c.gpuperf_config_path} SLURM_CONF={c.layout.slurm_conf}\n"
                       f"exec {PREFIX}/venv/bin/gpuperf-mail \"$@\"\n")
    wrapper.chmod(0o755)
    with _services(c, mail_program=str(sink), mail_wait_s=30.0), \
            slurm_conf_variant(c, "\nMailProg=/bin/true\n", f"\nMailProg={wrapper}\n"):
        gpu = c.sbatch("sleep 2\n", "--gres=gpu:1", "--mail-type=END", "--mail-user=alice")
        cpu = c.sbatch("sleep 1\n", "--mail-type=END", "--mail-user=bob")
        array = c.sbatch("sleep 1\n", "-a", "1-2", "--gres=gpu:1", "--mail-type=END", "--mail-user=carol")
        t_end = {}
        for job in (gpu, cpu):
            assert c.wait(job) == "COMPLETED"
            t_end[job] = time.time()
        _allocations(c, str(array), 2)
        mails = _mails(out, 3)
    by_user = {m.splitlines()[0].rsplit("[", 1)[1].rstrip("]"): m for m in mails}
    assert set(by_user) == {"alice", "bob", "carol"}, mails
    g = by_user["alice"]
    assert f"Job_id={gpu} " in g.splitlines()[0] and "Ended" in g.splitlines()[0]  # Slurm's subject kept
    assert f"Job {gpu}: " in g and "GPU-second" in g and f"gpuperf report {gpu}" in g, g
    assert "Top recommendation: " in g
    # nothing from gpuperf for a CPU-only job: Slurm's mail as it was (an empty body)
    assert by_user["bob"].splitlines()[1:] == [], by_user["bob"]
    a = by_user["carol"]
    assert "Array Summary" in a.splitlines()[0] and f"Job {array}_1: " in a and f"Job {array}_2: " in a, a
