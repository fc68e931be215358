"""The controller service with a stub AdminComment writer, as a process (kill -9 tests, load benchmarks).

usage: python controller_stub.py CONFIG LATENCY_S WRITES_LOG [FAIL_FLAG] [CALL_S]
A batch's write takes CALL_S (default 0) + LATENCY_S per job. Writes go to WRITES_LOG ("time job_id crc32" per line), so they survive the process being killed;
every write fails while the file FAIL_FLAG exists (the database is down).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

from gpuperf.files import config, log
from gpuperf.controller import accounting, service


def main() -> int:
    """Run until SIGTERM."""
    cfg = config.load(sys.argv[1])
    log.setup("controller", cfg.general.log_file, "warning", stderr=True)
    flag = sys.argv[4] if len(sys.argv) > 4 else ""

    class FlagWriter(accounting.StubWriter):
        @property
        def failing(self) -> bool:
            return bool(flag) and os.path.exists(flag)

        @failing.setter
        def failing(self, _v: bool) -> None:
            pass

    call_s = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    writer = FlagWriter(float(sys.argv[2]), per_job=True, log_path=sys.argv[3], call_s=call_s)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    service.tune_gc()  # as the service's main does
    svc = service.serve(cfg, stop, writer=writer)
    # CPU seconds per part of the service, for the benchmark (beside the writes log)
    with open(sys.argv[3] + ".cpu.json", "w") as f:
        json.dump({k: round(v, 2) for k, v in svc.cpu_s.items()}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
