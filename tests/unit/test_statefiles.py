"""Store files are private (0600, WAL/SHM too, new directories 0700) and store layouts migrate forward."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from gpuperf.files import statefiles
from gpuperf.daemon import store as store_mod
from gpuperf.daemon.store import Store
from gpuperf.controller.clusterstore import ClusterStore


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.fixture(autouse=True)
def _loose_umask():
    old = os.umask(0o022)  # what a root shell and systemd give: files would be 0644 without care
    yield
    os.umask(old)


def _write_daemon(path):
    st = Store(path)
    st.begin()
    st.put_job({"job_id": 7, "uid": 1000, "user": "alice", "gpus": [0], "cpus": 2, "node": "n1", "start": 1.0}, 1.0)
    st.commit()
    return st


def test_daemon_store_and_its_wal_and_shm_are_0600_in_a_0700_directory(tmp_path):
    path = tmp_path / "state" / "daemon.sqlite"
    st = _write_daemon(path)
    try:
        for suffix in ("", "-wal", "-shm"):
            assert os.path.exists(f"{path}{suffix}"), suffix  # open WAL connection: all three exist
            assert _mode(f"{path}{suffix}") == 0o600, suffix
        assert _mode(path.parent) == 0o700
    finally:
        st.close()


def test_cluster_store_and_its_wal_and_shm_are_0600_in_a_0700_directory(tmp_path):
    path = tmp_path / "ctl" / "cluster.sqlite"
    with ClusterStore(path) as st:
        st.put_node_summary({"job_id": 3, "nodes": ["n1"], "user": "bob"})
        for suffix in ("", "-wal", "-shm"):
            assert _mode(f"{path}{suffix}") == 0o600, suffix
    assert _mode(path.parent) == 0o700


def test_a_world_readable_store_of_an_older_version_is_tightened_and_a_group_store_kept(tmp_path):
    old = tmp_path / "daemon.sqlite"
    _write_daemon(old).close()
    os.chmod(old, 0o644)
    _write_daemon(old).close()
    assert _mode(old) == 0o600
    os.chmod(old, 0o640)  # an admin gave it to a group: not world access, left so
    _write_daemon(old).close()
    assert _mode(old) == 0o640


def test_an_existing_directory_is_never_changed(tmp_path):
    d = tmp_path / "shared"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o1777)  # like /tmp: a store there must not close it to others
    _write_daemon(d / "x.sqlite").close()
    assert _mode(d) == 0o1777


def test_an_unversioned_store_is_migrated_forward_keeping_its_jobs(tmp_path):
    path = tmp_path / "daemon.sqlite"
    db = sqlite3.connect(path)  # a store as gpuperf 0.1.0 left it: same tables, user_version 0
    db.executescript(store_mod._SCHEMA)
    db.execute("INSERT INTO jobs(job_id, uid, user, gpus, state) VALUES (9, 1000, 'alice', '[0]', 'running')")
    db.commit()
    db.close()
    st = Store(path)
    try:
        assert st.migrated_from == 0
        assert st.db.execute("PRAGMA user_version").fetchone()[0] == store_mod.SCHEMA_VERSION
        assert st.job(9)["user"] == "alice" and st.job(9)["state"] == "running"
    finally:
        st.close()


def test_migration_steps_run_in_order_once_and_roll_back_whole(tmp_path):
    db = sqlite3.connect(tmp_path / "m.sqlite", isolation_level=None)
    steps = ((1, ""), (2, "ALTER TABLE jobs ADD COLUMN note TEXT"), (3, "UPDATE jobs SET note = 'v3'"))
    assert store_mod.migrate(db, target=1, steps=steps) == 0
    db.execute("INSERT INTO jobs(job_id, state) VALUES (1, 'running')")
    assert store_mod.migrate(db, target=3, steps=steps) == 1
    assert db.execute("SELECT note FROM jobs").fetchone()[0] == "v3"
    assert store_mod.migrate(db, target=3, steps=steps) == 3  # nothing runs twice
    bad = steps + ((4, "ALTER TABLE jobs ADD COLUMN z TEXT; ALTER TABLE nosuch ADD COLUMN y TEXT"),)
    with pytest.raises(sqlite3.OperationalError):
        store_mod.migrate(db, target=4, steps=bad)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3  # the half-done step left nothing
    assert "z" not in [r[1] for r in db.execute("PRAGMA table_info(jobs)")]


def test_a_store_of_a_newer_gpuperf_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "daemon.sqlite"
    _write_daemon(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={store_mod.SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(store_mod.StoreVersionError, match="newer"):
        Store(path)
    assert path.read_bytes() == before
    assert statefiles.world_access(0o644) and not statefiles.world_access(0o640)


def _newer_cluster_store(path) -> bytes:
    from gpuperf.controller import clusterstore

    with ClusterStore(path) as st:
        st.put_node_summary({"job_id": 3, "nodes": ["n1"], "user": "bob"})
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={clusterstore.SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    return path.read_bytes()


def test_a_cluster_store_of_a_newer_gpuperf_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "cluster.sqlite"
    before = _newer_cluster_store(path)
    for readonly in (False, True):
        with pytest.raises(statefiles.StoreVersionError, match="newer than this gpuperf's"):
            ClusterStore(path, readonly=readonly)
    assert path.read_bytes() == before


def test_the_controller_service_refuses_a_newer_store_with_one_clear_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "state" / "cluster.sqlite"
    path.parent.mkdir()
    before = _newer_cluster_store(path)
    conf = tmp_path / "gpuperf.toml"
    conf.write_text(f'[general]\nstate_dir = "{tmp_path / "state"}"\nrun_dir = "{tmp_path / "run"}"\nlog_file = ""\n'
                    f'[controller]\nstore = "{path}"\nport = 1\n')
    p = subprocess.run([sys.executable, "-m", "gpuperf.cli", "daemon", "--controller"], capture_output=True, text=True,
                       env=dict(os.environ, GPUPERF_CONFIG=str(conf)), timeout=60)
    assert p.returncode == 2, p.stderr
    assert "controller service cannot start" in p.stderr and "newer than this gpuperf's" in p.stderr
    assert "Traceback" not in p.stderr
    assert path.read_bytes() == before


def _some_group() -> tuple[str, int]:
    """A group other than root's that every Debian host has (the stores are handed to it)."""
    import grp

    g = next(g for g in sorted(grp.getgrall(), key=lambda g: g.gr_gid) if g.gr_gid != 0)
    return g.gr_name, g.gr_gid


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another group needs root")


@needs_root
def test_state_group_makes_state_dir_0750_and_every_store_0640_to_that_group(tmp_path):
    name, gid = _some_group()
    state = statefiles.prepare_state_dir(tmp_path / "state", name)
    assert _mode(state) == 0o750 and os.stat(state).st_gid == gid
    daemon = _write_daemon(state / "daemon.sqlite")
    try:
        with ClusterStore(state / "cluster.sqlite") as ctl:
            ctl.put_node_summary({"job_id": 3, "nodes": ["n1"], "user": "bob"})
            for store in ("daemon.sqlite", "cluster.sqlite"):
                for suffix in ("", "-wal", "-shm"):  # SQLite made the side files itself, after the store file
                    p = state / f"{store}{suffix}"
                    assert (_mode(p), os.stat(p).st_gid) == (0o640, gid), p
    finally:
        daemon.close()


@needs_root
def test_state_group_on_then_off_applies_to_existing_stores_and_the_directory(tmp_path):
    name, gid = _some_group()
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o755)  # as an older install left it
    _write_daemon(state / "daemon.sqlite").close()
    assert _mode(state / "daemon.sqlite") == 0o600
    statefiles.prepare_state_dir(state, name)  # the admin names a group: the next start hands the store over
    _write_daemon(state / "daemon.sqlite").close()
    assert (_mode(state / "daemon.sqlite"), os.stat(state / "daemon.sqlite").st_gid) == (0o640, gid)
    statefiles.prepare_state_dir(state, "")  # and takes it back: the directory closes, nobody else enters
    assert _mode(state) == 0o700


def test_an_unknown_state_group_changes_nothing_and_names_the_group(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o700)
    with pytest.raises(LookupError, match="no such group 'gp-no-such-group'"):
        statefiles.prepare_state_dir(state, "gp-no-such-group")
    assert _mode(state) == 0o700


def test_a_directory_open_to_others_keeps_its_stores_0600_whatever_its_group():
    assert statefiles.group_shared(0o750) and statefiles.group_shared(0o2770)
    assert not statefiles.group_shared(0o755) and not statefiles.group_shared(0o700)
    assert not statefiles.group_shared(0o1777) and not statefiles.group_shared(0o710)


@needs_root
def test_a_group_member_reads_the_stores_while_their_services_are_stopped(tmp_path):
    """SQLite removes a WAL store's -wal and -shm at its last close; a group member, who may not create
    files in the state directory, still reads the store (as it is: whole, no -wal left)."""
    import tempfile

    from gpuperf.files import jsoncodec
    from gpuperf.fleet.fingerprint import FleetStore

    name, gid = _some_group()
    top = Path(tempfile.mkdtemp(prefix="gpuperf-grp-", dir="/tmp"))  # pytest's tmp_path is root's 0700
    try:
        os.chmod(top, 0o755)
        state = statefiles.prepare_state_dir(top / "state", name)
        with ClusterStore(state / "cluster.sqlite") as ctl:
            ctl.put_job({"job_id": 3, "user": "bob", "uid": 1000, "nodes": ["n1"], "end": 100.0})
        FleetStore(state / "fleet.sqlite").close()
        assert sorted(p.name for p in state.iterdir()) == ["cluster.sqlite", "fleet.sqlite"]  # the services stopped
        jsoncodec.loads(b"{}")  # imported before the child leaves root (the checkout may be closed to others)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the member: nobody's uid, the store's group, nothing else
            code = 1
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(gid)
                os.setuid(65534)
                with ClusterStore(state / "cluster.sqlite", readonly=True) as ro:
                    got = ro.job(3)
                fleet = FleetStore(state / "fleet.sqlite", readonly=True)
                fleet.db.execute("SELECT count(*) FROM gpus").fetchone()
                fleet.close()
                os.write(w, json.dumps(got).encode())
                code = 0
            except BaseException as e:  # noqa: BLE001 - the parent asserts on what the child says
                os.write(w, f"ERR {type(e).__name__}: {e}".encode())
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            said = f.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, said
        assert json.loads(said)["user"] == "bob"
        assert sorted(p.name for p in state.iterdir()) == ["cluster.sqlite", "fleet.sqlite"]  # the reader wrote nothing
    finally:
        shutil.rmtree(top, ignore_errors=True)
