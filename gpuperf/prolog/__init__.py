"""gpuperf-prolog: health checks, daemon registration, env and affinity plans for the job.

Runs as root on each node before the job (Slurm ``Prolog``). With the daemon up, the daemon runs
the steps (``fast``: one round trip); otherwise, or when it declines, they run here. Steps are
named by import path and each belongs to its feature's module. Nothing heavy is imported at the
top: the fast path must not pay for the full one.
"""

from __future__ import annotations

import sys

STEPS: list[tuple[str, str]] = [
    ("health", "gpuperf.prolog.health:step"),
    ("register", "gpuperf.prolog.register:step"),
    ("env", "gpuperf.prolog.envplan:step"),
    ("affinity", "gpuperf.prolog.affinityplan:step"),
]


def _run() -> int:
    import os

    from gpuperf.prolog import fast

    # the compiled client (gpuperf-hook) already asked the daemon: do not ask again
    outcome = fast.client_outcome(os.environ.get("GPUPERF_HOOK_FALLBACK"))
    if outcome is None:
        try:
            outcome = fast.try_daemon(os.environ)
        except Exception as e:  # noqa: BLE001 - the fast path's failure costs only speed
            outcome = fast.Outcome(why=f"fast path failed: {type(e).__name__}: {e}")
    if outcome.exit_code is not None:
        return outcome.exit_code
    from gpuperf.hookbase.hook import HookState, run_hook

    state = HookState()
    state.data["fast_path"] = outcome.why
    if outcome.daemon_down:
        state.daemon_down = outcome.why
    return run_hook("prolog", STEPS, state=state)


def main() -> int:
    """Entry point of gpuperf-prolog."""
    from gpuperf.hookbase.guard import main_guard

    return main_guard(_run)


if __name__ == "__main__":
    sys.exit(main())
