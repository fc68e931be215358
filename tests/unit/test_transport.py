"""Node summary -> controller over TCP with munge: the real munged, a real collector on loopback."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import threading
import time

import pytest

from gpuperf.files import config
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.controller import accounting, clusterstore, service, transport
from report_fixtures import aggregates, context

try:
    from cluster.slurmcluster import TEST_USER, ClusterError, can_run, ensure_munge, ensure_user
except ImportError:  # tests/ imported as a package
    from tests.cluster.slurmcluster import TEST_USER, ClusterError, can_run, ensure_munge, ensure_user


@pytest.fixture(scope="module")
def munge():
    why = can_run()
    if why:
        pytest.skip(why)
    try:
        ensure_munge()
        ensure_user()
    except ClusterError as e:
        pytest.fail(f"munged could not be started: {e}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def controller(munge, tmp_path):
    port = _free_port()
    cfg = config.parse(f'[general]\nstate_dir = "{tmp_path}"\nlog_file = ""\n'
                       f'[controller]\naddress = "127.0.0.1"\nport = {port}\nbind = "127.0.0.1"\n[report]\nadmin_comment = false\n')
    stop, ready = threading.Event(), threading.Event()
    t = threading.Thread(target=service.serve, args=(cfg, stop, lambda _ep: ready.set(), accounting.StubWriter(0.0)),
                         daemon=True)
    t.start()
    assert ready.wait(10)
    yield cfg
    stop.set()
    t.join(5)


def _raw_send(cfg, frames: list[bytes]) -> dict:
    return transport.exchange(transport.controller_endpoint(cfg), frames, 10.0)


def _stored(cfg, job_id: int) -> dict:
    with clusterstore.ClusterStore(clusterstore.default_path(cfg)) as st:
        return st.node_summaries(job_id)


def _summary(job_id: int, node: str = "n1") -> dict:
    return summary.node_summary(aggregates(job_id=job_id, node=node, ngpus=2), context(job_id=job_id, node=node))


def test_root_sender_is_stored(controller):
    s = _summary(101)
    reply = transport.send_node_summary(controller, s)
    assert reply["ok"] and reply["node"] == "n1"
    assert _stored(controller, 101)["n1"] == s


def test_unprivileged_sender_is_rejected(controller):
    s = _summary(102)
    frames = transport.pack(s)
    # a valid credential for the same body, but made by an ordinary user
    user_cred = subprocess.run(["runuser", "-u", TEST_USER, "--", transport.MUNGE],
                               input=hashlib.sha256(frames[2]).hexdigest().encode(), capture_output=True, check=True).stdout
    reply = _raw_send(controller, [frames[0], user_cred.strip(), frames[2]])
    assert not reply["ok"] and "uid" in reply["error"]
    assert _stored(controller, 102) == {}


def test_forged_body_under_a_valid_credential_is_rejected(controller):
    real, forged = _summary(103), _summary(103)
    forged["gpus"][0]["sm_active_pct"] = 99.9
    kind, cred, _ = transport.pack(real)
    body = transport.pack(forged)[2]
    reply = _raw_send(controller, [kind, cred, body])
    assert not reply["ok"] and "digest" in reply["error"]
    assert _stored(controller, 103) == {}


@pytest.mark.parametrize("cred", [b"", b"MUNGE:not-a-credential:", b"garbage"])
def test_missing_or_garbage_credentials_are_rejected(controller, cred):
    body = transport.pack(_summary(104))[2]
    reply = _raw_send(controller, [transport.KIND, cred, body])
    assert not reply["ok"] and "not authenticated" in reply["error"]
    assert _stored(controller, 104) == {}


def test_a_replayed_message_is_rejected(controller):
    frames = transport.pack(_summary(105))
    assert _raw_send(controller, frames)["ok"]
    again = _raw_send(controller, frames)
    assert not again["ok"] and "not authenticated" in again["error"]


def test_malformed_summary_from_root_is_rejected_not_stored(controller):
    bad = {"schema": summary.SCHEMA, "job_id": "106; drop table", "nodes": ["n1"], "gpus": []}
    reply = _raw_send(controller, transport.pack(bad))
    assert not reply["ok"] and "malformed" in reply["error"]


def test_unreachable_controller_fails_within_the_bound(munge, tmp_path):
    cfg = config.parse(f'[general]\nstate_dir = "{tmp_path}"\nlog_file = ""\n'
                       f'[controller]\naddress = "127.0.0.1:{_free_port()}"\n')
    t0 = time.monotonic()
    with pytest.raises(transport.TransportError):
        transport.send_node_summary(cfg, _summary(107), timeout_s=0.3, attempts=2)
    assert time.monotonic() - t0 < 5
