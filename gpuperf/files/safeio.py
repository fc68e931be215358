"""The one way root reads a file a job's user can write (``applied/``, ``env/``, ``env.json``, ``tasks/``).

A user owns those files and directories, so each may be a FIFO (an open blocks for ever), a link
to ``/dev/zero`` or ``/etc/shadow`` (reads without end, or someone else's data), a hard link to
another job's file, a 1 GB sparse file, or one of 100,000 entries. Here every read:

- opens relative to the directory's descriptor with ``O_NOFOLLOW | O_NONBLOCK`` after an ``lstat``
  that says regular file (a FIFO or device is never opened), then ``fstat`` checks it is the same
  regular file, owned by the expected uid, with one link;
- is bounded in size before (``st_size``) and while reading (a file that grows is cut off);
- lists at most ``max_entries`` names of a directory (``scandir`` stops there, so a huge directory
  costs no more than a small one);
- counts against byte budgets: ``max_total`` for one directory read, and the job's budget carried by
  its ``Ignored`` (``JOB_MAX_BYTES`` over every read of one job's files), so 4,096 files of 64 KiB
  cost a reader what the budget allows, not 256 MiB and their parsing;
- decodes UTF-8 with replacement and JSON with a bound on nesting (``RecursionError`` is refused).

Each refusal is a reason (``record ignored: <name>: <why>``) added to an ``Ignored`` that the caller
puts in the job's report, and logged once per process. The hooks import it: standard library only,
``logging`` imported on the first refusal, JSON through ``gpuperf.jsonlite`` (no ``json``/``re``).
"""

from __future__ import annotations

import os
import stat
from gpuperf.files import jsonlite

TYPE_CHECKING = False  # typing itself costs a hook's start ~5 ms (test_hook_imports)
if TYPE_CHECKING:
    from typing import Any

MAX_BYTES = 1 << 20          # a task's record is under 1 KiB; env.json of a big plan ~ 20 KiB
MAX_ENTRIES = 4096           # ranks x steps of one job on one node; more is not a real job
SHOWN = 10                   # reasons a report keeps (it must fit an AdminComment)
MAX_DIR_BYTES = 4 << 20      # one directory read: ranks x steps records of a few hundred bytes
JOB_MAX_BYTES = 8 << 20      # every read of one job's files together (through one Ignored)

_logged: set[str] = set()


class Ignored:
    """The records refused while reading one job's files: reasons for its report, each logged once; and
    the bytes still to read of that job's files (``left``: every read through this object counts)."""

    __slots__ = ("reasons", "more", "left")

    def __init__(self, budget: int = JOB_MAX_BYTES) -> None:
        self.reasons: list[str] = []
        self.more = 0
        self.left = budget

    def add(self, name: str, why: str) -> None:
        """Record one refusal (``name`` relative to the job dir); the first ``SHOWN`` are logged."""
        text = f"record ignored: {_printable(name)}: {why}"
        if text in self.reasons:
            return
        if len(self.reasons) >= SHOWN:
            # a user who plants thousands of entries must not write thousands of lines into root's log
            self.more += 1
            if self.more == 1:
                _log(f"record ignored: more than {SHOWN} records of this job; the rest are counted, not logged")
            return
        self.reasons.append(text)
        if text not in _logged and len(_logged) < 10000:
            _logged.add(text)
            _log(text)

    def shown(self) -> list[str]:
        """The reasons as the report shows them (bounded, with a count of the rest)."""
        return self.reasons + ([f"record ignored: {self.more} more"] if self.more else [])


# C0 and C1 control characters (not tab or newline) as visible escapes: a user's record must not put
# terminal escapes on an admin's screen (rich keeps ESC) or fake lines in a log
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0))}


def printable(text: str) -> str:
    """``text`` with control characters (but tab and newline) written as ``\\xNN``."""
    return text.translate(_CONTROLS)


def printable_json(obj: Any) -> Any:
    """A parsed user record with ``printable`` applied to every string in it (keys too)."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, list):
        return [printable_json(x) for x in obj]
    if isinstance(obj, dict):
        return {printable(str(k)): printable_json(v) for k, v in obj.items()}
    return obj


def _log(text: str) -> None:
    import logging  # only once something was refused: the TaskProlog's common case stays light

    logging.getLogger("gpuperf.files.safeio").warning("%s", text)


def _printable(name: str) -> str:
    # a user's file name may hold newlines or terminal escapes: the report and the log get it escaped
    out = name.encode("unicode_escape", "backslashreplace").decode("ascii")
    return out if len(out) <= 120 else out[:117] + "..."


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return what
    return "not a regular file"


def _check(st: os.stat_result, uid: int | None, max_bytes: int, room: tuple[int, str] | None = None) -> str | None:
    """Why a file with this stat must not be read, or None (``room``: bytes left of a budget, its name)."""
    if not stat.S_ISREG(st.st_mode):
        return f"{_kind(st.st_mode)}, not a regular file"
    if uid is not None and st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not the job's uid {uid}"
    if st.st_nlink != 1:
        return f"a hard link ({st.st_nlink} links)"
    if st.st_size > max_bytes:
        return f"{st.st_size} bytes, over the {max_bytes}-byte limit"
    if room is not None and st.st_size > room[0]:
        return f"{st.st_size} bytes, over the {room[0]} bytes left of the {room[1]}"
    return None


def _describe(path: str | os.PathLike[str]) -> str | None:
    """What a path that could not be opened as a directory is instead (a link, a FIFO...)."""
    try:
        return _kind(os.lstat(path).st_mode)
    except OSError:
        return None


class _Refused(Exception):
    pass


def _open_dir(path: str | os.PathLike[str], uid: int | None) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if uid is not None and st.st_uid != uid:
        os.close(fd)
        raise _Refused(f"directory owned by uid {st.st_uid}, not the job's uid {uid}")
    return fd


def _read_at(dir_fd: int, name: str, uid: int | None, max_bytes: int, room: tuple[int, str] | None = None) -> bytes:
    try:
        pre = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        raise _Refused(e.strerror or "cannot stat") from None
    why = _check(pre, uid, max_bytes, room)
    if why:
        raise _Refused(why)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        raise _Refused("a symbolic link" if e.errno == 40 else (e.strerror or "cannot open")) from None
    try:
        st = os.fstat(fd)
        # replaced between lstat and open: judge what was opened
        why = _check(st, uid, max_bytes, room) or (None if (st.st_ino, st.st_dev) == (pre.st_ino, pre.st_dev)
                                              else "replaced while opened")
        if why:
            raise _Refused(why)
        chunks, total = [], 0
        limit = max_bytes if room is None else min(max_bytes, room[0])
        while True:
            b = os.read(fd, min(65536, limit + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if total > limit:
                raise _Refused(f"grew over the {limit}-byte limit while read")
        return b"".join(chunks)
    except OSError as e:
        raise _Refused(e.strerror or "cannot read") from None
    finally:
        os.close(fd)


def read_bytes(path: str | os.PathLike[str], *, uid: int | None = None, max_bytes: int = MAX_BYTES,
               ignored: Ignored | None = None, name: str | None = None) -> bytes | None:
    """A user-writable file's bytes; None when absent (quietly) or refused (reason added to ``ignored``)."""
    path = os.fspath(path)
    parent, base = os.path.split(path)
    ignored = ignored if ignored is not None else Ignored()
    try:
        dfd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = _read_at(dfd, base, uid, max_bytes, (ignored.left, "job's budget"))
        ignored.left -= len(data)
        return data
    except _Refused as e:
        if str(e) != os.strerror(2):  # absent is not a refusal
            ignored.add(name or base, str(e))
        return None
    finally:
        os.close(dfd)


def read_text(path: str | os.PathLike[str], **kw: Any) -> str | None:
    """``read_bytes`` decoded as UTF-8, bad bytes replaced, control characters escaped."""
    b = read_bytes(path, **kw)
    return None if b is None else text_of(b)


def text_of(data: bytes) -> str:
    """A user-written record's bytes as text: UTF-8 (bad bytes replaced), control characters escaped."""
    return printable(data.decode("utf-8", "replace"))


def parse_json(data: bytes | str) -> Any:
    """JSON of a user-written record (strings ``printable``); ValueError for bad or too deeply nested JSON."""
    try:
        return printable_json(jsonlite.loads(data))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def read_json(path: str | os.PathLike[str], *, ignored: Ignored | None = None, name: str | None = None,
              **kw: Any) -> Any | None:
    """A user-written JSON file; None when absent or refused (bad JSON is a refusal too)."""
    b = read_bytes(path, ignored=ignored, name=name, **kw)
    if b is None:
        return None
    try:
        return parse_json(b.decode("utf-8", "replace"))
    except ValueError as e:
        (ignored or Ignored()).add(name or os.path.basename(os.fspath(path)), f"not JSON ({str(e)[:80]})")
        return None


def read_dir(path: str | os.PathLike[str], *, uid: int | None = None, max_entries: int = MAX_ENTRIES,
             max_bytes: int = MAX_BYTES, max_total: int = MAX_DIR_BYTES, ignored: Ignored | None = None,
             prefix: str = "", suffix: str = "", label: str | None = None) -> list[tuple[str, bytes]]:
    """(name, bytes) of the regular files in a user-writable directory, sorted by name.

    ``uid`` None: the directory's own owner (the prolog gave it to the job's user, who cannot give it
    away) is what every entry must be owned by. Only names with ``prefix``/``suffix`` count; at most
    ``max_entries`` entries are looked at, at most ``max_total`` bytes read (and no more than what is
    left of the job's budget in ``ignored``). Absent directory: []."""
    ignored = ignored if ignored is not None else Ignored()
    label = label if label is not None else os.path.basename(os.fspath(path))
    try:
        dfd = _open_dir(path, uid)
    except FileNotFoundError:
        return []
    except _Refused as e:
        ignored.add(label, str(e))
        return []
    except OSError as e:
        ignored.add(label, _describe(path) or e.strerror or "cannot open")
        return []
    try:
        owner = os.fstat(dfd).st_uid if uid is None else uid
        names, seen = [], 0
        with os.scandir(dfd) as it:
            for entry in it:
                seen += 1
                if seen > max_entries:
                    ignored.add(label, f"more than {max_entries} entries: only the first {max_entries} read")
                    break
                if entry.name.startswith(prefix) and entry.name.endswith(suffix) and not entry.name.startswith("."):
                    names.append(entry.name)
        out, total = [], 0
        for n in sorted(names):
            room = (max_total - total, f"{max_total}-byte budget of {label}/") if max_total - total < ignored.left \
                else (ignored.left, "job's budget")
            try:
                data = _read_at(dfd, n, owner, max_bytes, room)
            except _Refused as e:
                ignored.add(f"{label}/{n}", str(e))
                continue
            total += len(data)
            ignored.left -= len(data)
            out.append((n, data))
        return out
    finally:
        os.close(dfd)
