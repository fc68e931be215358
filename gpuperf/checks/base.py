"""What a health check is: a result type, a registry entry, and helpers shared by the checks.

A check is a pure function ``fn(topology, gpus_snapshot, job_gpus, cfg, env) -> CheckResult``
over the documented dicts (docs/CONTRACTS.md). It registers itself with ``@register`` from
its own module in ``gpuperf/checks/builtin/``; nobody lists checks by hand.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

STATUSES = ("ok", "warn", "fail", "error", "skip")
# worst first: one word sums up a list of results
_RANK = {"fail": 0, "error": 1, "warn": 2, "ok": 3, "skip": 4}


@dataclass
class CheckResult:
    """The outcome of one check: ``status`` is ok|warn|fail|error|skip; ``detail`` is for a human."""

    code: str
    status: str
    detail: str
    ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CheckResult":
        """Read back ``to_dict`` output (for example a daemon's reply); raises ValueError if malformed."""
        try:
            status = str(d["status"])
            if status not in STATUSES:
                raise ValueError(f"unknown status {status!r}")
            return cls(str(d["code"]), status, str(d.get("detail", "")), float(d.get("ms") or 0.0))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a check result: {e}") from None


@dataclass(frozen=True)
class CheckEnv:
    """What a check may know besides the node's state: the time it judges at and the last run's baseline.

    ``xid_since`` maps a GPU bus id to the time after which an XID counts (the previous clean
    check); ``nvlink_baseline`` maps a bus id to link -> error counters at the previous clean check,
    taken at ``nvlink_since`` (bus id -> time; absent for a baseline of an older gpuperf).
    """

    now: float | None = None
    live: bool = False  # the live node (not a recorded root): deep checks may touch hardware
    xid_since: dict[str, float] = field(default_factory=dict)
    nvlink_baseline: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    nvlink_since: dict[str, float] = field(default_factory=dict)
    xid_source: str = "gpus.json xid_events"
    xid_error: str | None = None  # why XIDs could not be read (the check is then an error)
    pci_gpus: tuple[str, ...] | None = None  # bus ids of GPUs bound to the nvidia driver in sysfs


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: its code, function, default on/off, severity and cost class."""

    code: str
    fn: Callable[..., CheckResult]
    severity: str  # what a finding becomes: "fail" or "warn" (checks.fail promotes warn)
    cost: str  # "fast": prolog path; "deep": seconds to minutes, never in the prolog
    default_on: bool
    help: str
    needs_gpus: bool = True  # False: judges the topology only, so it runs even when NVML gave nothing


_REGISTRY: dict[str, CheckSpec] = {}


def register(code: str, *, severity: str = "fail", cost: str = "fast", default_on: bool = True,
             help: str = "", needs_gpus: bool = True) -> Callable[[Callable[..., CheckResult]], Callable[..., CheckResult]]:
    """Decorator: register a check function under ``code``."""
    if severity not in ("fail", "warn") or cost not in ("fast", "deep"):
        raise ValueError(f"check {code}: bad severity {severity!r} or cost {cost!r}")

    def deco(fn: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        if code in _REGISTRY and _REGISTRY[code].fn is not fn:
            raise ValueError(f"check code {code!r} registered twice")
        _REGISTRY[code] = CheckSpec(code, fn, severity, cost, default_on,
                                   help or (fn.__doc__ or "").strip(), needs_gpus)
        return fn

    return deco


def registered() -> dict[str, CheckSpec]:
    """The registry as filled so far (``registry()`` loads every check first)."""
    return _REGISTRY


_loaded = False


def registry() -> dict[str, CheckSpec]:
    """Every check, after importing each module of ``gpuperf.checks.builtin`` (each registers itself)."""
    global _loaded
    if not _loaded:
        import importlib
        import pkgutil

        from gpuperf.checks import builtin

        for mod in pkgutil.iter_modules(builtin.__path__):
            importlib.import_module(f"{builtin.__name__}.{mod.name}")
        _loaded = True
    return _REGISTRY


def worst(results: Iterable[CheckResult]) -> str:
    """The worst status of some results ('ok' when there are none)."""
    return min((r.status for r in results), key=lambda s: _RANK[s], default="ok")


# --- helpers over the gpus.json snapshot -----------------------------------------------------------

def gpu_label(g: dict[str, Any]) -> str:
    """'GPU 3 (0000:9a:00.0)': how every detail names a GPU."""
    return f"GPU {g.get('index', '?')} ({g.get('bus_id') or 'bus id unknown'})"


def snapshot_gpus(snap: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPU entries of a snapshot; ValueError when the snapshot is not one."""
    gpus = snap.get("gpus") if isinstance(snap, dict) else None
    if not isinstance(gpus, list):
        raise ValueError("GPU snapshot has no 'gpus' list")
    return [g for g in gpus if isinstance(g, dict)]


def selected_gpus(snap: dict[str, Any], job_gpus: list[int] | None) -> list[dict[str, Any]]:
    """The job's GPUs present in the snapshot (all GPUs when the job names none)."""
    gpus = snapshot_gpus(snap)
    if not job_gpus:
        return gpus
    want = set(job_gpus)
    return [g for g in gpus if g.get("index") in want]


# A judge looks at one GPU and returns None (fine), or (status, text) with status fail|warn|skip.
Judge = Callable[[dict[str, Any]], "tuple[str, str] | None"]


def over_gpus(code: str, snap: dict[str, Any], job_gpus: list[int] | None, judge: Judge, ok_detail: str) -> CheckResult:
    """Judge each selected GPU separately, so one malformed GPU entry cannot hide another's failure."""
    found: dict[str, list[str]] = {"fail": [], "warn": [], "skip": [], "error": []}
    gpus = selected_gpus(snap, job_gpus)
    for g in gpus:
        if g.get("error"):
            found["error"].append(f"{gpu_label(g)}: NVML error: {g['error']}")
            continue
        try:
            verdict = judge(g)
        except Exception as e:  # noqa: BLE001 - a broken entry is this GPU's error, not the check's
            verdict = ("error", f"{gpu_label(g)}: cannot judge: {type(e).__name__}: {e}")
        if verdict is not None:
            found[verdict[0]].append(verdict[1])
    if not gpus:
        return CheckResult(code, "skip", "no GPU to check")
    for status in ("fail", "error", "warn"):
        if found[status]:
            # the lesser findings ride along, so a failure or an error never hides a warning
            others = [t for s in ("error", "warn") if s != status for t in found[s]] if status != "warn" else []
            return CheckResult(code, status, "; ".join(found[status] + others))
    if len(found["skip"]) == len(gpus):
        return CheckResult(code, "skip", "; ".join(found["skip"]))
    detail = ok_detail.format(n=len(gpus) - len(found["skip"]))
    if found["skip"]:
        detail += "; " + "; ".join(found["skip"])
    return CheckResult(code, "ok", detail)
