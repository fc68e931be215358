"""Shared pytest fixtures: the real Slurm test cluster (tests/cluster/README.md).

``slurm_cluster`` (one node) and ``slurm_cluster2`` (two nodes in their own network namespaces)
are session-scoped and started only when a test asks for them. The instance name is
``$GPUPERF_TEST_CLUSTER`` (default ``pytest``): give each concurrent pytest run its own.
``GPUPERF_KEEP_CLUSTER=1`` leaves the cluster running after the session (faster reruns).

Last of all, after every fixture is torn down, the session checks that it left nothing of gpuperf
under /etc, /var/lib, /run or /var/log that was not there when it started (``hoststate.py``): a path
that appeared fails the session (exit status 1) and is named.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    import hoststate
    from cluster.slurmcluster import ClusterError, SlurmCluster, can_run, can_run_multi
except ImportError:  # tests/ became a package
    from tests import hoststate
    from tests.cluster.slurmcluster import ClusterError, SlurmCluster, can_run, can_run_multi

# fixture trees hold copies of sysfs whose symlinks form cycles: collection would never end
collect_ignore = ["data"]


_HOST_BEFORE: set[str] = set()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: needs the real Slurm test cluster (root, Debian packages)")


def pytest_sessionstart(session: pytest.Session) -> None:
    _HOST_BEFORE.update(hoststate.snapshot())


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite's last check: runs after all tests and every fixture's teardown (clusters stopped)."""
    leaked = hoststate.new_paths(_HOST_BEFORE, hoststate.snapshot())
    if not leaked:
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    msg = "\nFAILED host-state check: " + hoststate.report(leaked)
    if tr is not None:
        tr.write_line(msg, red=True)
    else:
        print(msg)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _holder(cluster: SlurmCluster) -> Path:
    return cluster.dir / "holders" / str(os.getpid())


def _others_holding(cluster: SlurmCluster) -> bool:
    """Another live pytest process uses the same instance: leave it running for them."""
    for f in (cluster.dir / "holders").glob("*"):
        pid = int(f.name) if f.name.isdigit() else 0
        if pid and pid != os.getpid() and Path(f"/proc/{pid}").exists():
            return True
        if pid != os.getpid():
            f.unlink(missing_ok=True)
    return False


def _session_cluster(name: str, nodes: int):
    why = can_run() if nodes == 1 else can_run_multi()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(name, nodes=nodes)
    try:
        cluster.up()
    except (ClusterError, OSError) as e:
        pytest.fail(f"Slurm test cluster {name!r} did not start: {e}\n\n{cluster.logs()}", pytrace=False)
    holder = _holder(cluster)
    holder.parent.mkdir(exist_ok=True)
    holder.touch()
    yield cluster
    holder.unlink(missing_ok=True)
    if os.environ.get("GPUPERF_KEEP_CLUSTER") != "1" and not _others_holding(cluster):
        cluster.down()


@pytest.fixture(scope="session")
def slurm_cluster():
    """A single-node Slurm cluster (4 fake GPUs, 16 CPUs) with gpuperf's hooks wired in."""
    cluster_name = os.environ.get("GPUPERF_TEST_CLUSTER", "pytest")
    yield from _session_cluster(cluster_name, 1)


@pytest.fixture(scope="session")
def slurm_cluster2():
    """A two-node Slurm cluster (each slurmd in its own network namespace, 4 fake GPUs each)."""
    cluster_name = os.environ.get("GPUPERF_TEST_CLUSTER", "pytest") + "-2n"
    yield from _session_cluster(cluster_name, 2)


@pytest.fixture
def gpuperf_config_reset(slurm_cluster):
    """Restore the cluster's default gpuperf config after a test that changed it."""
    yield slurm_cluster
    slurm_cluster.reset_gpuperf_config()
