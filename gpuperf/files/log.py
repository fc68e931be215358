"""Logging for gpuperf: one line per event, to a file and stderr, never raising."""

from __future__ import annotations

import logging
import os
import sys

_FORMAT = "%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s"


def setup(component: str, log_file: str = "", level: str = "info", stderr: bool = True) -> logging.Logger:
    """Configure the root gpuperf logger for one program; a log file that cannot be opened is skipped."""
    logger = logging.getLogger("gpuperf")
    logger.handlers.clear()
    logger.setLevel(getattr(logging, level.upper(), logging.INFO))
    logger.propagate = False
    fmt = logging.Formatter(_FORMAT.replace("%(name)s", f"gpuperf-{component}"))
    if stderr:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(fmt)
        logger.addHandler(h)
    if log_file:
        try:
            os.makedirs(os.path.dirname(log_file) or ".", exist_ok=True)
            fh = logging.FileHandler(log_file)
            fh.setFormatter(fmt)
            logger.addHandler(fh)
        except OSError as e:
            # a hook must not fail because its log is unwritable (a user's TaskProlog, a read-only fs)
            if stderr:
                print(f"gpuperf-{component}: cannot open log file {log_file}: {e.strerror}", file=sys.stderr)
    return logger


def get(name: str = "") -> logging.Logger:
    """A child logger of gpuperf's."""
    return logging.getLogger(f"gpuperf.{name}" if name else "gpuperf")
