"""The daemon's hook socket (root-only, SOCK_SEQPACKET) keeps its own bounds: at most ``MAX_CONNS``
connections (one more is accepted and closed at once), each dropped ``CONN_DEADLINE_S`` after accept
when it has sent nothing. Driven here as the daemon's poll loop drives it."""

from __future__ import annotations

import shutil
import socket
import tempfile
import time

import pytest

from gpuperf.daemon import hooksock


@pytest.fixture
def listener():
    d = tempfile.mkdtemp(prefix="gp-hook-")      # short: a Unix socket's path is at most 107 bytes
    lst = hooksock.Listener(d)
    yield lst
    lst.close()
    shutil.rmtree(d, ignore_errors=True)


def _connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(path)
    return s


def _closed(s: socket.socket) -> bool:
    s.settimeout(0.5)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_connections_beyond_the_cap_are_closed_at_once(listener):
    peers = []
    try:
        for _ in range(2):       # two waves, each within the backlog: 104 connections in all
            peers += [_connect(listener.path) for _ in range(hooksock.MAX_CONNS // 2 + 20)]
            listener.ready(listener.sock.fileno())
        assert len(listener.conns) == hooksock.MAX_CONNS
        # the first MAX_CONNS are held (waiting for their request), every later one was closed at accept
        assert not any(_closed(s) for s in peers[:2])
        assert all(_closed(s) for s in peers[hooksock.MAX_CONNS:])
    finally:
        for s in peers:
            s.close()


def test_a_silent_connection_is_closed_at_its_deadline(listener):
    s = _connect(listener.path)
    try:
        listener.ready(listener.sock.fileno())
        (fd,) = listener.conns
        assert listener.expire() == []                 # within its deadline: kept
        time.sleep(hooksock.CONN_DEADLINE_S + 0.2)
        assert listener.expire() == [fd] and not listener.conns
        assert _closed(s)
    finally:
        s.close()
