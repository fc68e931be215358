"""Job-end notices that ``gpuperf-epilog-slurmctld`` drops into ``controller.spool_dir``.

One file ``<job id>.ended`` per job: ``key=value`` lines (job_id, nodelist, user, uid, exit_code, and
job_ref: ``8_3`` for an array task, ``10+1`` for a het component, empty otherwise and absent from notices
of an older hook) ending with a line ``end``; its modification time is the job's end by the controller's clock. The
hook writes a hidden temporary file and renames it, so a file without ``end`` is damaged, not in
progress: it is moved aside as ``.bad`` and logged. The service reads the directory each tick, puts
the notices in its durable queue, and only then removes the files, so a crash in between loses nothing.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from gpuperf.files import log
from gpuperf.access.slurm import expand_hostlist
from gpuperf.model import jobref

SUFFIX = ".ended"


@dataclass
class Notice:
    """slurmctld's word that a job ended."""

    job_id: int
    nodes: list[str]
    user: str | None
    uid: int | None
    ended: float
    exit_code: int | None
    job_ref: str | None = None


def default_dir(cfg) -> str:
    """``controller.spool_dir``, or ``<state_dir>/ended`` (the hook computes the same default)."""
    return cfg.controller.spool_dir or os.path.join(cfg.general.state_dir, "ended")


def prepare(spool: str, slurm_user: str) -> str | None:
    """Make the spool directory the hook writes (SlurmUser's, 0700); why SlurmUser cannot, or None.

    EpilogSlurmctld runs as SlurmUser: the directory is handed to it when the service runs as root,
    and every directory above must let it through (a 0700 state_dir does not: set ``spool_dir``)."""
    try:
        os.makedirs(spool, mode=0o700, exist_ok=True)
        pw = pwd.getpwnam(slurm_user)
    except KeyError:
        return None  # no such user here (tests, a controller run as SlurmUser itself): nothing to hand over
    except OSError as e:
        return f"cannot create {spool}: {e.strerror}"
    if os.geteuid() == 0 and pw.pw_uid != 0:
        os.chown(spool, pw.pw_uid, pw.pw_gid)
    parent = os.path.dirname(os.path.abspath(spool))
    while parent not in ("/", ""):
        st = os.stat(parent)
        if pw.pw_uid not in (0, st.st_uid) and not st.st_mode & 0o001:
            return (f"{slurm_user} cannot reach {spool} ({parent} is mode {st.st_mode & 0o777:o}): "
                    "set controller.spool_dir to a directory it can write, e.g. /var/spool/gpuperf/ended")
        parent = os.path.dirname(parent)
    return None


def parse(text: str, mtime: float) -> Notice:
    """A notice file's text -> Notice; ValueError when damaged."""
    lines = text.splitlines()
    if not lines or lines[-1] != "end":
        raise ValueError("no 'end' line (truncated)")
    kv = dict(l.partition("=")[::2] for l in lines[:-1])
    if not kv.get("job_id", "").isdigit():
        raise ValueError(f"bad job_id {kv.get('job_id')!r}")

    def _int(v: str | None) -> int | None:
        return int(v) if v and v.lstrip("-").isdigit() else None

    return Notice(job_id=int(kv["job_id"]), nodes=expand_hostlist(kv.get("nodelist", "")),
                  user=kv.get("user") or None, uid=_int(kv.get("uid")), ended=mtime, exit_code=_int(kv.get("exit_code")),
                  job_ref=jobref.task_or_component(kv.get("job_ref", "")))


def read(spool: str, limit: int = 2000) -> list[tuple[Path, Notice]]:
    """The notices waiting in ``spool`` (at most ``limit``, oldest first); damaged ones moved aside."""
    try:
        entries = [e for e in os.scandir(spool) if e.name.endswith(SUFFIX) and not e.name.startswith(".")]
    except OSError:
        return []
    entries.sort(key=lambda e: e.stat().st_mtime)
    out = []
    for e in entries[:limit]:
        p = Path(e.path)
        try:
            out.append((p, parse(p.read_text(), e.stat().st_mtime)))
        except (OSError, ValueError, UnicodeDecodeError) as err:
            log.get("controller").error("job-end notice %s is damaged (%s); kept as %s.bad", p, err, p.name)
            try:
                os.replace(p, p.with_name(p.name + ".bad"))
            except OSError:
                pass
    return out


def remove(paths: list[Path]) -> None:
    """Forget notices that are in the queue now."""
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
