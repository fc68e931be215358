"""What a benchmark prints and keeps: its figures as indented JSON on stdout, and in --json's file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def emit(figures: dict[str, Any], json_path: str | None) -> None:
    """Print the figures; write them to ``json_path`` too when one is given."""
    text = json.dumps(figures, indent=1)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")


def provenance(root: Path) -> str:
    """Today's date and the checkout's commit, "+ uncommitted changes" when tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{time.strftime('%Y-%m-%d')}, commit {git('rev-parse', '--short', 'HEAD')}{' + uncommitted changes' if dirty else ''}"


def cluster_test_figures(root: Path, test: str, figures_file: str, run: bool = True) -> dict[str, Any]:
    """Run one integration test file on this checkout's test cluster (``GPUPERF_TEST_CLUSTER``, with the
    ``GPUPERF_PREFIX`` install's Python) unless ``run`` is false, then read the figures it left in the cluster's
    directory: {"rc", "name", "prefix", "load", "took_s", "figures"} ("figures" None when the run failed)."""
    name = os.environ.get("GPUPERF_TEST_CLUSTER", "pytest")
    prefix = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf")
    out: dict[str, Any] = {"rc": 0, "name": name, "prefix": prefix, "took_s": None, "figures": None,
                           "load": "rendered from the last run; its load average not recorded"}
    if run:
        out["load"] = "load average %.2f %.2f %.2f before the run" % os.getloadavg()
        t0 = time.time()
        out["rc"] = subprocess.run([prefix + "/venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                                   cwd=root).returncode
        out["took_s"] = time.time() - t0
        if out["rc"]:
            print(f"{test} failed (exit {out['rc']}): nothing rendered", file=sys.stderr)
            return out
    out["figures"] = json.loads((Path(f"/tmp/gpuperf-slurm-{name}") / figures_file).read_text())
    return out
