"""Per-job state directory of a running job on a node: what the hooks wrote for each other."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def job_dir(run_dir: str, job_id: int) -> Path:
    """The state directory of one job: <run_dir>/jobs/<job_id>."""
    return Path(run_dir) / "jobs" / str(int(job_id))


def write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    """Write JSON atomically (tmp file + rename), so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # pid-unique name in the same directory (tempfile costs the TaskProlog ~3 ms to import)
    tmp = os.path.join(path.parent, f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, sort_keys=True)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: Path) -> Any | None:
    """Read JSON; None when absent or unreadable (callers report it, never crash on it)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
