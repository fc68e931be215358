"""What a benchmark prints and keeps: its figures as indented JSON on stdout, and in --json's file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(figures: dict[str, Any], json_path: str | None) -> None:
    """Print the figures; write them to ``json_path`` too when one is given."""
    text = json.dumps(figures, indent=1)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")
