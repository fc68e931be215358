"""The daemon's user socket under a hostile local user (issue 28, findings 5 and 6): memory and descriptors
stay bounded whatever a peer sends, and the daemon keeps answering everyone else.

The daemon runs as its own process (its RSS, descriptors and file limit are its own, as under systemd);
each test floods it the way an ordinary user could and then asks it something.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuperf.daemon import client

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from floods import Holders, zmtp_more_flood  # noqa: E402
from otheruser import OtherUserPython  # noqa: E402
from test_daemon import base, make_cfg, wait_for  # noqa: E402,F401  (base is a fixture)

DAEMON = r"""
import resource, signal, sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from test_daemon import ScriptSampler, make_cfg
from gpuperf.daemon.server import Daemon
cfg = make_cfg(Path(sys.argv[1]), checkpoint_s=30.0, request_timeout_s=2.0, interval_s=0.1)
d = Daemon(cfg, ScriptSampler(n=1), node="n1", health_fn=None, metrics=False, send_summaries=False)
signal.signal(signal.SIGTERM, lambda *a: d.stop())
d.run()
"""


def _start(base: Path, nofile: tuple[int, int] | None = (1024, 1024)) -> subprocess.Popen:
    """The daemon in a process of its own, under the default 1,024 open-file limit (systemd's soft one)."""
    script = base / "daemon.py"
    script.write_text(DAEMON)
    pre = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile)) if nofile else None
    p = subprocess.Popen([sys.executable, str(script), str(base), str(HERE)], stderr=subprocess.PIPE, text=True,
                         preexec_fn=pre)
    cfg = make_cfg(base)

    def up():
        try:
            return client.call(cfg, "ping", timeout_s=0.5, channel="user")["ok"]
        except client.DaemonUnavailable:
            assert p.poll() is None, p.stderr.read()
            return False

    wait_for(up, timeout=20)
    return p


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _user_path(base: Path) -> str:
    return str(base / "usock" / "user.sock")


def _ping(base: Path, timeout_s: float = 3.0) -> dict:
    return client.call(make_cfg(base), "ping", timeout_s=timeout_s, channel="user")


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (children of many uids)")


@pytest.fixture
def more_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_endless_more_flagged_zeromq_frames_do_not_grow_the_daemon(base):
    # finding 5: 60 KiB frames all flagged MORE, never completing a message; libzmq buffered every one
    # in the root daemon (42 -> 453 MB). 200 MiB offered: the daemon's RSS may not grow by 16 MiB.
    p = _start(base)
    try:
        before = _rss_mib(p.pid)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(_user_path(base))
        sent = zmtp_more_flood(s, 200 << 20)
        time.sleep(1.0)
        grown = _rss_mib(p.pid) - before
        s.close()
        assert p.poll() is None, p.stderr.read()
        assert grown < 16, f"daemon grew {grown:.0f} MiB under {sent >> 20} MiB of unfinished frames"
        assert _ping(base)["ok"]
    finally:
        _stop(p)


def test_a_part_longer_than_the_request_limit_is_refused_from_its_header(base):
    # the plain framing's own guard: a 4-byte header claiming 1 GiB, then 100 MiB streamed behind it;
    # the daemon answers the refusal after reading 4 bytes and never buffers the rest
    p = _start(base)
    try:
        before = _rss_mib(p.pid)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(_user_path(base))
        s.settimeout(10)
        s.sendall(struct.pack(">I", 1 << 30))
        chunk, sent = b"y" * (1 << 20), 0
        try:
            while sent < 100 << 20:
                s.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass                                  # the daemon closed the connection: nothing more is read
        reply = s.recv(65536)
        s.close()
        assert b"exceeds the 65536-byte limit" in reply, reply[:200]
        assert _rss_mib(p.pid) - before < 16
        assert _ping(base)["ok"]
    finally:
        _stop(p)


@needs_root
def test_1100_idle_connections_under_the_default_file_limit_neither_abort_nor_hold_descriptors(base):
    # finding 6: ~1,100 idle connections under the default 1,024 open-file limit: libzmq aborted (SIGABRT).
    # 1,100 from 25 users: the daemon lives, holds at most its connection cap, and answers once they are gone.
    from gpuperf.daemon import usersock

    p = _start(base, nofile=(1024, 1024))
    try:
        fds_before = _fds(p.pid)
        holders = Holders(_user_path(base), range(61000, 61025), 44)
        time.sleep(1.5)
        try:
            assert p.poll() is None, f"daemon died: {p.returncode}: {p.stderr.read()[-2000:]}"
            assert _fds(p.pid) - fds_before <= usersock.MAX_CONNS + 4
        finally:
            holders.release()
        assert wait_for(lambda: _try_ping(base), timeout=usersock.CONN_DEADLINE_S + 5)
    finally:
        _stop(p)


def _try_ping(base: Path) -> bool:
    try:
        return bool(_ping(base, timeout_s=1.0)["ok"])
    except client.DaemonUnavailable:
        return False


def test_idle_connections_are_dropped_at_their_deadline(base):
    # a user holding the per-uid maximum of silent connections is served again once they expire
    from gpuperf.daemon import usersock

    p = _start(base)
    try:
        held = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(usersock.MAX_CONNS_PER_UID)]
        for s in held:
            s.connect(_user_path(base))
        time.sleep(0.5)
        assert not _try_ping(base)                 # this uid's slots are all taken ...
        time.sleep(usersock.CONN_DEADLINE_S)
        assert _try_ping(base)                     # ... until the deadline frees them
        assert all(s.recv(1) == b"" for s in held)  # closed by the daemon
        for s in held:
            s.close()
    finally:
        _stop(p)


NOBODY_PING = r"""
import json, sys
from gpuperf.files import config
from gpuperf.daemon import client
cfg = config.defaults()
cfg.data["daemon"].update(socket_dir=sys.argv[1], user_socket_dir=sys.argv[2])
try:
    print(json.dumps(client.call(cfg, "ping", timeout_s=3, channel="user")))
except client.DaemonUnavailable as e:
    print(json.dumps({"unavailable": str(e)}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/runuser").exists(), reason="needs root and runuser")
def test_one_user_holding_connections_leaves_room_for_another(base, more_fds):
    # one uid (here root) holds 200 idle connections; another user is still answered
    import json
    import shutil

    p = _start(base)
    try:
        held = []
        for _ in range(200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(_user_path(base))
            held.append(s)
        time.sleep(0.3)
        script = base / "nobody_ping.py"
        script.write_text(NOBODY_PING)
        os.chmod(script, 0o644)
        cfg = make_cfg(base)
        # nobody runs its own world-readable copy of gpuperf (the checkout may sit in a private directory)
        with OtherUserPython(("zmq",)) as py:
            out = subprocess.run([shutil.which("runuser"), "-u", "nobody", "--", *py.argv, str(script),
                                  cfg.daemon.socket_dir, cfg.daemon.user_socket_dir],
                                 capture_output=True, text=True, timeout=60, env=py.env)
        for s in held:
            s.close()
        assert json.loads(out.stdout).get("ok") is True, out.stdout + out.stderr
    finally:
        _stop(p)


def test_the_soft_file_limit_is_raised_to_the_hard_one_at_start(base):
    p = _start(base, nofile=(256, 4096))
    try:
        limits = Path(f"/proc/{p.pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        assert line.split()[3:5] == ["4096", "4096"], line
    finally:
        _stop(p)


@needs_root
def test_descriptor_exhaustion_pauses_accepting_instead_of_spinning(base):
    # a file limit below the connection cap (a site's odd unit, or descriptors held elsewhere): accept()
    # fails with EMFILE; the daemon stops accepting for a moment instead of polling a ready listener in a loop
    p = _start(base, nofile=(40, 40))
    try:
        holders = Holders(_user_path(base), range(61000, 61010), 8)
        try:
            time.sleep(0.5)
            t0 = _cpu_s(p.pid)
            time.sleep(2.0)
            spent = _cpu_s(p.pid) - t0
            assert p.poll() is None, p.stderr.read()
            assert spent < 0.6, f"{spent:.2f} s of CPU in 2 s while out of descriptors"
        finally:
            holders.release()
        assert wait_for(lambda: _try_ping(base), timeout=10)
    finally:
        _stop(p)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_replies_waiting_for_slow_readers_stay_within_the_budget(tmp_path):
    # readers that never read: the replies the daemon holds for them stay within OUT_BUDGET in all
    from gpuperf.daemon import usersock

    lst = usersock.Listener(str(tmp_path))
    peers = []
    try:
        for _ in range(4):
            a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            a.connect(lst.path)
            peers.append(a)
        lst.ready(lst.sock.fileno())
        assert len(lst.conns) == 4
        for c in list(lst.conns.values()):
            lst.reply(c, b"z" * (usersock.OUT_BUDGET // 2))
        assert lst.out_bytes <= usersock.OUT_BUDGET
        assert sum(c.out is not None for c in lst.conns.values()) <= 2
        got = peers[-1].recv(65536)
        assert b"refused" in got or b"z" in got
    finally:
        for a in peers:
            a.close()
        lst.close()


def test_the_client_falls_back_to_zeromq_for_a_daemon_not_yet_restarted_after_an_upgrade(base):
    # rolling upgrade: the package is new, the running daemon still the old one with a ZeroMQ user socket
    import json
    import threading

    zmq = pytest.importorskip("zmq")
    (base / "usock").mkdir()
    rep = zmq.Context.instance().socket(zmq.REP)
    rep.setsockopt(zmq.LINGER, 0)
    rep.bind(f"ipc://{_user_path(base)}")

    def answer():
        if rep.poll(10000):
            assert json.loads(rep.recv())["op"] == "ping"
            rep.send(b'{"v":1,"ok":true,"old":true}')

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        assert _ping(base, timeout_s=5.0) == {"v": 1, "ok": True, "old": True}
    finally:
        t.join(5)
        rep.close(0)
