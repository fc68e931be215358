"""``gpuperf doctor`` on the real test cluster: passes on a correct install, and names each fault planted
one at a time (hooks, plugstack, plugin load, config, daemon, daemon GPUs, collector, munge, sacctmgr
rights, file modes and the stores' group, PrologFlags without Alloc and PrologEpilogTimeout against the
watchdog bound — slurm.conf variants read by ``scontrol reconfigure`` —, and a controller whose clock is
10 minutes off: slurmctld restarted under libfaketime). Every planted fault is undone afterwards."""

from __future__ import annotations

import grp
import json
import os
import re
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import promserver  # tests/ is on sys.path (its conftest.py)
from cluster import host

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf")) / "venv" / "bin"
RECORDING = sorted((ROOT / "tests" / "data" / "recordings").glob("*.jsonl*"))


def _wait_port(port: int, proc: subprocess.Popen) -> None:
    import socket

    end = time.time() + 20
    while True:
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            assert time.time() < end, "not listening"
            time.sleep(0.1)


def _start_daemon(c) -> subprocess.Popen:
    from gpuperf.files import config
    from gpuperf.daemon import client

    p = subprocess.Popen([str(BIN / "gpuperf"), "daemon", "--foreground"], env=c.env, stderr=subprocess.PIPE, text=True)
    loaded = config.load(str(c.gpuperf_config_path))
    end = time.time() + 20
    while True:
        assert p.poll() is None, f"daemon exited: {p.stderr.read()[-2000:]}"
        try:
            if client.call(loaded, "ping", timeout_s=0.5)["ok"]:
                return p
        except client.DaemonUnavailable:
            assert time.time() < end, "daemon did not answer"
            time.sleep(0.1)


def _stop(p: subprocess.Popen) -> None:
    p.terminate()
    p.wait(10)


@pytest.fixture(scope="module")
def installed(slurm_cluster):
    """The test cluster wired in as README's deploy section says: plugin, daemon, collector, private state."""
    if not RECORDING:
        pytest.skip("no recording in tests/data/recordings for the daemon to replay")
    c = slurm_cluster
    lib = c.dir / "lib"
    build = subprocess.run(["bash", str(ROOT / "packaging" / "build-spank.sh"), "--out", str(lib)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    plugstack = c.dir / "plugstack.conf"
    saved = plugstack.read_text()
    plugstack.write_text(saved + f"optional {lib / 'gpuperf_spank.so'} run_dir={c.run_dir}\n")
    cfg = c.gpuperf_config()
    cfg.setdefault("daemon", {}).update(backend=f"replay:{RECORDING[0]}?gpus=4&loop=1", interval_s=0.5, metrics_port=0,
                                        user_socket_dir=str(c.dir / "run" / "daemon-user"))
    c.write_gpuperf_config(cfg)
    state = Path(cfg["general"]["state_dir"])
    state.chmod(0o700)
    daemon = _start_daemon(c)
    collector = subprocess.Popen([str(BIN / "gpuperf"), "daemon", "--controller", "--foreground"], env=c.env,
                                 stderr=subprocess.PIPE, text=True)
    _wait_port(cfg["controller"]["port"], collector)
    try:
        yield c, cfg
    finally:
        for p in (daemon, collector):
            if p.poll() is None:
                _stop(p)
        plugstack.write_text(saved)
        state.chmod(0o755)
        c.reset_gpuperf_config()


def doctor(c, user: str | None = None, role: str = "both") -> tuple[int, dict[str, list[dict]]]:
    """Run the installed ``gpuperf doctor --json``; exit code and findings by code."""
    p = c.run("gpuperf", "doctor", "--json", "--role", role, "--node", c.node_names[0], user=user)
    by: dict[str, list[dict]] = {}
    for x in json.loads(p.stdout):
        by.setdefault(x["code"], []).append(x)
    return p.returncode, by


def failed(by: dict[str, list[dict]], code: str) -> list[dict]:
    return [x for x in by.get(code, []) if x["status"] == "fail"]


@contextmanager
def planted(undo):
    try:
        yield
    finally:
        undo()


def test_a_correct_install_passes(installed):
    c, _ = installed
    rc, by = doctor(c)
    assert rc == 0, json.dumps(by, indent=1)
    for code in ("config", "hooks", "prolog_flags", "prolog_timeout", "plugstack", "daemon", "munge", "collector",
                 "sacctmgr", "modes", "clock"):
        assert by.get(code) and all(x["status"] == "ok" for x in by[code]), (code, by.get(code))


def test_each_planted_fault_is_named_with_a_fix(installed):
    c, cfg = installed
    hook = c.dir / "hooks" / "taskprolog"
    plugstack = c.dir / "plugstack.conf"
    good_plugstack = plugstack.read_text()
    state = Path(cfg["general"]["state_dir"])

    def check(code: str, detail_has: str) -> None:
        rc, by = doctor(c)
        bad = failed(by, code)
        assert rc == 1 and bad and detail_has in bad[0]["detail"] and bad[0]["fix"], (code, json.dumps(by, indent=1))
        others = [k for k in by if k != code and failed(by, k)]
        assert others == [], f"planting {code} also failed {others}"

    hook.chmod(0o644)  # no job runs during these checks: a broken TaskProlog would fail it
    with planted(lambda: hook.chmod(0o755)):
        check("hooks", str(hook))
    plugstack.write_text(good_plugstack.replace(str(c.dir / "lib" / "gpuperf_spank.so"), "/nonexistent/gpuperf_spank.so"))
    with planted(lambda: plugstack.write_text(good_plugstack)):
        check("plugstack", "does not exist")
    junk = c.dir / "lib" / "junk" / "gpuperf_spank.so"
    junk.parent.mkdir(exist_ok=True)
    junk.write_bytes(b"not a shared object")
    plugstack.write_text(good_plugstack.replace(str(c.dir / "lib" / "gpuperf_spank.so"), str(junk)))
    with planted(lambda: plugstack.write_text(good_plugstack)):
        check("plugstack", "srun does not load it")
    c.write_gpuperf_config(dict(cfg, daemon=dict(cfg["daemon"], intervall_s=1)))
    with planted(lambda: c.write_gpuperf_config(cfg)):
        rc, by = doctor(c)  # the other checks then run on the salvaged [general] and defaults: not asserted
        assert rc == 1 and "intervall_s" in failed(by, "config")[0]["detail"]
    state.chmod(0o755)
    with planted(lambda: state.chmod(0o700)):
        check("modes", str(state))
    munge = dict(cfg, controller=dict(cfg["controller"], munge_socket="/nonexistent/munge.socket"))
    c.write_gpuperf_config(munge)
    with planted(lambda: c.write_gpuperf_config(cfg)):
        check("munge", "munge")


def _only(by: dict[str, list[dict]], code: str, status: str) -> dict:
    """The one finding of ``code`` with ``status``; no other check failed meanwhile."""
    bad = [x for x in by.get(code, []) if x["status"] == status]
    assert len(bad) == 1 and bad[0]["fix"], (code, status, json.dumps(by, indent=1))
    others = [k for k in by if k != code and failed(by, k)]
    assert others == [], f"planting {code} also failed {others}"
    return bad[0]


@contextmanager
def slurm_conf_variant(c, old: str, new: str):
    """slurm.conf with one line changed, read by slurmctld and slurmd (``scontrol reconfigure``); undone after."""
    conf = c.layout.slurm_conf
    good = conf.read_text()
    assert old in good, old
    conf.write_text(good.replace(old, new))
    try:
        c.run("scontrol", "reconfigure", check=True)
        yield
    finally:
        conf.write_text(good)
        c.run("scontrol", "reconfigure", check=True)
        assert "Alloc" in c.run("scontrol", "show", "config").stdout  # the cluster is as the other tests expect


def test_prolog_flags_without_alloc_is_named(installed):
    c, _ = installed
    with slurm_conf_variant(c, "\nPrologFlags=Alloc,Contain\n", "\nPrologFlags=Serial\n"):  # Contain implies Alloc
        rc, by = doctor(c)
        bad = _only(by, "prolog_flags", "fail")
        assert rc == 1 and "PrologFlags=Serial lacks Alloc" in bad["detail"] and "PrologFlags=Alloc" in bad["fix"]


def test_prolog_flags_unset_is_slurms_default_none(installed):
    c, _ = installed
    with slurm_conf_variant(c, "\nPrologFlags=Alloc,Contain\n", "\n"):
        rc, by = doctor(c)
        bad = _only(by, "prolog_flags", "fail")
        assert rc == 1 and "PrologFlags is not set (Slurm's default: none)" in bad["detail"]


def test_plugstack_config_unset_reads_plugstack_conf_beside_slurm_conf(installed):
    """Issue 24: with PlugStackConfig left out Slurm reads plugstack.conf in slurm.conf's directory (which
    names the plugin here: srun --help shows --gpuperf); doctor read "(null)" and warned."""
    c, _ = installed
    line = f"PlugStackConfig={c.dir}/plugstack.conf\n"
    with slurm_conf_variant(c, line, ""):
        assert "(null)" in c.run("scontrol", "show", "config").stdout.split("PlugStackConfig")[1].split("\n")[0]
        assert "--gpuperf" in c.run("srun", "--help").stdout  # Slurm itself found the default file
        rc, by = doctor(c)
        assert rc == 0 and [x["status"] for x in by["plugstack"]] == ["ok"], by["plugstack"]
        assert f"{c.dir}/plugstack.conf (PlugStackConfig unset" in by["plugstack"][0]["detail"]
    # set explicitly to a file that does not name the plugin: that file is the one judged
    other = c.dir / "out" / "plugstack-other.conf"
    other.write_text("# no plugins\n")
    other.chmod(0o644)
    with slurm_conf_variant(c, line, f"PlugStackConfig={other}\n"):
        rc, by = doctor(c)
        bad = _only(by, "plugstack", "warn")
        assert rc == 0 and f"{other} does not name gpuperf_spank.so" in bad["detail"] and "unset" not in bad["detail"]


@pytest.mark.parametrize("line, status, says", [
    ("", "warn", "unset"),                         # Slurm's default: it never ends a hung hook
    ("PrologEpilogTimeout=75\n", "warn", "less than 30 s above"),
    ("PrologEpilogTimeout=45\n", "fail", "drain"),  # below the 60 s bound: Slurm kills gpuperf's hook first
])
def test_a_prolog_epilog_timeout_not_above_the_watchdog_bound_with_margin_is_named(installed, line, status, says):
    c, _ = installed
    rc, by = doctor(c)
    assert [x["status"] for x in by["prolog_timeout"]] == ["ok"], by["prolog_timeout"]  # the test cluster's 120 s
    with slurm_conf_variant(c, "PrologEpilogTimeout=120\n", line):
        rc, by = doctor(c)
        bad = _only(by, "prolog_timeout", status)
        assert rc == (1 if status == "fail" else 0) and says in bad["detail"] and "PrologEpilogTimeout=120" in bad["fix"]


def test_a_controller_clock_10_minutes_off_is_named(installed):
    c, _ = installed
    faketime = Path("/usr/bin/faketime")
    assert faketime.exists(), "the test cluster installs faketime (tests/cluster/host.py PACKAGES)"
    c.restart_slurmctld([str(faketime), "-f", "+600s"])  # slurmctld's clock, and so sdiag's time, 600 s ahead
    try:
        rc, by = doctor(c)
    finally:
        c.restart_slurmctld()
    bad = _only(by, "clock", "fail")
    skew = float(re.search(r"clock is ([-+][0-9.]+) s off the controller's", bad["detail"]).group(1))
    assert rc == 1 and -602 <= skew <= -598 and "NTP" in bad["fix"]  # sdiag's time has 1 s resolution
    rc, by = doctor(c)
    assert rc == 0 and [x["status"] for x in by["clock"]] == ["ok"]


def test_a_stopped_daemon_one_with_too_few_gpus_and_a_stopped_collector_are_named(installed):
    c, cfg = installed
    from gpuperf.daemon import client
    from gpuperf.files import config

    loaded = config.load(str(c.gpuperf_config_path))
    pid = client.call(loaded, "ping", timeout_s=2)["pid"]
    os.kill(pid, 15)
    host.wait_for(lambda: not host.alive(pid), 20, f"daemon {pid} to exit after SIGTERM")
    rc, by = doctor(c)
    assert rc == 1 and failed(by, "daemon"), by
    two = dict(cfg, daemon=dict(cfg["daemon"], backend=cfg["daemon"]["backend"].replace("gpus=4", "gpus=2")))
    c.write_gpuperf_config(two)
    d = _start_daemon(c)
    try:
        rc, by = doctor(c)
        bad = failed(by, "daemon_gpus")
        assert rc == 1 and bad and "4 GPUs" in bad[0]["detail"] and "sees 2" in bad[0]["detail"], by
    finally:
        _stop(d)
        c.write_gpuperf_config(cfg)
    port = cfg["controller"]["port"]
    out = subprocess.run(["fuser", "-k", "-TERM", f"{port}/tcp"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("fuser cannot stop the collector here")
    host.wait_for(lambda: not promserver.listening(port), 20, f"the collector to close port {port} after SIGTERM")
    rc, by = doctor(c)
    assert rc == 1 and failed(by, "collector"), by


def test_a_user_who_may_not_change_jobs_is_told_on_the_controller(installed):
    c, _ = installed
    _, by = doctor(c, user=c.user, role="controller")
    bad = failed(by, "sacctmgr")
    assert bad and "refuses" in bad[0]["detail"] and "AdminLevel" in bad[0]["fix"], by


def _stop_running(c, cfg) -> None:
    """Stop the module's daemon and collector wherever an earlier test left them."""
    from gpuperf.files import config
    from gpuperf.daemon import client

    try:
        pid = client.call(config.load(str(c.gpuperf_config_path)), "ping", timeout_s=1)["pid"]
        os.kill(pid, 15)
        host.wait_for(lambda: not host.alive(pid), 20, f"daemon {pid} to exit after SIGTERM")
    except client.DaemonUnavailable:
        pass
    subprocess.run(["fuser", "-k", "-TERM", f"{cfg['controller']['port']}/tcp"], capture_output=True)
    port = cfg["controller"]["port"]
    host.wait_for(lambda: not promserver.listening(port), 20, f"the collector to close port {port} after SIGTERM")


def _who(path: Path) -> tuple[int, str]:
    st = path.stat()
    return st.st_mode & 0o7777, grp.getgrgid(st.st_gid).gr_name


def test_state_group_hands_the_stores_to_that_group_and_doctor_checks_it(installed):
    """``[general] state_group``: the daemon and the collector make state_dir 0750 and every store 0640 to
    the group at start; a member reads the cluster store, others cannot; doctor names a group not applied
    and one that does not exist."""
    c, cfg = installed
    group = c.user  # useradd made the test user's own group: a group this host surely has, with a member
    state = Path(cfg["general"]["state_dir"])
    _stop_running(c, cfg)
    shared = dict(cfg, general=dict(cfg["general"], state_group=group))
    c.write_gpuperf_config(shared)
    daemon = _start_daemon(c)
    collector = subprocess.Popen([str(BIN / "gpuperf"), "daemon", "--controller", "--foreground"], env=c.env,
                                 stderr=subprocess.PIPE, text=True)
    try:
        _wait_port(cfg["controller"]["port"], collector)
        assert _who(state) == (0o750, group)
        for name in ("daemon.sqlite", "daemon.sqlite-wal", "daemon.sqlite-shm", "cluster.sqlite",
                     "cluster.sqlite-wal", "cluster.sqlite-shm"):
            assert _who(state / name) == (0o640, group), name
        rc, by = doctor(c)
        assert rc == 0 and [x["status"] for x in by["modes"]] == ["ok"] and f"group {group}" in by["modes"][0]["detail"]
        read = ("from gpuperf.controller.clusterstore import ClusterStore as S; "
                f"print(S({str(state / 'cluster.sqlite')!r}, readonly=True).jobs(since=0))")
        member = c.run(str(BIN / "python"), "-c", read, user=c.user)
        assert member.returncode == 0 and member.stdout.startswith("["), member.stderr
        other = c.run(str(BIN / "python"), "-c", read, user="nobody")
        assert other.returncode != 0 and other.stdout == ""  # the 0750 directory keeps everyone else out
        os.chown(state, -1, 0)  # as if the group was named but neither service restarted since
        state.chmod(0o700)
        rc, by = doctor(c)
        bad = _only(by, "modes", "warn")
        assert rc == 0 and f"{state} is 700 group root" in bad["detail"] and f"chgrp {group} {state}" in bad["fix"]
        c.write_gpuperf_config(dict(cfg, general=dict(cfg["general"], state_group="gp-no-such-group")))
        rc, by = doctor(c)
        bad = _only(by, "modes", "fail")
        assert rc == 1 and "'gp-no-such-group': no such group" in bad["detail"]
    finally:
        for p in (daemon, collector):
            if p.poll() is None:
                _stop(p)
        c.write_gpuperf_config(cfg)
        os.chown(state, -1, 0)
        state.chmod(0o700)
        for f in state.glob("*.sqlite*"):
            os.chown(f, -1, 0)
            f.chmod(0o600)
