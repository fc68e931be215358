"""gpuperf configuration: one TOML file, validated against a declared schema.

Every section and key gpuperf understands is declared in ``SCHEMA`` (``configschema``); an unknown
key or a value of the wrong type is a ``ConfigError`` naming the key and, where it can be found, the
line. Sections own their keys: each feature adds keys to its own section only. This module reads,
checks and caches; the schema is data beside it.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

# tomllib, re and typing are imported where used: the hooks take a validated config from
# ``gpuperf.hookbase.hookconf``'s cache, and tomllib (with typing) costs a fresh process ~10 ms
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

from gpuperf.files.configschema import SCHEMA, Key  # noqa: F401 - config.SCHEMA and config.Key are read here too

DEFAULT_PATH = "/etc/gpuperf/config.toml"
ENV_VAR = "GPUPERF_CONFIG"


class ConfigError(Exception):
    """A config file that cannot be used; ``key`` and ``line`` say where."""

    def __init__(self, path: str, key: str | None, message: str, line: int | None = None):
        self.path, self.key, self.line, self.message = path, key, line, message
        where = f"{path}"
        if line:
            where += f":{line}"
        what = f" key '{key}'" if key else ""
        super().__init__(f"config error in {where}:{what} {message}")


class Config:
    """Validated configuration: ``cfg.section.key`` attribute access; ``source`` says where it came from."""

    def __init__(self, data: dict[str, dict[str, Any]], source: str = "<defaults>") -> None:
        self.data = data
        self.source = source
        # set when the file was broken and defaults are used: destructive actions (drain) stay off
        self.degraded = False
        self.error: str | None = None
        # the file's CRC-32 and length ("%08x-%d"), as the compiled hook client sends them: the daemon
        # runs a hook's steps only for the very file it loaded; None for defaults
        self.file_key: str | None = None
        self._ns: dict[str, SimpleNamespace] = {}

    def __getattr__(self, name: str) -> SimpleNamespace:
        data = self.__dict__.get("data")
        if data is None or name not in data:
            raise AttributeError(name)
        ns = self.__dict__["_ns"]
        if name not in ns:
            ns[name] = SimpleNamespace(**data[name])
        return ns[name]

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The configuration as plain data."""
        return {s: dict(v) for s, v in self.data.items()}


def defaults() -> Config:
    """A configuration of defaults only."""
    return Config({s: {k: _copy(key.default) for k, key in keys.items()} for s, keys in SCHEMA.items()})


def _copy(v: Any) -> Any:
    if isinstance(v, list):
        return list(v)
    if isinstance(v, dict):
        return dict(v)
    return v


def config_path(path: str | None = None) -> str:
    """The config file to read: the argument, ``$GPUPERF_CONFIG``, or the default path."""
    return path or os.environ.get(ENV_VAR) or DEFAULT_PATH


def _line_of(text: str, section: str | None, key: str) -> int | None:
    """Best effort: the line where ``key`` is assigned (inside ``[section]`` when given)."""
    import re

    in_section = section is None
    pat = re.compile(rf"^\s*(\"{re.escape(key)}\"|'{re.escape(key)}'|{re.escape(key)})\s*=")
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            name = stripped.strip("[]").strip()
            in_section = section is None or name == section or name.startswith(section + ".")
            if section is not None and name == section and key == "":
                return n
            continue
        if in_section and pat.match(line):
            return n
    return None


def _section_line(text: str, section: str) -> int | None:
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("[") and s.strip("[]").strip() == section:
            return n
    return None


def parse(text: str, path: str = "<string>") -> Config:
    """Parse and validate TOML text; raises ConfigError naming the key and line."""
    import re
    import tomllib

    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ConfigError(path, None, f"not valid TOML: {e}", int(m.group(1)) if m else None) from None
    cfg = defaults()
    for section, values in raw.items():
        if section not in SCHEMA:
            raise ConfigError(path, section, f"unknown section (known: {', '.join(SCHEMA)})", _section_line(text, section))
        if not isinstance(values, dict):
            raise ConfigError(path, section, "must be a table", _line_of(text, None, section))
        for key, value in values.items():
            full = f"{section}.{key}"
            line = _line_of(text, section, key)
            spec = SCHEMA[section].get(key)
            if spec is None:
                raise ConfigError(path, full, f"unknown key (known in [{section}]: {', '.join(SCHEMA[section])})", line)
            cfg.data[section][key] = _check(path, full, spec, value, line)
    cfg.source = path
    return cfg



def _check(path: str, full: str, spec: Key, value: Any, line: int | None) -> Any:
    want = spec.type
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) and want is not bool:
        raise ConfigError(path, full, f"must be {_tname(want)}, not a boolean", line)
    if not isinstance(value, want):
        raise ConfigError(path, full, f"must be {_tname(want)}, got {type(value).__name__} {value!r}", line)
    if spec.item_type is not None and isinstance(value, list):
        for i, item in enumerate(value):
            if not isinstance(item, spec.item_type):
                raise ConfigError(path, f"{full}[{i}]", f"must be {_tname(spec.item_type)}, got {item!r}", line)
    if spec.choices is not None and value not in spec.choices:
        raise ConfigError(path, full, f"must be one of {', '.join(map(str, spec.choices))}, got {value!r}", line)
    if spec.validate is not None and (value or not isinstance(spec.validate, str)):
        try:
            _validator(spec.validate)(value)
        except ValueError as e:
            raise ConfigError(path, full, str(e), line) from None
    return value


def _validator(v: Callable[[Any], Any] | str) -> Callable[[Any], Any]:
    """The validator itself; a feature's ``"module:function"`` imported now (an empty value never gets here)."""
    if not isinstance(v, str):
        return v
    import importlib

    module, _, name = v.partition(":")
    return getattr(importlib.import_module(module), name)


def _tname(t: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list", dict: "a table"}
    if isinstance(t, tuple):
        return " or ".join(names.get(x, x.__name__) for x in t)
    return names.get(t, t.__name__)


def example_toml() -> str:
    """Every section and key with its default and help, as TOML (packaging/config.example.toml)."""
    from gpuperf.files import tomlw

    lines = ["# /etc/gpuperf/config.toml: every key is optional; shown with its default.",
             "# An unknown key or a wrong type is an error naming the key and line; hooks then run with",
             "# defaults and never drain a node. Generated from gpuperf/files/config.py SCHEMA.", ""]
    for section, keys in SCHEMA.items():
        lines.append(f"[{section}]")
        for name, key in keys.items():
            if section == "env" and name == "rules":
                lines += ["# rules: admin policy, one [[env.rules]] table each, for example:",
                          "# [[env.rules]]", '# name = "roce-fabric-a"', '# match = { nic_kind = "roce", node = "gpu-a*" }',
                          '# set = { NCCL_IB_TC = "106" }']
                continue
            help_ = " ".join(x for x in (key.help, f"({' | '.join(map(str, key.choices))})" if key.choices else "") if x)
            lines.append(f"{name} = {tomlw.value(key.default)}" + (f"  # {help_}" if help_ else ""))
        lines.append("")
    return "\n".join(lines)


def load(path: str | None = None) -> Config:
    """Load the config file; a missing file means defaults, a broken one raises ConfigError."""
    p = config_path(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        cfg = defaults()
        cfg.source = f"{p} (absent: defaults)"
        return _apply_env(cfg)
    except OSError as e:
        raise ConfigError(p, None, f"cannot read: {e.strerror}") from None
    return from_bytes(data, p)


def from_bytes(data: bytes, path: str) -> Config:
    """What ``load`` makes of a config file with these bytes (raises ConfigError)."""
    cfg = _apply_env(parse(data.decode("utf-8", errors="replace"), path))
    cfg.file_key = file_key(data)
    return cfg


def file_key(data: bytes) -> str:
    """A config file's identity as the hooks' compiled client computes it: CRC-32 and length."""
    import zlib

    return f"{zlib.crc32(data):08x}-{len(data)}"


def load_or_defaults(path: str | None = None) -> Config:
    """For hooks: the config, or defaults marked ``degraded`` with the error kept, never raising."""
    try:
        return load(path)
    except ConfigError as e:
        cfg = defaults()
        _salvage_general(cfg, e.path)
        cfg = _apply_env(cfg)
        cfg.degraded, cfg.error, cfg.source = True, str(e), e.path
        return cfg


def _salvage_general(cfg: Config, path: str) -> None:
    """Keep the valid ``[general]`` keys of a broken file: its log and run dirs, not the defaults'.

    An error elsewhere (a typo in [checks]) must not send the hooks' logs and records to paths the
    admin never configured.
    """
    import tomllib

    try:
        with open(path, "rb") as f:
            raw = tomllib.loads(f.read().decode("utf-8", errors="replace"))
    except (OSError, tomllib.TOMLDecodeError):
        return
    general = raw.get("general")
    if not isinstance(general, dict):
        return
    for key, value in general.items():
        spec = SCHEMA["general"].get(key)
        if spec is None:
            continue
        try:
            cfg.data["general"][key] = _check(path, f"general.{key}", spec, value, None)
        except ConfigError:
            continue


def digest(cfg: Config) -> str:
    """A short fingerprint of the effective settings (file and environment): two processes agree on it
    exactly when they would act alike (the prolog's fast path checks the daemon's against its own)."""
    import zlib

    from gpuperf.files import jsonlite

    text = jsonlite.dumps(cfg.data, sort_keys=True, separators=(",", ":"), default=str)
    return f"{zlib.crc32(text.encode()):08x}-{len(text)}"


def _apply_env(cfg: Config) -> Config:
    # GPUPERF_SYSFS_ROOT points every reader at a recorded node (tests, demos)
    root = os.environ.get("GPUPERF_SYSFS_ROOT")
    if root:
        cfg.data["general"]["node_root"] = root
    return cfg
