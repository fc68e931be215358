"""The prolog's read of the job's CPUs from its cgroup on a two-socket node (``hgx-h100-2s``), in every
layout Slurm makes: cgroup v1, v2 (pure and hybrid), and 26.05's v2 directory named by the job's SLUID
(SLURM_JOB_SLUID reaches the prolog); scontrol only where no layout matches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuperf.affinity import plan as aff
from gpuperf.hookbase import jobctx
from gpuperf.hookbase.hook import HookState
from gpuperf.prolog import affinityplan
from test_affinity import _cfg, numa_cpus, topo

SLUID = "s585M8F56AJ000"
LAYOUTS = {
    "v1": f"cpuset/slurm_n1/uid_{os.getuid()}/job_77/cpuset.effective_cpus",
    "v2": "system.slice/n1_slurmstepd.scope/job_77/cpuset.cpus.effective",
    "v2 hybrid": "unified/system.slice/slurmstepd.scope/job_77/cpuset.cpus.effective",
    "v2 26.05 SLUID": f"system.slice/n1_slurmstepd.scope/{SLUID}/cpuset.cpus.effective",
}


@pytest.fixture(scope="module")
def hgx() -> dict:
    return topo("hgx-h100-2s")


def _env(**more: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": "77", "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_USER": "u",
            "SLURM_JOB_GPUS": "4,5,6,7", "SLURMD_NODENAME": "n1", **more}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_jobs_cpuset_is_read_in_every_layout(tmp_path, hgx, layout):
    f = tmp_path / "cg" / LAYOUTS[layout]
    f.parent.mkdir(parents=True)
    cpus = sorted(numa_cpus(hgx, 1))[:8]
    f.write_text(aff.format_cpu_list(cpus) + "\n")
    state = HookState()
    affinityplan.step(jobctx.from_env("prolog", _env(SLURM_JOB_SLUID=SLUID)), _cfg(tmp_path, hgx), state)
    assert state.data["affinity"]["cpus_source"] == "cgroup"
    assert state.data["affinity"]["job_cpus"] == aff.format_cpu_list(cpus)


def test_a_sluid_directory_is_not_taken_for_another_job(tmp_path, hgx):
    """Without the job's own SLUID the 26.05 directory is not found (names are made, never read)."""
    f = tmp_path / "cg" / LAYOUTS["v2 26.05 SLUID"]
    f.parent.mkdir(parents=True)
    f.write_text("0-3\n")
    state = HookState()
    affinityplan.step(jobctx.from_env("prolog", _env(SLURM_JOB_SLUID="S0OTHERJOB0000")), _cfg(tmp_path, hgx), state)
    assert state.data["affinity"]["cpus_source"] == "all"  # no scontrol in this config: all of the node's CPUs
    assert affinityplan.cgroup_patterns("/r", None, 5, "../x") == affinityplan.cgroup_patterns("/r", None, 5)
