"""gpuperf-epilog-slurmctld: merge node summaries into the job's AdminComment and cluster store."""

from __future__ import annotations

import sys

from gpuperf.hook import main_guard, run_hook

STEPS: list[tuple[str, str]] = [
    ("merge", "gpuperf.controller.merge:step"),
]


def main() -> int:
    """Entry point of gpuperf-epilog-slurmctld: always exits 0."""
    main_guard(lambda: run_hook("epilog-slurmctld", STEPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
