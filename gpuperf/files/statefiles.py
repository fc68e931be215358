"""Private state files: SQLite stores readable by root (or an admin group) only, never by job users.

Job stores hold every job's user, GPUs and metrics; users read only their own jobs, through gpuperf's
sockets and ``sacct``. A store's access follows its directory: in a directory shared with a group and
nobody else (0750, ``group_shared``) it is 0640 to that directory's group, elsewhere 0600. It gets that
mode before SQLite writes into it (SQLite gives its -wal and -shm files the database file's mode and,
as root, its owner and group). A store file open to every user is made private (stores of gpuperf
0.1.0 were created 0644); a directory gpuperf creates for a store is 0700.

Only ``state_dir`` (gpuperf's own) is set to what ``general.state_group`` says (``prepare_state_dir``:
0750 to the group, else 0700), by the daemon and the controller service at each start. Other existing
directories are never changed here (``store = /tmp/x.sqlite`` must not close /tmp); ``gpuperf doctor``
reports them.
"""

from __future__ import annotations

import grp
import os
import sqlite3
import stat
import urllib.parse
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
GROUP_FILE_MODE = 0o640
GROUP_DIR_MODE = 0o750
SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def group_id(name: str) -> int:
    """The gid of group ``name``; LookupError naming it when this host has no such group."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise LookupError(f"no such group {name!r} on this host (general.state_group)") from None


def group_shared(mode: int) -> bool:
    """A directory mode that lets its group read and enter, and nobody else: its stores are the group's too."""
    m = stat.S_IMODE(mode)
    return m & 0o050 == 0o050 and not m & 0o007


def wanted_modes(group: str) -> tuple[int, int]:
    """(directory mode, file mode) that ``general.state_group`` asks for: 0750/0640 with a group, else 0700/0600."""
    return (GROUP_DIR_MODE, GROUP_FILE_MODE) if group else (DIR_MODE, FILE_MODE)


def prepare_state_dir(path: str | Path, group: str = "") -> Path:
    """Make ``state_dir`` 0750 root:``group`` (``general.state_group``), or 0700 when no group is named.

    Created when missing; an existing one is changed only when this user owns it. An unknown group is a
    LookupError before anything changes (the directory stays as it was: never opened wider).
    """
    gid = group_id(group) if group else None
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    st = p.stat()
    if st.st_uid != os.geteuid():
        return p
    if gid is not None and st.st_gid != gid:
        os.chown(p, -1, gid)
    os.chmod(p, wanted_modes(group)[0])
    return p


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
    """Prepare a SQLite store path: the file created (and older files set) as its directory's access says."""
    p = Path(path)
    d = private_dir(p.parent).stat()
    gid = d.st_gid if group_shared(d.st_mode) else None
    if not p.exists():
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, FILE_MODE)
        os.close(fd)
    for suffix in SQLITE_SIDE_FILES:
        side = Path(f"{p}{suffix}")
        if side.exists():
            _fit(side, gid)
    return str(p)


def world_access(mode: int) -> bool:
    """Whether a mode lets other users (not owner, not group) read, write or enter."""
    return bool(stat.S_IMODE(mode) & 0o007)


def _fit(p: Path, gid: int | None) -> None:
    """A store file of ours: 0640 to ``gid`` (a group-shared directory's), else no world access (0600)."""
    try:
        st = p.lstat()
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return
    if gid is not None:
        if st.st_gid != gid or stat.S_IMODE(st.st_mode) != GROUP_FILE_MODE:
            try:
                os.chown(p, -1, gid)
                os.chmod(p, GROUP_FILE_MODE)
            except PermissionError:  # not a member of that group (a non-root run): stays private
                os.chmod(p, FILE_MODE)
    elif world_access(st.st_mode):
        os.chmod(p, FILE_MODE)


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to a store (FileNotFoundError when there is none). A group member reading
    while the service is stopped cannot create the WAL index SQLite removed at its last close (-shm, in
    a directory it may not write): then the file is read as it is (``immutable``), whole since no -wal
    is left. A service that starts meanwhile is not seen by that reader (one command's short read)."""
    path = str(path)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    uri = "file:" + urllib.parse.quote(path) + "?mode=ro"
    db = sqlite3.connect(uri, uri=True, timeout=10)
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db
    except sqlite3.OperationalError:
        db.close()
        # only the missing-index case: with a -wal left (a service running or killed) the file alone is not whole
        if (os.path.exists(path + "-wal") or os.access(os.path.dirname(path) or ".", os.W_OK)
                or not os.access(path, os.R_OK)):
            raise
    return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=10)


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
