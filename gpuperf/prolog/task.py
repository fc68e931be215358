"""gpuperf-taskprolog: print the job's environment (``export NAME=value``) for Slurm's TaskProlog.

Runs as the job user in every task; must be fast (reads what the prolog computed) and must
never fail the task (a non-zero exit fails it, FACTS.md).
"""

from __future__ import annotations

import sys

from gpuperf.hookbase.hook import main_guard, run_hook

STEPS: list[tuple[str, str]] = [
    ("env", "gpuperf.prolog.envtask:step"),
]


def main() -> int:
    """Entry point of gpuperf-taskprolog: always exits 0."""
    main_guard(lambda: run_hook("taskprolog", STEPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
