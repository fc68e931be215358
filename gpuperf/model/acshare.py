"""AdminComment shared with other tools: gpuperf's part found, and written beside theirs, never over it.

Another tool may own the field already: Princeton's jobstats writes ``JS1:`` + base64(gzip(JSON)) from
EpilogSlurmctld (``sacctmgr ... set AdminComment=JS1:...``, overwriting whatever was there), and Kempner's
jobscope reads that blob. gpuperf's part is ``gpuperf:v1`` followed by its ``key=value`` tokens (the
headline, then ``z=<payload>``: ``admincomment``); everything else in the field is another's and is kept
as it was, in place.

Layout written: ``<their text> gpuperf:v1 ... z=...``: theirs first, because jobstats reads its blob only
when the field *starts* with ``JS1:`` and decodes the rest with a lenient base64 decoder that reads on
into whatever follows. Where their blob ends without base64 padding, gpuperf puts ``AA==`` between: a
padded quad ends that decoder's input, and the one zero byte it adds after the gzip member is skipped by
Python's gzip (trailing zeros are allowed), so jobstats still decodes its own summary
(tests/unit/test_acshare.py runs jobstats' decoding on both layouts).

What a Slurm release keeps of it: 22.05's sacctmgr lowercases the whole value and turns quotes into
backticks (FACTS.md). gpuperf's part is lowercase-safe; a jobstats blob written through 22.05's sacctmgr
is lowercased by jobstats' own write already (base64 loses its case: no reader can decode it there, and
jobstats' reader, which wants ``JS1:``, does not try); gpuperf keeps those bytes as they are. Quotes
in another tool's text are written as the backticks 22.05 would make of them: gpuperf's sacctmgr lines
quote the value, and a quote inside cannot be carried.

The field holds at most ``LIMIT`` bytes (sacct cuts silently beyond): when theirs and gpuperf's whole
part do not fit, gpuperf's part drops its payload and keeps the headline (the full summary stays in the
controller's store); when not even that fits, nothing is written (their text is never cut).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "gpuperf:v1"
LIMIT = 65535                    # bytes sacct keeps of an AdminComment (FACTS.md)
JS1 = "js1:"                     # jobstats' marker (compared lowercased: 22.05 lowercases it)
B64_END = "AA=="                 # ends a lenient base64 decoder's input after an unpadded blob

# gpuperf's part: the prefix at the start or after white space, then its key=value tokens (lowercase
# keys; the payload is one token); another tool's text around it is left out of the match
_OURS = re.compile(r"(?:^|(?<=\s))gpuperf:v1(?:\s+[a-z_]+=\S*)*", re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_QUOTES = str.maketrans({'"': "`", "'": "`"})


@dataclass(frozen=True)
class Shared:
    """One AdminComment split: the text before gpuperf's part, gpuperf's part ('' when none), the text after."""

    before: str
    ours: str
    after: str

    @property
    def theirs(self) -> str:
        """Everything that is not gpuperf's, as one text (the separator gpuperf added dropped)."""
        return " ".join(t for t in (self.before, self.after) if t)


def split(text: str | None) -> Shared:
    """Find gpuperf's part of an AdminComment (pure); the rest, without gpuperf's separator, is theirs."""
    text = text or ""
    m = _OURS.search(text)
    if m is None:
        return Shared(text.strip(), "", "")
    before = text[:m.start()].rstrip()
    if before.upper().endswith(" " + B64_END) and before.lower().startswith(JS1):
        before = before[:-len(B64_END)].rstrip()
    return Shared(before, m.group(0), text[m.end():].strip())


def ours(text: str | None) -> str:
    """gpuperf's part of an AdminComment, '' when it holds none (pure; what every reader decodes)."""
    if not text:
        return ""
    m = _OURS.search(text)
    return m.group(0) if m else ""


def _separator(theirs: str) -> str:
    """What goes between their text and gpuperf's: a base64 end after an unpadded jobstats blob."""
    if theirs.lower().startswith(JS1) and not theirs.endswith("="):
        return f" {B64_END} "
    return " "


def _headline_only(mine: str) -> str:
    return " ".join(t for t in mine.split() if not t.lower().startswith("z="))


def join(current: str | None, mine: str, limit: int = LIMIT) -> str | None:
    """The AdminComment to write (pure): the text another tool left in ``current`` kept as it is and
    gpuperf's ``mine`` after it, replacing gpuperf's earlier part; None when theirs leaves no room even
    for gpuperf's headline (nothing may be cut of theirs)."""
    # one line on sacctmgr's stdin, in quotes: a line break cannot be carried, a quote becomes 22.05's backtick
    theirs = " ".join(split(current).theirs.replace('"', "`").splitlines())
    if not theirs:
        return mine
    sep = _separator(theirs)
    for part in (mine, _headline_only(mine)):
        text = theirs + sep + part
        if len(text.encode()) <= limit:
            return text
    return None


def _norm(text: str) -> str:
    return _SPACES.sub(" ", text.strip()).lower().translate(_QUOTES)


def same(shown: str | None, written: str) -> bool:
    """Whether sacct shows what was written (pure): compared as 22.05 stores it (lowercased, quotes as
    backticks) and with white space runs as one (sacctmgr may trim)."""
    return _norm(shown or "") == _norm(written)
