"""What the compiled hook client (``gpuperf/wrappers/gpuperf_hook.c``) tells the Python hook it falls back to.

The client asks the node daemon to run the hook; when it cannot (no daemon, the daemon declines, a config
it does not read) it execs the Python hook with ``GPUPERF_HOOK_FALLBACK="<kind>: <why>"``: ``declined``
(the daemon answered and said why not), ``down`` (no answer) or ``client`` (the daemon was not asked).
A Python hook then does not ask again what the client already asked. Standard library only.
"""

from __future__ import annotations

VAR = "GPUPERF_HOOK_FALLBACK"
KINDS = ("declined", "down", "client")


def parse(value: str | None) -> tuple[str, str] | None:
    """(kind, why) of the variable's value; None when absent or not the client's."""
    kind, _, why = (value or "").partition(": ")
    return (kind, why) if kind in KINDS else None
