"""Compact JSON for the controller's hot paths: orjson, with the standard library where orjson refuses.

The controller service parses every node summary and encodes every merged one: with the standard
library that was about a quarter of its CPU at 50 job ends per second (py-spy, GIL samples). orjson
encodes a node summary 5x and parses it 2.5x faster (benchmarks/results/controller/README.md).
orjson is imported on first use, never at import: it pulls dataclasses, uuid and enum (~18 ms), which
the hooks must not pay (they use ``gpuperf.jsonlite``).
"""

from __future__ import annotations

import json
from typing import Any

_orjson: Any = None


def _lib() -> Any:
    global _orjson
    if _orjson is None:
        import orjson

        _orjson = orjson
    return _orjson


def dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes (key order kept; NaN as null); the standard library for what orjson
    refuses (integers beyond 64 bits, non-string keys it cannot name)."""
    lib = _lib()
    try:
        return lib.dumps(obj, option=lib.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(obj, separators=(",", ":")).encode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parsed JSON; text orjson rejects (NaN or Infinity written by the standard library into older
    records) goes to the standard library, which parses it or raises its own ``ValueError``."""
    lib = _lib()
    try:
        return lib.loads(data)
    except lib.JSONDecodeError:
        return json.loads(data)
