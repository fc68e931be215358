"""The last line of defence of every hook's entry point: gpuperf's own failure never fails a job.

Its own module, importing only ``sys``: the prolog's fast path uses it before anything heavier loads.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself costs a hook ~3 ms
if TYPE_CHECKING:
    from collections.abc import Callable


def main_guard(fn: Callable[[], int]) -> int:
    """Last line of defence for hook entry points: anything escaping is logged and exit 0."""
    try:
        return fn()
    except SystemExit as e:
        return int(e.code or 0)
    except BaseException as e:  # noqa: BLE001
        print(f"gpuperf: internal error, job unaffected: {type(e).__name__}: {e}", file=sys.stderr)
        return 0
