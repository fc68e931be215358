"""The two threads that share the daemon's state (the loop, the root channels' ``gpuperf-hooks``) never end each
other's store transaction: the store's one connection is used under ``Daemon.state_lock`` only, and a failed
write is rolled back before the lock is let go. Each interleaving is forced with events, not timing."""

from __future__ import annotations

import threading

import pytest

from gpuperf.daemon import protocol
from gpuperf.daemon.server import Daemon
from test_daemon import ScriptSampler, make_cfg


@pytest.fixture
def daemon(tmp_path):
    """An open daemon (store, parts, sockets), its loop not run: each test plays the threads itself."""
    d = Daemon(make_cfg(tmp_path), ScriptSampler(n=1), node="n1", health_fn=None, metrics=False,
               send_summaries=False, xid_source=None)
    d.open()
    yield d
    d.close()


def _register(d: Daemon, job_id: int) -> dict:
    """A registration as the hook socket asks for it (the root channels' thread)."""
    frame = protocol.encode(protocol.request("register", {"job_id": job_id, "uid": 0, "user": "root", "gpus": [0]}))
    return d.handle(frame, 0, "hook")


def _hook_mid_transaction(d: Daemon, inside: threading.Event, finish: threading.Event, out: dict) -> None:
    """A hook's write under the state lock, held open until ``finish``, then abandoned (an op that failed)."""
    with d.state_lock:
        st = d.store
        st.begin()
        st.put_job({"job_id": 901, "uid": 0, "user": "root", "gpus": [0], "start": 1.0}, 1.0)
        inside.set()
        finish.wait(10)
        try:
            st.put_aggregates(901, 1.0, {})
            st.rollback()
            out["ok"] = True
        except Exception as e:  # noqa: BLE001 - the assertion names it
            out["ok"] = e


def test_a_node_summary_kept_by_the_loop_does_not_commit_a_hooks_open_transaction(daemon):
    """keep_delivered (the loop, after serving) waits for the hook's transaction: before, it committed the hook's
    half-done registration (its begin a no-op, its commit the hook's) and the hook's rollback found nothing open."""
    inside, finish, out = threading.Event(), threading.Event(), {}
    hook = threading.Thread(target=_hook_mid_transaction, args=(daemon, inside, finish, out))
    hook.start()
    assert inside.wait(10)
    daemon.deliveries.kept.put((7, {"job_id": 7, "class": "idle"}))
    loop = threading.Thread(target=daemon.opened.handover.keep_delivered)
    loop.start()
    loop.join(0.5)        # time for the unlocked code to do its harm; the locked code waits for the hook
    finish.set()
    hook.join(10)
    loop.join(10)
    assert out["ok"] is True
    assert daemon.store.job(901) is None                    # the hook's rollback undid all of its write
    assert daemon.store.summary(7) == {"job_id": 7, "class": "idle"}


def test_a_failed_sweep_is_rolled_back_before_a_hook_can_commit_it(daemon):
    """A sweep whose fold fails (disk full) leaves its transaction open; a registration answered on the hooks
    thread between the fold's lock release and the rollback used to commit the half sweep with its own rows."""
    sweeper = daemon.opened.sweeper
    released, registered = threading.Event(), threading.Event()
    replies: list[dict] = []

    def hooks_thread() -> None:
        released.wait(10)
        replies.append(_register(daemon, 55))
        registered.set()

    class ReleaseGate:
        """The state lock, letting the hooks thread in the moment the fold lets it go on an error."""

        def __enter__(self):
            daemon.state_lock.acquire()

        def __exit__(self, kind, *_):
            daemon.state_lock.release()
            if kind is not None and not released.is_set():
                released.set()
                assert registered.wait(10)

    def check(*_):
        raise OSError("database or disk is full")

    sweeper.lock = ReleaseGate()
    sweeper.mismatches.check = check     # raised inside the fold, after the sweep's samples were written
    th = threading.Thread(target=hooks_thread)
    th.start()
    sweeper.sweep()
    th.join(10)
    assert replies and replies[0]["ok"], replies
    assert daemon.store.job(55) is not None                 # the hook's registration kept
    assert daemon.store.samples_since([0], 0.0) == []       # the failed sweep's samples not


def test_a_chore_that_fails_is_rolled_back_under_the_lock(daemon):
    """A locked chore (checkpoint, rollup, prune, pending) that raises leaves nothing open for the hooks
    thread's next commit to keep: the rollback runs before the lock is let go."""
    store = daemon.store

    def half(t: float) -> None:
        store.begin()
        store.put_job({"job_id": 902, "uid": 0, "user": "root", "gpus": [0], "start": 1.0}, t)
        raise OSError("database or disk is full")

    with pytest.raises(OSError):
        daemon._locked(half)(1.0)
    assert _register(daemon, 56)["ok"]
    assert store.job(56) is not None and store.job(902) is None


def test_close_waits_for_a_hook_mid_transaction(daemon):
    """A hook still being answered when the daemon closes (its thread outlived the loop's join) finishes its
    write before the store is closed: before, close() committed its half and closed the connection under it."""
    inside, finish, out = threading.Event(), threading.Event(), {}
    store = daemon.store
    hook = threading.Thread(target=_hook_mid_transaction, args=(daemon, inside, finish, out))
    hook.start()
    assert inside.wait(10)
    closer = threading.Thread(target=daemon.close)
    closer.start()
    closer.join(0.5)      # time for the unlocked close to do its harm; the locked one waits for the hook
    finish.set()
    hook.join(10)
    closer.join(10)
    assert out["ok"] is True, out
    from gpuperf.daemon.startup import open_store
    again = open_store(daemon.cfg, daemon.log)
    try:
        assert again.job(901) is None
    finally:
        again.close()
