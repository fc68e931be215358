"""Job references as Slurm users write them (``gpuperf.model.jobref``) and their resolution on
sacct/squeue lines (``gpuperf.jobrecords.resolve.choose``): ``8_3`` is never job 83."""

from __future__ import annotations

import pytest

from gpuperf.access.slurm import Slurm, SlurmError
from gpuperf.jobrecords import resolve
from gpuperf.model import jobref
from gpuperf.model.jobref import JobRef, JobRefError


@pytest.mark.parametrize("text,want", [
    ("12", JobRef(12)), ("8_3", JobRef(8, task=3)), ("1_0", JobRef(1, task=0)), ("10+1", JobRef(10, het=1)),
    ("12.0", JobRef(12, step="0")), ("12.batch", JobRef(12, step="batch")), ("8_3.extern", JobRef(8, 3, None, "extern")),
    (" 10+0.2 ", JobRef(10, het=0, step="2")),
])
def test_parse_accepts_slurm_forms_and_prints_them_back(text, want):
    got = jobref.parse(text)
    assert got == want and str(got) == text.strip()


@pytest.mark.parametrize("text", ["", "abc", "8_", "_3", "8__3", "8_3_1", "8+1_2", "0", "012", "8.", "8.foo",
                                  "8_[1-3]", "-8", "8 3", "1e3", "８", "1８", "8_３"])
def test_parse_refuses_the_rest_and_says_what_is_accepted(text):
    with pytest.raises(JobRefError) as e:
        jobref.parse(text)
    assert "8_3" in str(e.value) and "10+1" in str(e.value) and "12.batch" in str(e.value)


def test_python_int_would_read_an_array_task_as_another_job():
    # the bug this module exists for: int() takes underscores as digit separators
    assert int("8_3") == 83 and jobref.parse("8_3") != JobRef(83)


# what sacct -n -P -X -o JobIDRaw,JobID,State prints for array 8 (tasks 1-3 started, 4-5 pending),
# het job 20 (components 20+0, 20+1 with raw ids 20, 21) and plain job 83
ARRAY = [(9, "8_1", "COMPLETED"), (10, "8_2", "COMPLETED"), (8, "8_3", "RUNNING"), (8, "8_[4-5]", "PENDING")]
HET = [(20, "20+0", "COMPLETED"), (21, "20+1", "COMPLETED")]


def test_choose_an_array_task_by_name_never_by_digits():
    assert resolve.choose(JobRef(8, task=3), ARRAY) == [resolve.Job(8, "8_3", "RUNNING")]
    assert resolve.choose(JobRef(8, task=3), [(83, "83", "COMPLETED")]) == []
    # a plain number: every started task (a listing), ordered by task
    assert [j.name for j in resolve.choose(JobRef(8), ARRAY)] == ["8_1", "8_2", "8_3"]
    # the raw id of one task names that task
    assert resolve.choose(JobRef(10), [(10, "8_2", "COMPLETED")]) == [resolve.Job(10, "8_2", "COMPLETED")]


def test_choose_het_components():
    assert resolve.choose(JobRef(20, het=1), HET) == [resolve.Job(21, "20+1", "COMPLETED")]
    assert [j.raw for j in resolve.choose(JobRef(20), HET)] == [20, 21]
    assert resolve.choose(JobRef(20, task=1), HET) == []


class FakeSlurm(Slurm):
    """Slurm's answers as lines (a unit test of the choice, not of Slurm: tests/integration has that)."""

    def __init__(self, lines=None, error=None):
        super().__init__("/nonexistent")
        self.lines, self.error = lines or [], error

    def job_ids(self, ref):
        if self.error:
            raise SlurmError(self.error)
        return self.lines


def test_resolve_one_needs_one_allocation_and_names_the_choices():
    assert resolve.resolve_one(FakeSlurm(ARRAY), JobRef(8, task=2)).raw == 10
    with pytest.raises(resolve.JobLookupError, match=r"array job of 3 allocations \(8_1, 8_2, 8_3\)"):
        resolve.resolve_one(FakeSlurm(ARRAY), JobRef(8))
    with pytest.raises(resolve.JobLookupError, match="heterogeneous job"):
        resolve.resolve_one(FakeSlurm(HET), JobRef(20))
    with pytest.raises(resolve.JobLookupError, match="knows no job 1_0"):
        resolve.resolve_one(FakeSlurm([(10, "10", "COMPLETED")]), JobRef(1, task=0))


def test_without_slurm_a_plain_number_is_the_raw_id_and_an_array_task_an_error():
    assert resolve.resolve_one(FakeSlurm(error="sacct not found"), JobRef(12)) == resolve.Job(12, "12")
    with pytest.raises(resolve.JobLookupError, match="Slurm did not answer"):
        resolve.resolve_one(FakeSlurm(error="sacct not found"), JobRef(8, task=3))


def _fake_slurm(tmp_path, sacct: str, squeue: str) -> Slurm:
    """sacct and squeue that print fixed lines (their real output is tested on the cluster)."""
    for tool, out in (("sacct", sacct), ("squeue", squeue)):
        (tmp_path / tool).write_text(f"#!/bin/sh\nprintf '{out}'\n")
        (tmp_path / tool).chmod(0o755)
    return Slurm(str(tmp_path))


def test_job_ids_take_a_tasks_own_name_over_the_bare_array_id_or_a_pending_range(tmp_path):
    # the last task of array 8 has raw id 8: at its end sacct may still print it as "8" while squeue
    # says "8_2"; before it starts, both print the pending range "8_[2]"
    s = _fake_slurm(tmp_path, "8|8|COMPLETED\\n9|8_1|COMPLETED\\n", "8|8_2|COMPLETING\\n")
    assert s.job_ids("8") == [(8, "8_2", "COMPLETING"), (9, "8_1", "COMPLETED")]
    s = _fake_slurm(tmp_path, "8|8_[2]|PENDING\\n", "8|8_2|RUNNING\\n")
    assert s.job_ids("8") == [(8, "8_2", "RUNNING")]
    s = _fake_slurm(tmp_path, "8|8_2|COMPLETED\\n", "8|8|COMPLETED\\n")
    assert s.job_ids("8") == [(8, "8_2", "COMPLETED")]


def test_names_of_a_long_listing_take_one_call_over_the_period_then_ask_only_the_rest(tmp_path):
    log = tmp_path / "calls.log"
    (tmp_path / "sacct").write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nprintf '8|8_3\\n9|9\\n12|10+1\\n'\n")
    (tmp_path / "sacct").chmod(0o755)
    got = resolve.names(Slurm(str(tmp_path)), [8, 9, 12, 77], since="2026-11-01T00:00:00")
    assert got == {8: "8_3", 9: "9", 12: "10+1"}
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and "-S 2026-11-01T00:00:00" in calls[0] and "-j 77 " in calls[1]
