"""AdminComment shared with jobstats (and any other tool): theirs kept, gpuperf's part found and written
beside it in either order of writing, jobstats still reading its own blob (fixtures: tests/data/jobstats)."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest

from gpuperf.controller import accounting
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.model import acshare, admincomment
from report_fixtures import aggregates, context

DATA = Path(__file__).resolve().parents[1] / "data" / "jobstats"
PADDED, UNPADDED, SHORT, LOWERED = (
    (DATA / f).read_text().strip()
    for f in ("js1_1gpu_padded.txt", "js1_2node_unpadded.txt", "js1_short.txt", "js1_1gpu_as_22.05_stores_it.txt"))


def _sacctmgr_22_05(text: str) -> str:
    """What sacctmgr 22.05 stores (FACTS.md): everything lowercased, quotes turned into backticks."""
    return text.lower().replace('"', "`").replace("'", "`")


def _jobstats_reads(data: str) -> dict | None:
    """jobstats' own reading of the field (jobstats.py): a field starting JS1:, the rest through Python's
    lenient base64 decoder and gzip; None where it gives up (it then asks Prometheus)."""
    if not (data.startswith("JS1:") and len(data) > 10):
        return None
    try:
        return json.loads(gzip.decompress(base64.b64decode(data[4:])))
    except Exception:  # noqa: BLE001 - jobstats prints the error and goes on without the blob
        return None


@pytest.fixture(scope="module")
def mine() -> tuple[dict, str]:
    s = summary.node_summary(aggregates(ngpus=2), context())
    return s, admincomment.encode(s)


@pytest.mark.parametrize("theirs", [PADDED, UNPADDED, SHORT, LOWERED, "site note: rerun of 41; 'quoted' | piped"])
def test_theirs_kept_and_ours_read_in_either_order_of_writing(mine, theirs):
    s, text = mine
    # gpuperf writes after them: theirs first, untouched; gpuperf's part decodes from the field
    after = acshare.join(theirs, text)
    assert after.startswith(theirs.replace('"', "`")) and admincomment.decode(after) == s
    assert acshare.split(after).theirs == theirs and acshare.split(after).ours == text
    # they write after gpuperf (jobstats overwrites the field): gpuperf's next look puts its part back
    assert acshare.join(theirs, text) == after
    # gpuperf writes again over a field holding both: same field, nothing doubled
    assert acshare.join(after, text) == after
    # and as 22.05 stores it (lowercased): both still found, gpuperf's summary whole
    stored = _sacctmgr_22_05(after)
    assert acshare.split(stored).theirs == _sacctmgr_22_05(theirs)
    assert admincomment.decode(stored) == s and acshare.same(stored, after)


def test_gpuperf_text_alone_is_written_as_it_was(mine):
    _, text = mine
    assert acshare.join("", text) == text and acshare.join(None, text) == text
    assert acshare.join("gpuperf:v1 class=idle gpus=1 z=mfrgg", text) == text  # its own older part replaced


def test_a_newer_gpuperf_part_replaces_the_older_one_beside_theirs(mine):
    _, text = mine
    old = acshare.join(PADDED, "gpuperf:v1 class=idle gpus=2 z=mfrgg")
    assert acshare.join(old, text) == acshare.join(PADDED, text)


@pytest.mark.parametrize("blob", [PADDED, UNPADDED])
def test_jobstats_still_decodes_its_blob_beside_gpuperf(mine, blob):
    _, text = mine
    want = _jobstats_reads(blob)
    assert want and want["nodes"]["della-k1g1"]["gpu_utilization"] == {"1": 98.6}
    assert _jobstats_reads(acshare.join(blob, text)) == want


def test_without_the_base64_end_jobstats_would_lose_an_unpadded_blob(mine):
    """Why ``AA==`` goes between: a plain space lets the lenient decoder read gpuperf's part as base64."""
    _, text = mine
    assert _jobstats_reads(UNPADDED + " " + text) is None
    assert acshare.join(UNPADDED, text) == f"{UNPADDED} {acshare.B64_END} {text}"
    assert acshare.join(PADDED, text) == f"{PADDED} {text}"


def test_another_tools_text_after_gpuperfs_part_stays_after_it(mine):
    s, text = mine
    field = text + " js1-like trailer: done"
    got = acshare.split(field)
    assert got.ours == text and got.after == "js1-like trailer: done" and admincomment.decode(field) == s


def test_when_both_do_not_fit_gpuperf_keeps_its_headline_and_never_cuts_theirs(mine):
    _, text = mine
    big = "JS1:" + "A" * (acshare.LIMIT - len(text) // 2)
    got = acshare.join(big, text)
    assert got is not None and got.startswith(big) and len(got.encode()) <= acshare.LIMIT
    assert " z=" not in got and admincomment.decode_headline(got)["gpus"] == "2"
    assert acshare.join("x" * (acshare.LIMIT - 20), text) is None


def test_line_breaks_and_quotes_of_theirs_become_what_one_sacctmgr_line_carries(mine):
    _, text = mine
    got = acshare.join('note "a"\nsecond line', text)
    assert got.startswith("note `a` second line ") and '"' not in got and "\n" not in got


# the writer: one sacct read, sacctmgr, one sacct check, against a stand-in of the database ---------------

class _Db:
    """The accounting database as sacct and sacctmgr see it (22.05 lowercases what sacctmgr writes)."""

    def __init__(self, fields: dict[int, str], end: str = "2026-01-01T00:00:00", lower: bool = True):
        self.fields, self.end, self.lower, self.writes = dict(fields), end, lower, 0

    def sacct_jobs(self, job_ids, fields):
        return {j: {"JobID": str(j), "End": self.end, "AdminComment": self.fields[j]} for j in job_ids if j in self.fields}

    def set_admin_comments_db(self, items, names=None):
        self.writes += 1
        for j, t in items:
            self.fields[j] = _sacctmgr_22_05(t) if self.lower else t
        return ""


def _writer(db: _Db, recheck_s: float = 0.0) -> accounting.SacctWriter:
    w = accounting.SacctWriter("/nonexistent", recheck_s=recheck_s)
    w.slurm = db  # type: ignore[assignment]
    return w


def test_the_writer_keeps_a_js1_written_before_and_puts_its_part_back_after_one_written_later(mine):
    s, text = mine
    db = _Db({7: PADDED, 8: ""}, lower=False)
    w = _writer(db)
    assert w.write([(7, text), (8, text), (9, text)]) == {7: None, 8: None, 9: accounting.NOT_IN_DB}
    assert db.fields[7].startswith(PADDED) and admincomment.decode(db.fields[7]) == s and db.fields[8] == text
    db.fields[8] = UNPADDED  # jobstats' EpilogSlurmctld writes after gpuperf: gpuperf's part is gone
    assert w.write([(8, text)]) == {8: None}
    assert _jobstats_reads(db.fields[8]) == _jobstats_reads(UNPADDED) and admincomment.decode(db.fields[8]) == s
    writes = db.writes
    assert w.write([(8, text)]) == {8: None} and db.writes == writes  # in place already: nothing written


def test_a_job_ended_within_the_recheck_time_is_not_final_until_it_passed(mine, monkeypatch):
    _, text = mine
    db = _Db({5: ""}, end="2026-11-27T18:00:00")
    monkeypatch.setattr(accounting.time, "time", lambda: accounting.ended_s("2026-11-27T18:00:30"))
    assert _writer(db, recheck_s=60.0).write([(5, text)]) == {5: accounting.RECHECK}
    assert _writer(db, recheck_s=0.0).write([(5, text)]) == {5: None}
    assert accounting.settled({1: None, 2: "down"}, {1: "2026-11-27T18:00:00", 2: "Unknown"},
                              accounting.ended_s("2026-11-27T18:00:30"), 60.0) == {1: accounting.RECHECK, 2: "down"}
    assert accounting.settled({1: None}, {1: "1700000000"}, 1700000061.0, 60.0) == {1: None}


def test_no_room_beside_theirs_writes_nothing(mine):
    _, text = mine
    db = _Db({3: "x" * (acshare.LIMIT - 20)})
    assert _writer(db).write([(3, text)]) == {3: accounting.NO_ROOM} and db.writes == 0


def test_nothing_is_written_before_the_database_holds_the_jobs_end(mine):
    """slurmdbd gets a job's end and the AdminComment another tool set while it ran (scontrol) in one record, a
    second or two after the job ended: a write before it read an empty field and erased the other tool's text
    (the coexist test on the cluster, CI at e27611f). Until sacct shows the end, nothing is written."""
    s, text = mine
    db = _Db({6: ""}, end="Unknown")
    w = _writer(db)
    assert w.write([(6, text)]) == {6: accounting.NOT_ENDED} and db.writes == 0
    db.fields[6], db.end = PADDED, "2026-11-27T18:00:00"     # the job's end record arrives with theirs
    assert w.write([(6, text)]) == {6: None}
    assert acshare.same(acshare.split(db.fields[6]).theirs, PADDED) and admincomment.decode(db.fields[6]) == s
