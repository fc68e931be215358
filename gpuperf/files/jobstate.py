"""Per-job state directory of a running job on a node: what the hooks wrote for each other.

No pathlib and no json here (``gpuperf.jsonlite``): the TaskProlog writes its record with these on
every task, and those imports would cost it about a third of an interpreter's start.
"""

from __future__ import annotations

import os

from gpuperf.files import jsonlite

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def job_dir(run_dir: str, job_id: int) -> Path:
    """The state directory of one job: <run_dir>/jobs/<job_id>."""
    from pathlib import Path

    return Path(job_path(run_dir, job_id))


def job_path(run_dir: str, job_id: int) -> str:
    """``job_dir`` as a string, for the hooks' fast paths."""
    return os.path.join(run_dir, "jobs", str(int(job_id)))


def write_json(path: str | os.PathLike[str], data: Any, mode: int = 0o600) -> None:
    """Write JSON atomically (tmp file + rename), so a reader never sees half a file.

    0600 unless asked: a job's records hold its environment, affinity and usage, which no other user
    may read (users read their own through the daemon's socket, the controller or sacct)."""
    parent, name = os.path.split(os.fspath(path))
    os.makedirs(parent or ".", exist_ok=True)
    # pid-unique name in the same directory (tempfile costs the TaskProlog ~3 ms to import)
    tmp = os.path.join(parent, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(jsonlite.dumps(data, sort_keys=True))
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """Read JSON; None when absent or unreadable (callers report it, never crash on it)."""
    try:
        with open(path) as f:
            return jsonlite.loads(f.read())
    except (OSError, ValueError):
        return None
