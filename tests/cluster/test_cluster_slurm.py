"""The test cluster's own promises: instances side by side, each stopping only itself; up is idempotent."""

from __future__ import annotations

import pytest

try:
    from cluster.host import marked
    from cluster.slurmcluster import SlurmCluster
except ImportError:  # tests/ became a package
    from tests.cluster.host import marked
    from tests.cluster.slurmcluster import SlurmCluster

pytestmark = pytest.mark.slurm


def test_up_again_keeps_the_running_daemons(slurm_cluster):
    before = slurm_cluster.daemons()
    assert all(before.values()), before
    slurm_cluster.up()
    assert slurm_cluster.daemons() == before


def test_second_instance_runs_beside_the_first_and_stops_alone(slurm_cluster):
    first = slurm_cluster
    other = SlurmCluster(f"{first.name}-iso")
    try:
        other.up()
        before = first.daemons()
        jobs = {c: c.sbatch("echo $SLURMD_NODENAME\n", "--gres=gpu:1") for c in (first, other)}
        for c, job in jobs.items():
            assert c.wait(job) == "COMPLETED", c.logs()
            assert c.job_output(job).strip() == c.node_names[0]
        assert jobs[first] != jobs[other]
        assert other.job_record(jobs[first], "prolog") is None, "each instance records in its own run_dir"

        other.down()
        assert not any(other.daemons().values())
        assert marked(str(other.dir)) == [], "no process of the stopped instance is left"
        assert first.daemons() == before
        assert first.wait(first.sbatch("true\n")) == "COMPLETED"
    finally:
        other.down(purge=True)
    assert not other.dir.exists()
