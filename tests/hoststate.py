"""What of gpuperf exists in the machine's real state paths: snapshot at session start, compare at the end.

Tests and benchmarks must never write /etc/gpuperf, /var/lib/gpuperf, /run/gpuperf, /var/log/gpuperf
(nor any other gpuperf-named file under /etc, /var/lib, /run, /var/log): the test cluster keeps all of
its state under /tmp/gpuperf-slurm-<name>/. ``snapshot`` lists every such path; ``new_paths`` is what a
session left behind. /run/netns is not looked at: the two-node test cluster's namespaces live there and
other checkouts on the same machine start and stop theirs at any time.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

ROOTS = ("/etc", "/var/lib", "/run", "/var/log")
SKIP = ("/run/netns",)


def snapshot(roots: tuple[str, ...] = ROOTS, name: str = "gpuperf") -> set[str]:
    """Every path under ``roots`` whose name (up to 3 levels down) contains ``name``, and all below it."""
    found: set[str] = set()
    for root in roots:
        for depth in ("", "*/", "*/*/"):
            for hit in glob.glob(f"{root}/{depth}*{name}*"):
                if any(hit == s or hit.startswith(s + "/") for s in SKIP):
                    continue
                found.add(hit)
                if os.path.isdir(hit) and not os.path.islink(hit):
                    for dirpath, dirs, files in os.walk(hit):
                        found.update(os.path.join(dirpath, x) for x in dirs + files)
    return found


def new_paths(before: set[str], after: set[str]) -> list[str]:
    """Paths that exist now and did not before, shortest first (a new directory before its contents)."""
    return sorted(after - before, key=lambda p: (len(Path(p).parts), p))


def report(paths: list[str], limit: int = 20) -> str:
    """The message of a failed check: what appeared, and the rule."""
    shown = "\n  ".join(paths[:limit]) + (f"\n  ... and {len(paths) - limit} more" if len(paths) > limit else "")
    return ("the test session created gpuperf paths in the machine's real state directories "
            "(tests must use the test cluster's /tmp/gpuperf-slurm-<name>/ or tmp_path; on a shared machine, "
            "another checkout's session may have made them: its job ids and cluster name are in them):\n  " + shown)
