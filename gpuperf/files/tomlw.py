"""Writing TOML values (the standard library reads TOML but does not write it)."""

from __future__ import annotations

import json
from typing import Any


def value(v: Any) -> str:
    """One TOML value: bool, number, string, list or inline table; TypeError for anything else."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} {v!r} as TOML")
