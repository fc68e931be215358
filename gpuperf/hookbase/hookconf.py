"""The hooks' configuration: a full load's validated result, reused while the file's bytes are the same.

Why: a prolog and a TaskProlog are fresh processes, and parsing TOML costs them tomllib and typing,
about as much as the interpreter's own start (benchmarks/hook_latency.py). The cache holds what
``config.load`` made of the file (defaults filled in, every key validated), keyed by the file's
bytes, the environment ``config`` reads (``GPUPERF_SYSFS_ROOT``) and the code that validated it;
any difference and the hook loads the file as before. A cache is trusted only when it is owned by
root or by this process's user and nobody else may write it (the prolog runs as root on what it
says). A broken or absent config file is never cached: the hook loads it as before.

Where: the system config's cache is in ``/run/gpuperf`` (tmpfs; /etc may be read-only), any other
config's (tests, demos, a wrapper's ``GPUPERF_CONFIG``) beside its file.
"""

from __future__ import annotations

import os

from gpuperf import __version__
from gpuperf.files import config, jsonlite

TYPE_CHECKING = False  # typing costs a hook's start
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

SYSTEM_CACHE = "/run/gpuperf/config.cache.json"
_SCHEMA = "gpuperf.hookconf.v1"


def cache_path(path: str) -> str:
    """Where the cache of the config file at ``path`` lives."""
    if path == config.DEFAULT_PATH:
        return SYSTEM_CACHE
    d, name = os.path.split(path)
    return os.path.join(d, f".{name}.cache.json")


def _key(text: bytes) -> str:
    """What the cached result depends on: the file's bytes, the environment, the validating code."""
    import zlib

    try:
        st = os.stat(config.__file__)
        code = f"{st.st_mtime_ns}:{st.st_size}"
    except OSError:
        code = "?"
    env = os.environ.get("GPUPERF_SYSFS_ROOT") or ""
    return f"{zlib.crc32(text):08x}-{len(text)}|{env}|{__version__}|{code}"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _trusted(fd: int) -> bool:
    st = os.fstat(fd)
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022


def _from_cache(cpath: str, key: str, path: str) -> config.Config | None:
    try:
        with open(cpath, "rb") as f:
            if not _trusted(f.fileno()):
                return None
            cached = jsonlite.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("schema") != _SCHEMA or cached.get("key") != key:
        return None
    data, cpath_of = cached.get("data"), cached.get("path")
    if not isinstance(data, dict) or cpath_of != path or set(data) != set(config.SCHEMA):
        return None
    return config.Config(data, cached.get("source") or path)


def _store(cpath: str, key: str, path: str, cfg: config.Config, mode: int) -> None:
    """Best effort: a hook that cannot write the cache only stays slower."""
    from gpuperf.files import jobstate  # only on a miss

    try:
        jobstate.write_json(cpath, {"schema": _SCHEMA, "key": key, "path": path, "source": cfg.source,
                                    "data": cfg.data}, mode)
    except (OSError, TypeError, ValueError):
        pass


def load_or_defaults(path: str | None = None) -> config.Config:
    """``config.load_or_defaults``, served from the cache when the file is unchanged (never raises)."""
    p = config.config_path(path)
    text = _read(p) if os.path.isabs(p) else None  # a relative path: no cache beside a moving target
    if text is None:
        return config.load_or_defaults(p)  # absent: defaults (cheap); unreadable: the error as before
    key, cpath = _key(text), cache_path(p)
    cfg = _from_cache(cpath, key, p)
    if cfg is not None:
        return cfg
    try:
        cfg = config.from_bytes(text, p)  # the bytes the key was made of, not a second read
    except config.ConfigError:
        return config.load_or_defaults(p)  # degraded, error kept: as before, and never cached
    try:
        mode = os.stat(p).st_mode & 0o644  # readable by whom the config file is readable by
    except OSError:
        return cfg
    _store(cpath, key, p, cfg, mode)
    return cfg


def config_mismatch(cfg: Any, sent: Mapping[str, Any], hook_env: Mapping[str, str],
                    daemon_env: Mapping[str, str]) -> str | None:
    """Why the hook's settings may differ from the daemon's (None: they are the same).

    The Python hook sends the digest of its effective settings; the compiled client sends the file's
    CRC-32 and length (``file``), which prove the same settings only for the same path and the same
    ``GPUPERF_SYSFS_ROOT`` (the one environment variable a config load reads)."""
    if cfg.degraded:
        return "the daemon runs with a broken config"
    if sent.get("file") is not None and sent.get("digest") is None:
        same = (sent["file"] == cfg.file_key and sent.get("source") == cfg.source
                and hook_env.get("GPUPERF_SYSFS_ROOT") == daemon_env.get("GPUPERF_SYSFS_ROOT"))
    else:
        same = sent.get("digest") == config.digest(cfg)
    if not same:
        return (f"the hook's settings ({sent.get('source')}) differ from the daemon's ({cfg.source}): "
                "restart gpuperf-daemon after a config change")
    return None
