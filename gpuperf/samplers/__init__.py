"""GPU sampler backends behind one contract (``base.py``), chosen once by ``open_sampler``.

Each backend module registers itself: a name, an availability probe and an opener. ``auto`` takes
the first available backend by priority (dcgm when its bindings import and a hostengine answers,
else nvml). Backend modules import their heavy bindings lazily, so importing this package is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from gpuperf.files import log
from gpuperf.samplers.base import GpuSample, Sampler, SamplerUnavailable

__all__ = ["GpuSample", "Sampler", "SamplerUnavailable", "open_sampler", "register", "backends", "probe"]


@dataclass(frozen=True)
class Backend:
    """One registered backend: ``probe(cfg)`` returns None when usable, else the reason it is not."""

    name: str
    probe: Callable[[Any], str | None]
    opener: Callable[[str, Any], Sampler]     # (argument after "name:", cfg) -> Sampler
    auto_priority: int | None = None          # lower first; None: never chosen by auto


_REGISTRY: dict[str, Backend] = {}


def register(name: str, probe: Callable[[Any], str | None], opener: Callable[[str, Any], Sampler],
             auto_priority: int | None = None) -> None:
    """Register a backend (called by each backend module at import)."""
    _REGISTRY[name] = Backend(name, probe, opener, auto_priority)


def backends() -> dict[str, Backend]:
    """The registered backends by name."""
    return dict(_REGISTRY)


def probe(name: str, cfg: Any = None) -> str | None:
    """None when the backend can run here, else why not (a probe error is a reason, never raised)."""
    b = _REGISTRY.get(name)
    if b is None:
        return f"unknown backend {name!r}"
    try:
        return b.probe(_cfg(cfg))
    except Exception as e:  # noqa: BLE001 - a broken probe means "not available", not a crash
        return f"probe failed: {type(e).__name__}: {e}"


def open_sampler(spec: str, cfg: Any = None) -> Sampler:
    """Open ``auto``, ``nvml``, ``dcgm`` or ``replay:FILE``; SamplerUnavailable says why not."""
    cfg = _cfg(cfg)
    spec = (spec or "auto").strip()
    name, _, arg = spec.partition(":")
    if name == "auto":
        reasons = []
        for b in sorted((b for b in _REGISTRY.values() if b.auto_priority is not None), key=lambda b: b.auto_priority):
            why = probe(b.name, cfg)
            if why is None:
                try:
                    return b.opener(arg, cfg)
                except SamplerUnavailable as e:
                    why = str(e)
            reasons.append(f"{b.name}: {why}")
            log.get("samplers").info("sampler %s not used: %s", b.name, why)
        raise SamplerUnavailable("no sampler backend available (" + "; ".join(reasons) + ")")
    b = _REGISTRY.get(name)
    if b is None:
        raise SamplerUnavailable(f"unknown sampler backend {name!r}; known: auto, {', '.join(sorted(_REGISTRY))}")
    return b.opener(arg, cfg)


def _cfg(cfg: Any) -> Any:
    # None stays None: backends fall back to their defaults, so the sampler path needs no config (tomllib)
    return cfg


def _replay_speed(cfg: Any) -> float:
    return float(cfg.daemon.replay_speed) if cfg is not None else 1.0


def _register_builtin() -> None:
    from gpuperf.samplers import replay

    register("replay", lambda cfg: None,
             lambda arg, cfg: replay.from_spec(arg, speed=_replay_speed(cfg)))
    import importlib

    for mod in ("nvml", "dcgm"):
        try:
            m = importlib.import_module(f"gpuperf.samplers.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"gpuperf.samplers.{mod}":
                raise
            continue
        m.register_backend()

_register_builtin()
