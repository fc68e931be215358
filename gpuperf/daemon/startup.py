"""What the daemon does once before it serves: take the node's lock, open the store, serve /metrics."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from pathlib import Path
from typing import IO, Any

from gpuperf.daemon.store import Store


class DaemonError(Exception):
    """The daemon cannot start (socket in use, another daemon running, store unusable)."""


def store_path(cfg: Any) -> str:
    """The SQLite store's path."""
    return cfg.daemon.store or os.path.join(cfg.general.state_dir, "daemon.sqlite")


def take_lock(socket_dir: str) -> IO[str]:
    """Hold ``<socket_dir>/daemon.lock`` (one daemon per node) with our pid in it; the open file is the lock."""
    d = Path(socket_dir)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    f = open(d / "daemon.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise DaemonError(f"another gpuperf daemon holds {d / 'daemon.lock'}") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def open_store(cfg: Any, log: Any) -> Store:
    """The store; a file that is not a usable database is moved aside (kept) and a new one started."""
    path = store_path(cfg)

    def make() -> Store:
        return Store(path, full_res_s=cfg.daemon.full_res_s, retention_days=cfg.daemon.retention_days)

    try:
        return make()
    except sqlite3.DatabaseError as e:
        aside = f"{path}.corrupt-{int(time.time())}"
        log.error("store %s is unusable (%s): moved to %s, starting a new one", path, e, aside)
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(path + suffix, aside + suffix)
            except OSError:
                pass
    except OSError as e:
        raise DaemonError(f"cannot open store {path}: {e}") from None
    try:
        return make()
    except (sqlite3.Error, OSError) as e:
        raise DaemonError(f"cannot open store {path}: {e}") from None


def serve_metrics(cfg: Any, view: Any, log: Any) -> None:
    """Start the /metrics thread (reads ``view()``, an immutable snapshot); a port in use is logged, not fatal."""
    from gpuperf.daemon import metrics

    try:
        metrics.serve(view, cfg.daemon.metrics_port, cfg.daemon.metrics_address, cfg.daemon.metrics_job_labels)
    except OSError as e:
        log.error("metrics: cannot listen on %s:%s: %s", cfg.daemon.metrics_address, cfg.daemon.metrics_port, e)
