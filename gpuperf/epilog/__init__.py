"""gpuperf-epilog: finalise the job with the node daemon and leave the node summary.

Runs as root on each node after the job (Slurm ``Epilog``); never fails the job.
"""

from __future__ import annotations

import sys

from gpuperf.hookbase.hook import main_guard, run_hook

STEPS: list[tuple[str, str]] = [
    ("finalize", "gpuperf.epilog.finalize:step"),
]


def main() -> int:
    """Entry point of gpuperf-epilog: always exits 0 (an Epilog error would drain the node)."""
    main_guard(lambda: run_hook("epilog", STEPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
