"""Fuzzing the decoders of what a local user or a network peer sends (hypothesis): the daemon's request
parser, the framing both sockets read with, the daemon's user-socket listener, and the controller's
decoding of node summaries and its TCP intake. Each example must end in bounded time and memory (wall time
and tracemalloc's allocation peak, checked per example: ``bounded``, ``limited``), and nothing but the
decoder's own refusal may escape the boundary that must survive.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import time
import tracemalloc
import zlib
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from gpuperf.controller import collector, intake, transport
from gpuperf.daemon import protocol, usersock
from gpuperf.files import framing

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SMALL = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def bounded(fn, *args, seconds: float = 1.0, mib: float = 16.0):
    """Run ``fn(*args)``: its result or exception, asserting it took under ``seconds`` and ``mib`` of memory."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        out, err = fn(*args), None
    except Exception as e:  # noqa: BLE001 - judged by the caller
        out, err = None, e
    took = time.monotonic() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    assert took < seconds, f"{took:.2f} s"
    assert peak < mib, f"{peak:.1f} MiB"
    return out, err


# a socket example's bounds: generous for a loaded 2-core CI VM (tracemalloc slows every allocation too; on a
# 2-core dev VM an example took at most 0.5 ms and 3 KiB, the intake's 50 ms and 0.3 MiB), yet far below what
# a reader that waited on its peer or buffered a claimed length would take
EXAMPLE_S = 1.0
EXAMPLE_MIB = 32.0


@contextmanager
def limited(seconds: float = EXAMPLE_S, mib: float = EXAMPLE_MIB):
    """The example's body: under ``seconds`` of wall time and ``mib`` of allocation peak (tracemalloc)."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        yield
        took, peak = time.monotonic() - t0, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert took < seconds, f"the example took {took:.2f} s (bound {seconds} s)"
    assert peak < mib, f"the example allocated {peak:.1f} MiB at its peak (bound {mib} MiB)"


# JSON-ish values: what a hostile request may hold where the daemon expects fields
_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**80, max_value=2**80),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40))
_json = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(max_size=10), kids,
                                                                                       max_size=6), max_leaves=30)
_ops = st.sampled_from(sorted(protocol.OPS) + ["", "drop", "PING"])
_fields = st.sampled_from(["job_id", "uid", "user", "gpus", "cpus", "start", "end", "node", "partial", "exit_code",
                           "deliver", "max_points", "max_age_s", "env", "config", "x"])


@st.composite
def requests(draw) -> bytes:
    """A request frame: mostly well-formed JSON with hostile fields, sometimes raw bytes."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=2000))
    if kind == 1:
        return b"[" * draw(st.integers(1, 70000))  # nesting beyond the recursion limit, or over MAX_BYTES
    job = draw(st.dictionaries(_fields, _json, max_size=8))
    msg = {"v": draw(st.sampled_from([1, 1, 1, 0, 2, "1", True, None])), "op": draw(_ops), "job": job}
    return json.dumps(msg, allow_nan=True).encode()


@FUZZ
@given(requests())
def test_the_daemons_request_parser_refuses_with_its_own_error_only(frame):
    req, err = bounded(protocol.parse_request, frame)
    assert err is None or isinstance(err, protocol.ProtocolError), repr(err)
    if req is not None:
        assert req.op in protocol.OPS and isinstance(req.job, dict)
        assert protocol.encode(protocol.ok(job=req.job))   # what was accepted can be answered


@FUZZ
@given(st.binary(max_size=4096), st.integers(0, 70000))
def test_the_part_reader_holds_at_most_its_limit(data, limit):
    a, b = socket.socketpair()
    try:
        with limited():
            a.sendall(data)
            a.close()
            b.setblocking(False)
            r = framing.PartReader(limit)
            parts = []
            for _ in range(len(data) + 2):
                try:
                    part = r.read(b)
                except (framing.FrameError, framing.Closed, BlockingIOError):
                    break
                assert r.buffered <= max(limit, framing.HEADER.size)
                if part is not None:
                    assert len(part) <= limit
                    parts.append(part)
            # what was read whole is what was framed
            assert framing.encode(*parts) == data[:len(framing.encode(*parts))]
    finally:
        b.close()


@pytest.fixture(scope="module")
def listener(tmp_path_factory):
    lst = usersock.Listener(str(tmp_path_factory.mktemp("usock")))
    yield lst
    lst.close()


@SMALL
@given(st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=4))
def test_the_user_socket_listener_survives_any_byte_stream(listener, chunks):
    with limited():
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(listener.path)
        listener.ready(listener.sock.fileno())
        for chunk in chunks:
            try:
                c.sendall(chunk)
            except OSError:
                break
            for fd in list(listener.conns):
                got = listener.ready(fd)           # must not raise, whatever arrived
                if got is not None:
                    conn, frame = got
                    assert frame is None or len(frame) <= protocol.MAX_BYTES
                    listener.reply(conn, protocol.encode(protocol.error("fuzz")))
        c.close()
        for fd in list(listener.conns):
            listener.ready(fd)
        listener.expire(time.monotonic() + usersock.CONN_DEADLINE_S + 1)
        assert listener.conns == {} and listener.out_bytes == 0


def _body(obj) -> bytes:
    return zlib.compress(json.dumps(obj, allow_nan=True).encode())


@st.composite
def bodies(draw) -> bytes:
    """A node-summary body as the intake hands it on: compressed JSON (hostile), raw bytes, or a zip bomb."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.binary(max_size=2000))
    if kind == 1:
        return zlib.compress(b"[" * 100000)
    if kind == 2:
        return zlib.compress(b" " * (transport.MAX_BODY_BYTES - 10) + b"{}")
    s = {"schema": draw(st.sampled_from(["gpuperf.summary.v1", "x", None])), "job_id": draw(_json),
         "nodes": draw(st.one_of(_json, st.lists(st.text(max_size=8), max_size=3))), "gpus": draw(_json)}
    return _body(s)


@FUZZ
@given(bodies(), st.one_of(st.none(), st.binary(max_size=200)))
def test_the_collectors_decoding_of_an_authenticated_body_refuses_cleanly(body, series):
    # past the credential (the intake's job), the digest matches: what is left is decoding and validating
    digest = hashlib.sha256(body).hexdigest().encode()
    if series is not None:
        digest += b":" + hashlib.sha256(series).hexdigest().encode()
    m = intake.Message(conn=SimpleNamespace(host="fuzz"), sender=transport.Sender(0, 0, ""), digest=digest, body=body, series=series)
    out, err = bounded(collector.opened, m, seconds=2.0, mib=64.0)
    assert err is None, repr(err)
    s, reply = out
    assert reply["ok"] is (s is not None)
    if s is not None:
        collector.validate(s)


@FUZZ
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_a_body_that_does_not_match_its_digest_is_refused_before_decoding(digest, body):
    assume(digest != hashlib.sha256(body).hexdigest().encode())
    with pytest.raises(transport.AuthError):
        transport.open_body(digest, body, None)


@pytest.fixture(scope="module")
def tcp_intake():
    it = intake.Intake("127.0.0.1", 0, {0}, "")
    yield it
    it.close()


@SMALL
@given(st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=4), st.booleans())
def test_the_controllers_intake_survives_any_byte_stream(tcp_intake, chunks, lead_kind):
    with limited(seconds=2.0):   # polls of 50 ms, and munged may decode a credential
        port = tcp_intake.sock.getsockname()[1]
        c = socket.create_connection(("127.0.0.1", port), timeout=2)
        if lead_kind:   # past the kind, into the credential
            chunks = [struct.pack(">I", len(transport.KIND)) + transport.KIND] + chunks
        for chunk in chunks:
            try:
                c.sendall(chunk)
            except OSError:
                break
            for m in tcp_intake.poll(0.05):   # must not raise; a message can only come from munge-valid credentials
                raise AssertionError(f"a message from random bytes: {m}")
        c.close()
        end = time.monotonic() + 3
        while tcp_intake.conns and time.monotonic() < end:
            assert tcp_intake.poll(0.05) == []
        assert tcp_intake.conns == {} and tcp_intake.reserved == 0
