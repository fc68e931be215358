"""Shared bits of the GPU workloads: arguments and a deadline loop (each workload is its own script)."""

from __future__ import annotations

import argparse
import time


def args(doc: str, **extra: tuple[type, object, str]) -> argparse.Namespace:
    """Parse ``--seconds`` plus workload-specific options given as name=(type, default, help)."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--seconds", type=float, required=True, help="how long to run")
    for name, (typ, default, hlp) in extra.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=typ, default=default, help=hlp)
    a = p.parse_args()
    if a.seconds <= 0:
        p.error("--seconds must be > 0")
    return a


def until(seconds: float):
    """Yield iteration numbers until ``seconds`` of wall time have passed."""
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        yield i
        i += 1


def report(name: str, **figures: object) -> None:
    """One line saying what the workload did, for the recording's log."""
    print(f"{name}: " + " ".join(f"{k}={v}" for k, v in figures.items()), flush=True)


def window(t0: float, t1: float) -> dict[str, float]:
    """The timed loop's wall-clock window (unix seconds), so a test can read the recording over it alone."""
    return {"t_start": round(t0, 3), "t_end": round(t1, 3)}
