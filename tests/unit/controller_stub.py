"""The controller service with a stub AdminComment writer, as a process (kill -9 tests, load benchmarks).

usage: python controller_stub.py CONFIG LATENCY_S WRITES_LOG [failing]
Writes go to WRITES_LOG ("time job_id crc32" per line), so they survive the process being killed.
"""

from __future__ import annotations

import signal
import sys
import threading

from gpuperf import config, log
from gpuperf.controller import accounting, service


def main() -> int:
    """Run until SIGTERM."""
    cfg = config.load(sys.argv[1])
    log.setup("controller", cfg.general.log_file, "warning", stderr=True)
    writer = accounting.StubWriter(float(sys.argv[2]), failing=len(sys.argv) > 4 and sys.argv[4] == "failing",
                                   per_job=True, log_path=sys.argv[3])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    service.serve(cfg, stop, writer=writer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
