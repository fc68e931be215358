"""gpuperf-epilog: finalise the job with the node daemon and leave the node summary.

Runs as root on each node after the job (Slurm ``Epilog``); never fails the job.
"""

from __future__ import annotations

import sys

from gpuperf.hookbase.hook import HookState, main_guard, run_hook

STEPS: list[tuple[str, str]] = [
    ("finalize", "gpuperf.epilog.finalize:step"),
]


def main() -> int:
    """Entry point of gpuperf-epilog: always exits 0 (an Epilog error would drain the node)."""
    main_guard(lambda: run_hook("epilog", STEPS, state=_state()))
    return 0


def _state() -> HookState:
    """The hook's state; a daemon the compiled client found down is not waited for again."""
    import os

    from gpuperf.hookbase import fallback

    state = HookState()
    got = fallback.parse(os.environ.get(fallback.VAR))
    if got is not None:
        state.data["fast_path"] = f"{got[0]}: {got[1]}"
        if got[0] == "down":
            state.daemon_down = got[1]
    return state


if __name__ == "__main__":
    sys.exit(main())
