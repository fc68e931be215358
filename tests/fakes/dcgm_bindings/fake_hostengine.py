"""State of the stand-in hostengine that the fake bindings talk to (tests set it)."""

from __future__ import annotations

from typing import Any

up: bool = False
address: str = "localhost"
prof_supported: bool = True
# field ids this hostengine cannot watch (a GPU or DCGM version without them): WatchFields of a group
# holding any of them fails with NOT_SUPPORTED, as for profiling fields without profiling
unsupported: set[int] = set()
# gpuId -> fieldId -> value (None: blank)
gpus: dict[int, dict[int, Any]] = {}
# what the bindings did, for tests: ("watch", group, fields, freq_us, keep_s, samples), ("connect", addr)...
calls: list[tuple[Any, ...]] = []
groups: dict[str, list[int]] = {}
field_groups: dict[int, list[int]] = {}
watched: set[int] = set()


def reset() -> None:
    """Down, no GPUs, nothing watched."""
    global up, address, prof_supported
    up, address, prof_supported = False, "localhost", True
    gpus.clear()
    calls.clear()
    groups.clear()
    field_groups.clear()
    watched.clear()
    unsupported.clear()
