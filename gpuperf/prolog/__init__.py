"""gpuperf-prolog: health checks, daemon registration, env and affinity plans for the job.

Runs as root on each node before the job (Slurm ``Prolog``). Steps are named by import path
and each belongs to its feature's module.
"""

from __future__ import annotations

import sys

from gpuperf.hook import main_guard, run_hook

STEPS: list[tuple[str, str]] = [
    ("health", "gpuperf.prolog.health:step"),
    ("register", "gpuperf.prolog.register:step"),
    ("env", "gpuperf.prolog.envplan:step"),
    ("affinity", "gpuperf.prolog.affinityplan:step"),
]


def main() -> int:
    """Entry point of gpuperf-prolog."""
    return main_guard(lambda: run_hook("prolog", STEPS))


if __name__ == "__main__":
    sys.exit(main())
