"""munge credentials through libmunge (ctypes), without starting ``munge``/``unmunge`` per message.

At cluster scale the controller verifies hundreds of node summaries a second; a fork and exec of
``unmunge`` for each costs more CPU than everything else the collector does. libmunge (Debian's
``libmunge2``, installed with munge) asks munged over its socket, the same check ``unmunge``
makes: MAC, TTL, replay. ``available()`` is False where the library is missing; ``transport`` then
falls back to the binaries.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

MUNGE_OPT_SOCKET = 8  # enum munge_opt in munge.h


class MungeError(Exception):
    """libmunge refused: the message is munged's (e.g. 'Replayed credential', 'Expired credential')."""


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    for name in ("libmunge.so.2", ctypes.util.find_library("munge")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint32),
                                     ctypes.POINTER(ctypes.c_uint32)]
        lib.munge_ctx_create.restype = ctypes.c_void_p
        lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
        lib.munge_ctx_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]
        lib.munge_strerror.restype = ctypes.c_char_p
        return lib
    return None


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]


def available() -> bool:
    """Whether libmunge can be loaded here."""
    return _lib() is not None


def _ctx(lib: ctypes.CDLL, socket: str) -> ctypes.c_void_p | None:
    if not socket:
        return None
    ctx = lib.munge_ctx_create()
    lib.munge_ctx_set(ctx, MUNGE_OPT_SOCKET, socket.encode())
    return ctx


def encode(payload: bytes, socket: str = "") -> bytes:
    """A credential carrying ``payload`` for this process's uid; MungeError when munged refuses."""
    lib = _lib()
    assert lib is not None, "libmunge not available"
    ctx = _ctx(lib, socket)
    cred = ctypes.c_char_p()
    try:
        err = lib.munge_encode(ctypes.byref(cred), ctx, payload, len(payload))
        if err:
            raise MungeError(lib.munge_strerror(err).decode())
        return bytes(cred.value or b"")
    finally:
        if cred:
            _libc.free(ctypes.cast(cred, ctypes.c_void_p))
        if ctx:
            lib.munge_ctx_destroy(ctx)


def decode(cred: bytes, socket: str = "") -> tuple[int, int, bytes]:
    """(uid, gid, payload) of a valid credential; MungeError when munged says it is not."""
    lib = _lib()
    assert lib is not None, "libmunge not available"
    ctx = _ctx(lib, socket)
    buf, n = ctypes.c_void_p(), ctypes.c_int(0)
    uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
    try:
        err = lib.munge_decode(cred, ctx, ctypes.byref(buf), ctypes.byref(n), ctypes.byref(uid), ctypes.byref(gid))
        if err:
            raise MungeError(lib.munge_strerror(err).decode())
        return uid.value, gid.value, ctypes.string_at(buf, n.value) if buf and n.value else b""
    finally:
        if buf:
            _libc.free(buf)
        if ctx:
            lib.munge_ctx_destroy(ctx)
