"""gpuperf's reads of Slurm's output on every release met: 22.05 (Debian 12), 24.11 (Debian 13) and 26.05
(Debian unstable), from outputs recorded on the test cluster of each (tests/data/slurm/<release>/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuperf.access import slurm as slurm_mod
from gpuperf.access.slurm import Slurm
from gpuperf.model import acshare

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RELEASES = {"22.05": ("slurm37n1", "22.05.8"), "24.11": ("slurm37tn1", "24.11.5"), "26.05": ("slurm37sn1", "26.05.5")}


class _Recorded(Slurm):
    """Slurm whose commands answer with what the release printed."""

    def __init__(self, release: str):
        super().__init__("/nonexistent")
        self.dir = DATA / release

    def run(self, tool, *args, timeout_s=None, input=None):
        name = {"scontrol show": "scontrol_show_" + (args[1] if len(args) > 1 else ""), "sacct": "sacct_P"}
        key = "scontrol show" if tool == "scontrol" else tool
        text = (self.dir / f"{name[key].rstrip('_')}.txt").read_text()
        return text if tool != "sacct" else "\n".join(text.splitlines()[1:])  # sacct -n: no header


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_job_cpu_ids_node_layout_and_controller_read_from_each_release(release):
    node, _ = RELEASES[release]
    text = (DATA / release / "scontrol_show_job_d.txt").read_text()
    want = next(t for line in text.splitlines() for t in line.split() if t.startswith("CPU_IDs=")).partition("=")[2]
    assert slurm_mod.parse_job_cpu_ids(text, node) == want
    s = _Recorded(release)
    assert s.node_cpu_layout(node) == (2, 8, 1)
    host = s.ctld_host()
    assert host and host in (DATA / release / "scontrol_show_config.txt").read_text()


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_sacct_fields_and_admin_comment_read_from_each_release(release):
    rows = _Recorded(release).sacct_jobs([int((DATA / release / "sacct_P.txt").read_text().splitlines()[1].split("|")[0])],
                                         ("JobID", "JobID", "End", "AllocTRES", "TRESUsageInAve", "AdminComment%65535"))
    (row,) = rows.values()
    assert "gres/gpu=2" in row["AllocTRES"]
    # 22.05's sacctmgr lowercased the comment; 24.11 and 26.05 keep its case (quotes still become backticks)
    assert acshare.split(row["AdminComment"]).theirs == ("js1:h4siabc==" if release == "22.05" else "JS1:H4sIAbC==")
    assert acshare.ours(row["AdminComment"]) == "gpuperf:v1 class=idle"


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_sacct_json_of_each_schema_version(release):
    doc = json.loads((DATA / release / "sacct_json.json").read_text())
    assert slurm_mod.sacct_json_release(doc) == RELEASES[release][1]
    (job,) = slurm_mod.parse_sacct_json(doc).values()
    assert job["tres"]["gres/gpu"] == 2 and job["tres"]["cpu"] == 4
    assert acshare.ours(job["admin_comment"]) == "gpuperf:v1 class=idle"


def test_scontrol_json_exists_from_23_02_only():
    """22.05 has no ``scontrol --json`` (FACTS.md): its job detail is read as text on every release."""
    assert not (DATA / "22.05" / "scontrol_json_show_job_d.json").exists()
    for release in ("24.11", "26.05"):
        doc = json.loads((DATA / release / "scontrol_json_show_job_d.json").read_text())
        assert doc["jobs"][0]["job_resources"]["nodes"]["allocation"][0]["cpus"]["count"] == 4


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_doctor_reads_the_hooks_of_each_releases_config(release):
    """24.11 and 26.05 print ``Prolog[0] = ...`` (a hook may name several programs), 22.05 ``Prolog = ...``."""
    from gpuperf.commands import doctor

    sc = doctor.parse_key_values((DATA / release / "scontrol_show_config.txt").read_text())
    for key in ("Prolog", "Epilog", "TaskProlog", "EpilogSlurmctld"):
        assert doctor.setting(sc, key).endswith("/hooks/" + {"EpilogSlurmctld": "epilog-slurmctld"}.get(key, key.lower()))
    assert doctor.setting(sc, "PrologFlags") == "Alloc,Contain"


@pytest.mark.parametrize("answer", [
    "sacctmgr: error: Nothing modified",                                                         # 22.05
    " Nothing modified\nsacctmgr: error: Request didn't affect anything or your user doesn't have privilege",  # 24.11
    " Modified jobs...\n Error with request: Data has not changed since time specified",           # 26.05
])
def test_doctor_takes_each_releases_answer_to_its_test_write(answer):
    from gpuperf.commands import doctor_checks

    (got,) = doctor_checks.check_sacctmgr({"controller": True, "slurm": {"AccountingStorageType": "accounting_storage/slurmdbd"},
                                           "sacctmgr": (1, answer)})
    assert got.status == "ok", got
