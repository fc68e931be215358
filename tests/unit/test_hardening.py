"""Files a job's user writes never hang, exhaust or mislead the root process that reads them.

The readers run in a child process with a memory limit and a liveness bound: on code that hangs
(a FIFO) or reads without end (a link to /dev/zero) the child is killed and the test fails, instead
of hanging the suite or taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuperf.affinity import plan as aff

LIVENESS_S = 30          # far above any honest read; only a hang reaches it
CHILD_MEM = 512 << 20    # a root reader of job records must not need more than this


def _in_child(code: str, tmp_path: Path) -> dict:
    """Run ``code`` (which sets ``result``) in a child limited in memory and time; its JSON result."""
    body = textwrap.indent(textwrap.dedent(code).strip(), "    ")
    script = (f"import json, resource, sys\n"
              f"resource.setrlimit(resource.RLIMIT_AS, ({CHILD_MEM}, {CHILD_MEM}))\n"
              f"try:\n{body}\nexcept MemoryError:\n    result = {{'error': 'MemoryError'}}\n"
              f"print(json.dumps(result))\n")
    try:
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=LIVENESS_S,
                           cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the reader did not return within {LIVENESS_S} s (blocked)")
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _job_with_applied(tmp_path: Path) -> Path:
    jdir = tmp_path / "jobs" / "5"
    d = jdir / "applied"
    d.mkdir(parents=True)
    (d / "0.0").write_text(aff.applied_line({"job": 5, "step": "0", "rank": 0, "status": "ok"}))
    return jdir


READ_APPLIED = """
    from pathlib import Path
    from gpuperf.affinity import report as affinity_report
    recs = affinity_report.applied_records(%r, 5)
    result = {"records": [[r["step"], r["rank"]] for r in recs]}
"""


def test_fifo_in_applied_dir_does_not_hang_the_reader(tmp_path):
    jdir = _job_with_applied(tmp_path)
    os.mkfifo(jdir / "applied" / "0.1")
    out = _in_child(READ_APPLIED % str(tmp_path), tmp_path)
    assert out == {"records": [["0", "0"]]}


def test_symlink_to_dev_zero_in_applied_dir_is_not_followed(tmp_path):
    jdir = _job_with_applied(tmp_path)
    os.symlink("/dev/zero", jdir / "applied" / "0.1")
    out = _in_child(READ_APPLIED % str(tmp_path), tmp_path)
    assert out == {"records": [["0", "0"]]}


def test_fifo_named_like_a_step_record_does_not_hang_the_env_report(tmp_path):
    jdir = tmp_path / "jobs" / "5"
    (jdir / "env").mkdir(parents=True)
    (jdir / "env.json").write_text(json.dumps({"vars": [], "skipped": [], "notes": []}))
    (jdir / "env" / "step-0.json").write_text(json.dumps({"step": "0", "exported": [["A", "1"]]}))
    os.mkfifo(jdir / "env" / "step-x.json")
    out = _in_child(f"""
        from gpuperf.env import report as env_report
        rep = env_report.report({str(jdir)!r})
        result = {{"steps": sorted(rep["steps"])}}
    """, tmp_path)
    assert out == {"steps": ["0"]}


# --- safeio: each thing a user can plant is refused with a reason, and nothing else is lost -------

from gpuperf.files import safeio  # noqa: E402
from gpuperf.diagnosis.jobsummary import node_summary  # noqa: E402


def _reasons(tmp_path: Path, **kw) -> tuple[list[str], list[str]]:
    ign = safeio.Ignored()
    got = safeio.read_dir(tmp_path / "d", ignored=ign, **kw)
    return [n for n, _ in got], ign.shown()


@pytest.fixture
def userdir(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "good").write_text("ok")
    return d


@pytest.mark.parametrize("plant, why", [
    (lambda d: os.mkfifo(d / "x"), "a FIFO, not a regular file"),
    (lambda d: os.symlink("/dev/zero", d / "x"), "a symbolic link, not a regular file"),
    (lambda d: os.symlink("/etc/shadow", d / "x"), "a symbolic link, not a regular file"),
    (lambda d: os.mkdir(d / "x"), "a directory, not a regular file"),
    (lambda d: os.link(d / "good", d / "x"), "a hard link (2 links)"),
])
def test_planted_entries_are_refused_with_their_reason(userdir, tmp_path, plant, why):
    plant(userdir)
    names, reasons = _reasons(tmp_path)
    if "hard link" in why:  # both names of the linked file are refused: neither is the job's own record
        assert names == [] and f"record ignored: d/x: {why}" in reasons
    else:
        assert names == ["good"] and reasons == [f"record ignored: d/x: {why}"]


def test_a_sparse_1gb_file_is_refused_before_reading(userdir, tmp_path):
    with open(userdir / "big", "wb") as f:
        f.truncate(1 << 30)
    names, reasons = _reasons(tmp_path)
    assert names == ["good"] and reasons == [f"record ignored: d/big: {1 << 30} bytes, over the {safeio.MAX_BYTES}-byte limit"]


def test_a_file_of_another_owner_is_refused(userdir, tmp_path):
    names, reasons = _reasons(tmp_path, uid=os.getuid() + 1)
    assert names == [] and "owned by uid" in reasons[0]


def test_100000_entries_cost_no_more_than_max_entries(userdir, tmp_path):
    for i in range(100_000):
        os.close(os.open(userdir / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o600))
    names, reasons = _reasons(tmp_path, max_entries=100)
    assert len(names) <= 100
    assert f"record ignored: d: more than 100 entries: only the first 100 read" in reasons


def test_names_with_newlines_and_escapes_are_shown_escaped(userdir, tmp_path):
    os.mkfifo(userdir / "a\nrecord ignored: fake\x1b[2J")
    _, reasons = _reasons(tmp_path)
    assert reasons == ["record ignored: d/a\\nrecord ignored: fake\\x1b[2J: a FIFO, not a regular file"]


def test_bad_utf8_and_deep_json_do_not_raise(tmp_path):
    (tmp_path / "u").write_bytes(b"\xff\xfe ok")
    assert safeio.read_text(tmp_path / "u") == "\ufffd\ufffd ok"
    (tmp_path / "j").write_text("[" * 200_000 + "]" * 200_000)
    ign = safeio.Ignored()
    assert safeio.read_json(tmp_path / "j", ignored=ign) is None
    assert ign.reasons == ["record ignored: j: not JSON (JSON nested too deeply)"]


def test_a_link_in_place_of_the_directory_is_not_followed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    os.symlink(tmp_path / "real", tmp_path / "d")
    names, reasons = _reasons(tmp_path)
    assert names == [] and reasons == ["record ignored: d: a symbolic link"]


def test_the_node_summary_says_what_was_ignored(tmp_path):
    jdir = _job_with_applied(tmp_path)
    os.mkfifo(jdir / "applied" / "0.1")
    os.symlink("/etc/shadow", jdir / "applied" / "0.2")
    (jdir / "affinity.json").write_text("{}")
    (jdir / "env").mkdir()
    (jdir / "env.json").write_text(json.dumps({"vars": [], "skipped": [], "notes": []}))
    with open(jdir / "env" / "step-0.json", "wb") as f:
        f.truncate(1 << 30)
    s = node_summary({"job_id": 5, "gpus": {}}, {"job_id": 5, "node": "n1", "job_dir": str(jdir)})
    assert sorted(s["quality"]["ignored"]) == [
        "record ignored: applied/0.1: a FIFO, not a regular file",
        "record ignored: applied/0.2: a symbolic link, not a regular file",
        f"record ignored: env/step-0.json: {1 << 30} bytes, over the {64 << 10}-byte limit",
    ]
    assert s["affinity"]["n1"]["0"]["status"] == "ok"      # the honest record still counts
    from gpuperf.report import terminal
    assert "record ignored: applied/0.1: a FIFO" in terminal.render(s)


def test_terminal_escapes_in_a_users_records_reach_no_report_raw(tmp_path):
    # rich keeps ESC: a record saying status=\x1b[2J would clear the admin's screen in `gpuperf report`
    jdir = tmp_path / "jobs" / "5"
    (jdir / "applied").mkdir(parents=True)
    (jdir / "affinity.json").write_text("{}")
    (jdir / "applied" / "0.0").write_text("job=5 step=0 rank=0 status=ok\x1b[2J gpus=0\x9b1m")
    (jdir / "env").mkdir()
    (jdir / "env.json").write_text(json.dumps({"vars": [{"name": "OMP_NUM_THREADS", "value": "4", "per_task": True}]}))
    (jdir / "env" / "step-0.json").write_text(json.dumps({"step": "0", "exported": [["OMP_NUM_THREADS", "4\x1b]0;owned\x07"]]}))
    s = node_summary({"job_id": 5, "gpus": {}}, {"job_id": 5, "node": "n1", "job_dir": str(jdir)})
    text = json.dumps(s, ensure_ascii=False)
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert s["affinity"]["n1"]["0"]["status"] == "ok\\x1b[2J"
    assert s["env"]["n1"]["vars"]["OMP_NUM_THREADS"]["value"] == "4\\x1b]0;owned\\x07"


def test_refusals_beyond_the_shown_ones_are_counted_not_logged(caplog):
    ign = safeio.Ignored()
    with caplog.at_level("WARNING", logger="gpuperf.files.safeio"):
        for i in range(5000):
            ign.add(f"applied/x{i}-{id(ign)}", "a FIFO, not a regular file")
    assert len(caplog.records) == safeio.SHOWN + 1
    assert ign.shown()[-1] == f"record ignored: {5000 - safeio.SHOWN} more"
