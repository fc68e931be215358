"""The last line of defence of every hook's entry point: gpuperf's own failure never fails a job.

Its own module, importing only ``sys`` and ``os``: the prolog's fast path uses it before anything
heavier loads, and the hooks' scripts end through ``exit_now``.
"""

from __future__ import annotations

import os
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


def exit_now(code: int) -> None:
    """``sys.exit(code)``, without the interpreter's teardown when there is none to do.

    A hook is a fresh process that ends here, and freeing every module and object on the way out costs
    it 2-4 ms, a fifth of the TaskProlog (benchmarks/hook_latency.py). Skipped only when nothing waits
    for the exit: no atexit callback (logging and pyzmq register theirs, so the full prolog exits as
    before) and no ``threading`` (its non-daemon threads are joined at exit). stdout and stderr are
    flushed first; a flush that fails leaves the exit to Python, as before.
    """
    import atexit

    pending = getattr(atexit, "_ncallbacks", None)  # CPython's count; elsewhere: the ordinary exit
    if pending is None or pending() or "threading" in sys.modules:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)
