"""A time bound for one hook process: past it, one log line and the process ends.

Whatever a job did (a FIFO where a record should be, a hung file system, a controller that never
answers), a hook must not outlive Slurm's ``PrologEpilogTimeout``: Slurm would kill it and drain the
node for gpuperf's slowness. So each hook arms a timer thread at start (``[watchdog] <hook>_s``);
when it fires, it writes one line to the log file and stderr with plain ``os.write`` (the logging
module's locks may be held by the stuck thread) and calls ``os._exit``, which ends the process even
while its main thread is blocked in a system call. The exit code is 0 (the job is never failed and
the node never drained by gpuperf's own slowness), unless a step already *decided* otherwise
(``decided``): a failed health check that is draining the node still exits non-zero.

Standard library only, and no work at import: every hook imports it. ``_thread`` rather than
``threading`` (which imports functools, collections, ... in every hook's start).
"""

from __future__ import annotations

import _thread
import os
import time

_cancel = None   # the armed bound's lock: released = disarmed
_code = 0

# config key of each hook's bound ([watchdog] section)
# (EpilogSlurmctld is a POSIX shell script that only drops a notice file: bounded by what it does)
KEYS = {"prolog": "prolog_s", "epilog": "epilog_s", "taskprolog": "taskprolog_s"}


def bound_of(cfg: object, hook: str) -> float | None:
    """The configured bound of ``hook`` in seconds, None when it has none."""
    key = KEYS.get(hook)
    section = getattr(cfg, "watchdog", None) if key else None
    value = getattr(section, key, None) if section is not None else None
    return float(value) if value else None


def arm(hook: str, seconds: float | None, log_file: str = "") -> None:
    """Start (or restart) the bound of this process: after ``seconds``, log one line and exit."""
    global _cancel, _code
    disarm()
    _code = 0
    if not seconds or seconds <= 0:
        return
    lock = _thread.allocate_lock()
    lock.acquire()
    _cancel = lock
    _thread.start_new_thread(_wait, (lock, hook, float(seconds), log_file))


def _wait(lock: object, hook: str, seconds: float, log_file: str) -> None:
    if not lock.acquire(timeout=seconds):  # type: ignore[attr-defined]
        _expire(hook, seconds, log_file)


def decided(exit_code: int) -> None:
    """A step decided the hook's exit code (a drain under way): the watchdog exits with it too."""
    global _code
    _code = exit_code


def disarm() -> None:
    """Stop the bound (the hook finished; in-process callers such as tests must not be ended later)."""
    global _cancel
    lock, _cancel = _cancel, None
    if lock is not None:
        lock.release()


def line(hook: str, seconds: float, code: int, pid: int | None = None) -> str:
    """The log line the watchdog writes (the log module's format)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S") + ",000"
    return (f"{stamp} gpuperf-{hook}[{pid or os.getpid()}] ERROR watchdog: {hook} still running after "
            f"{seconds:g} s ([watchdog] {KEYS.get(hook, '?')}); its work is ended, exit {code}\n")


def _expire(hook: str, seconds: float, log_file: str) -> None:
    code = _code
    data = line(hook, seconds, code).encode()
    targets = [2]
    if log_file:
        try:
            targets.append(os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644))
        except OSError:
            pass
    for fd in targets:
        try:
            os.write(fd, data)
        except OSError:
            pass  # a full pipe or a gone log must not keep the process alive
    os._exit(code)
