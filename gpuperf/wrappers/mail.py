"""gpuperf-mail: Slurm's ``MailProg`` that adds the job's gpuperf headline and top recommendation.

slurmctld runs ``MailProg -s SUBJECT RECIPIENT`` with the job in its environment
(``SLURM_JOB_ID``: the raw id; ``SLURM_JOB_MAIL_TYPE``: ``Ended``, ``Failed``, ``Began``...;
``SLURM_ARRAY_*`` for arrays) and an empty body on stdin. For a job's end this waits at most
``report.mail_wait_s`` for its summary (the controller merges it a moment after the job ends), adds
gpuperf's lines to the body and hands everything to ``report.mail_program``. Any other mail, a job
gpuperf has nothing for, or any failure of gpuperf's own: the mail program gets Slurm's arguments
and body untouched. The whole run is bounded (an alarm), so the mail is never lost nor held long.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, Mapping

END_TYPES = ("Ended", "Failed")  # what slurmctld's SLURM_JOB_MAIL_TYPE says at a job's end
DEFAULT_PROGRAM = "/usr/bin/mail"
POLL_S = 1.0
ALARM_MARGIN_S = 5  # past report.mail_wait_s: the last sacct call, the mail program's start


class _Late(Exception):
    """The alarm: gpuperf took too long; the mail goes as Slurm wrote it."""


def _names(env: Mapping[str, str], subject: str) -> tuple[str, bool]:
    """(the job reference the mail is about, whether it is a whole array's summary)."""
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and ("Array Summary" in subject or f"{array}_*" in subject):
        return array, True
    return env.get("SLURM_JOB_ID", ""), False


def _summaries(cfg: Any, ref: str, whole_array: bool, deadline: float) -> tuple[list[tuple[str, dict]], int]:
    """(name, summary) of the job (or of every task), waiting until ``deadline`` for them; and how many
    tasks have none."""
    from gpuperf.jobrecords import JobRecords, summaries
    from gpuperf.access.slurm import Slurm

    wait_s = float(cfg.report.mail_wait_s)
    records = JobRecords(cfg, Slurm(cfg.general.slurm_bin_dir, timeout_s=max(1.0, min(5.0, wait_s / 2))))
    jobs = records.jobs(ref)
    exact = [j for j in jobs if str(j.raw) == ref]
    if not whole_array and exact and "+" not in exact[0].name:
        # one task's own mail (--mail-type=ARRAY_TASKS): its raw id may also be the array's, which lists all
        jobs = exact
    # a het job's mail is about every component: each with its own line
    if not cfg.report.cpu_jobs:
        # a job without GPUs has no summary to wait for (unknown to sacct yet: wait as for any job)
        tres = records.slurm.sacct_jobs([j.raw for j in jobs], ("JobID", "AllocTRES"))
        jobs = [j for j in jobs if "gres/gpu" in tres.get(j.raw, {}).get("AllocTRES", "gres/gpu")]
    got: dict[int, tuple[str, dict]] = {}
    while True:
        for j in jobs:
            if j.raw in got:
                continue
            # the merged summary: the controller's store at once, sacct's AdminComment once written
            for source in ("controller", "sacct"):
                found = summaries.find(cfg, j.raw, source)
                if found is not None and found.summary:
                    got[j.raw] = (j.name, found.summary)
                    break
        if len(got) == len(jobs) or time.time() + POLL_S > deadline:
            return [got[j.raw] for j in jobs if j.raw in got], len(jobs) - len(got)
        time.sleep(POLL_S)


def added_text(cfg: Any, env: Mapping[str, str], subject: str, now: float | None = None) -> str:
    """What gpuperf adds to this mail ('' when nothing)."""
    from gpuperf.report import mailtext

    if env.get("SLURM_JOB_MAIL_TYPE", "") not in END_TYPES:
        return ""
    ref, whole = _names(env, subject)
    if not ref:
        return ""
    deadline = (time.time() if now is None else now) + float(cfg.report.mail_wait_s)
    found, missing = _summaries(cfg, ref, whole, deadline)
    return mailtext.body(found, missing) if found else ""


def _subject(argv: list[str]) -> str:
    return argv[argv.index("-s") + 1] if "-s" in argv[:-1] else ""


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Entry point: send the mail through the real mail program, with gpuperf's lines when it has them."""
    args = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if env is None else env
    body = sys.stdin.buffer.read() if sys.stdin is not None and not sys.stdin.isatty() else b""
    program, extra = DEFAULT_PROGRAM, b""
    try:
        from gpuperf.files import config

        cfg = config.load_or_defaults()
        program = cfg.report.mail_program or DEFAULT_PROGRAM

        def late(*_a: object) -> None:
            raise _Late()

        signal.signal(signal.SIGALRM, late)
        signal.alarm(max(1, int(float(cfg.report.mail_wait_s) + ALARM_MARGIN_S)))
        try:
            extra = added_text(cfg, env, _subject(args)).encode()
        finally:
            signal.alarm(0)
    except BaseException as e:  # noqa: BLE001 - gpuperf's failure must never cost the mail
        if isinstance(e, KeyboardInterrupt):
            raise
        print(f"gpuperf-mail: sending the mail unchanged: {type(e).__name__}: {e}", file=sys.stderr)
        extra = b""
    try:
        return subprocess.run([program, *args], input=body + extra).returncode
    except OSError as e:
        print(f"gpuperf-mail: cannot run the mail program {program}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
