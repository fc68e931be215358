"""JSON for the hooks' fast path: CPython's own C codec (``_json``), without the ``json`` package.

Why: ``import json`` compiles regular expressions at import and so imports ``re`` (with enum,
functools, collections): a third to a half of an interpreter's start, paid by every prolog and
every task. The ``_json`` accelerator that ``json`` itself drives needs none of that. ``dumps`` gives
what ``json.dumps`` gives for the same arguments and ``loads`` parses with the same scanner
(``tests/unit/test_jsonlite.py`` checks both against ``json``); where ``_json`` is missing (another
Python) both are ``json``'s own. Errors are ``ValueError`` (``TypeError`` for an unencodable value),
as with ``json``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WS = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


def _not_serializable(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


class _Scanning:
    """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder`` (its defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


try:
    import _json

    _scan = _json.make_scanner(_Scanning())
    _make_encoder = _json.make_encoder
    _encode_str = _json.encode_basestring_ascii
except (ImportError, AttributeError, TypeError):  # another implementation: json's own
    _json = None  # type: ignore[assignment]


def loads(s: str | bytes | bytearray) -> Any:
    """``json.loads`` for UTF-8 text; ValueError on anything that is not one JSON value."""
    if isinstance(s, (bytes, bytearray)):
        s = s.decode("utf-8", "surrogatepass")  # what json.loads does with UTF-8 bytes
    if _json is None:
        import json

        return json.loads(s)
    start = len(s) - len(s.lstrip(_WS))
    try:
        obj, end = _scan(s, start)
    except StopIteration as e:
        raise ValueError(f"Expecting value: char {e.value}") from None
    if s[end:].strip(_WS):
        raise ValueError(f"Extra data: char {end}")
    return obj


def dumps(obj: Any, *, sort_keys: bool = False, separators: tuple[str, str] = (", ", ": "),
          allow_nan: bool = True, default: Callable[[Any], Any] | None = None) -> str:
    """``json.dumps(obj, sort_keys=..., separators=..., allow_nan=..., default=...)``, ASCII output."""
    if _json is None:
        import json

        return json.dumps(obj, sort_keys=sort_keys, separators=separators, allow_nan=allow_nan, default=default)
    item_sep, key_sep = separators
    enc = _make_encoder({}, default or _not_serializable, _encode_str, None, key_sep, item_sep,
                        sort_keys, False, allow_nan)
    return "".join(enc(obj, 0))
