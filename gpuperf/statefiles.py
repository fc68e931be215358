"""Private state files: SQLite stores readable by root (or an admin group) only, never by job users.

Job stores hold every job's user, GPUs and metrics; users read only their own jobs, through gpuperf's
sockets and ``sacct``. A store is created 0600 before SQLite writes into it (SQLite gives its -wal and
-shm files the database file's mode), a directory gpuperf creates for it is 0700. A file or directory
an admin made 0640 for a group is left so; a store file open to every user is made 0600 (stores of
gpuperf 0.1.0 were created 0644). Existing directories are never changed here (``store = /tmp/x.sqlite``
must not close /tmp): the package sets /var/lib/gpuperf's mode and ``gpuperf doctor`` reports others.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def private_dir(path: str | Path) -> Path:
    """Create ``path`` 0700 if missing (its parents as usual); an existing one is left as it is."""
    p = Path(path)
    if not p.is_dir():
        p.parent.mkdir(parents=True, exist_ok=True)
        try:
            p.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
        else:
            os.chmod(p, DIR_MODE)  # mkdir's mode is cut by the umask only, never widened: set it exactly
    return p


def private_db(path: str | Path) -> str:
    """Prepare a SQLite store path: directory private, the file created 0600, older files tightened."""
    p = Path(path)
    private_dir(p.parent)
    if not p.exists():
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, FILE_MODE))
    for suffix in SQLITE_SIDE_FILES:
        side = Path(f"{p}{suffix}")
        if side.exists():
            _drop_world(side)
    return str(p)


def world_access(mode: int) -> bool:
    """Whether a mode lets other users (not owner, not group) read, write or enter."""
    return bool(stat.S_IMODE(mode) & 0o007)


def _drop_world(p: Path) -> None:
    try:
        st = p.lstat()
    except OSError:
        return
    if stat.S_ISREG(st.st_mode) and world_access(st.st_mode) and st.st_uid == os.geteuid():
        os.chmod(p, FILE_MODE)


class StoreVersionError(OSError):
    """The store was written by a newer gpuperf (a downgrade): kept untouched, not opened.

    An OSError so a service reports it like any store it cannot open, and never moves it aside.
    """


def refuse_newer(db: sqlite3.Connection, target: int, path: str | Path) -> int:
    """The store's layout version (``PRAGMA user_version``); StoreVersionError when newer than ``target``."""
    old = db.execute("PRAGMA user_version").fetchone()[0]
    if old > target:
        raise StoreVersionError(f"store {path} has schema version {old}, newer than this gpuperf's ({target}): "
                                "install the newer gpuperf again, or move the store aside")
    return old
