"""What a benchmark prints and keeps: its figures as indented JSON on stdout, and in --json's file."""

from __future__ import annotations

import json
import subprocess
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
