"""Run the selected checks: each with a time limit, an exception becoming status ``error``, severity applied.

I/O lives here and in ``xid``/``history``; the checks themselves only look at dicts.
"""

from __future__ import annotations

import calendar
import copy
import dataclasses
import os
import threading
import time
from typing import Any, Callable, TypeVar

from gpuperf.files import log
from gpuperf.checks import history, xid
from gpuperf.checks.base import CheckEnv, CheckResult, CheckSpec, registry

T = TypeVar("T")


class CheckTimeout(Exception):
    """A call did not finish within its time limit."""


def call_with_timeout(fn: Callable[[], T], timeout_s: float) -> T:
    """Run fn in a daemon thread; its exception is re-raised, a hang is CheckTimeout (the thread is abandoned)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=target, daemon=True, name="gpuperf-check")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise CheckTimeout(f"no answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def enabled(specs: dict[str, CheckSpec], cfg: Any, cost: str) -> list[CheckSpec]:
    """The checks of one cost class that config leaves on, in code order."""
    off, on = set(cfg.checks.disabled), set(cfg.checks.enable)
    return [s for c, s in sorted(specs.items())
            if s.cost == cost and c not in off and (s.default_on or c in on)]


def apply_severity(spec: CheckSpec, r: CheckResult, cfg: Any) -> CheckResult:
    """A finding of a warn-severity check is a warning unless ``checks.fail`` names it; then warnings fail too."""
    if spec.code in cfg.checks.fail and r.status == "warn":
        r.status = "fail"
    elif spec.severity == "warn" and r.status == "fail" and spec.code not in cfg.checks.fail:
        r.status = "warn"
    return r


def run_checks(specs: list[CheckSpec], topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any,
               env: CheckEnv, timeout_s: float) -> list[CheckResult]:
    """Run each check separately: one that raises or hangs is ``error`` and costs the others nothing."""
    logger = log.get("checks")
    results = []
    nvml_error = snap.get("error") if not snap.get("gpus") else None
    for spec in specs:
        t0 = time.perf_counter()
        if nvml_error and spec.needs_gpus:
            r = CheckResult(spec.code, "error", f"no GPU state: {nvml_error}")
        else:
            try:
                r = call_with_timeout(lambda s=spec: s.fn(topo, snap, list(job_gpus), cfg, env), timeout_s)
                if not isinstance(r, CheckResult):
                    raise TypeError(f"returned {type(r).__name__}, not CheckResult")
                r = apply_severity(spec, r, cfg)
            except CheckTimeout as e:
                r = CheckResult(spec.code, "error", f"check timed out: {e}")
            except Exception as e:  # noqa: BLE001 - a broken check must never drain a node
                r = CheckResult(spec.code, "error", f"check raised {type(e).__name__}: {e}")
        if r.status == "error":
            logger.warning("check %s: %s", spec.code, r.detail)
        r.ms = round((time.perf_counter() - t0) * 1000, 3)
        results.append(r)
    return results


def recorded_time(snap: dict[str, Any]) -> float | None:
    """The snapshot's ``recorded`` time (ISO 8601 UTC) as seconds since the epoch, None if absent or unparsable."""
    text = str(snap.get("recorded") or "")
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return float(calendar.timegm(time.strptime(text, fmt)))
        except ValueError:
            continue
    return None


def nvidia_pci_gpus(root: str) -> tuple[str, ...] | None:
    """Bus ids of NVIDIA GPUs in sysfs bound to the nvidia driver (a vfio-bound one is not ours to miss)."""
    from gpuperf.topology import pcie, sysfs

    r = sysfs.Root(root)
    try:
        return tuple(b for b in pcie.find_nvidia_gpus(r)
                     if os.path.basename(os.readlink(r.path("sys/bus/pci/devices", b, "driver"))) == "nvidia")
    except OSError:
        return None


NvmlSeenFn = Callable[[dict[str, Any]], "xid.NvmlSeen | None"]


def prepare(node: Any, cfg: Any, kmsg: str = xid.KMSG, nvml_seen: NvmlSeenFn | None = None
            ) -> tuple[dict[str, Any], CheckEnv, dict[str, Any]]:
    """The snapshot to judge (live: with kernel-log XIDs added), the CheckEnv, and the history read.

    A recorded node is judged at its recording time with no history, so fixtures give the same
    answer every run; a live one at the current time since each GPU's last clean check.
    ``nvml_seen(snapshot)``: what NVML's XID events saw (the daemon's), to corroborate the kernel log.
    """
    live = node.root is None
    pci_gpus = nvidia_pci_gpus(node.root or "/")
    if not live:
        return node.gpus, CheckEnv(now=recorded_time(node.gpus), live=False, pci_gpus=pci_gpus), {"gpus": {}}
    snap = copy.deepcopy(node.gpus)
    xid_error = None
    source = f"kernel log {kmsg}"
    try:
        events = xid.read_kmsg(kmsg)
        seen = nvml_seen(snap) if nvml_seen is not None else None
        if seen is not None:
            events, dropped = xid.corroborate(events, seen)
            source += ", corroborated by NVML's XID events"
            for e in dropped[:10]:
                log.get("checks").warning("kernel log XID %d on %s at %.0f not seen by NVML's XID events: not counted",
                                          e.xid, e.bus, e.t)
        unmatched = xid.merge_into_snapshot(snap, events)
        if unmatched:
            log.get("checks").info("XIDs on devices that are not GPUs in the snapshot: %s",
                                   ", ".join(f"{e.bus}:{e.xid}" for e in unmatched[:10]))
    except OSError as e:
        xid_error = f"cannot read {kmsg}: {e.strerror}"
    hist = history.load(cfg.general.state_dir)
    env = history.env_from(hist, time.time(), True, source, xid_error)
    return snap, dataclasses.replace(env, pci_gpus=pci_gpus), hist


def run_fast(node: Any, cfg: Any, gpus: list[int], kmsg: str = xid.KMSG, nvml_seen: NvmlSeenFn | None = None
             ) -> list[CheckResult]:
    """The fast checks for ``gpus`` (all GPUs when empty) on a node read by ``gpuperf.topology.load_node``.

    Live nodes also get kernel-log XIDs and the per-GPU history (read, then moved forward for
    the GPUs checked). Never raises for a check's fault: that check is ``error``.
    """
    snap, env, hist = prepare(node, cfg, kmsg, nvml_seen)
    results = run_checks(enabled(registry(), cfg, "fast"), node.topology, snap, gpus, cfg, env, float(cfg.checks.timeout_s))
    if env.live:
        try:
            history.save(cfg.general.state_dir, history.advanced(hist, node.topology, snap, gpus, cfg, env))
        except Exception as e:  # noqa: BLE001 - losing the baseline widens the next window, nothing worse
            log.get("checks").warning("cannot save check history in %s: %s", cfg.general.state_dir, e)
    return results


def run_deep(node: Any, cfg: Any, gpus: list[int]) -> list[CheckResult]:
    """The deep checks (seconds to minutes; never in the prolog)."""
    env = CheckEnv(now=time.time(), live=node.root is None)
    return run_checks(enabled(registry(), cfg, "deep"), node.topology, node.gpus, gpus, cfg, env,
                      float(cfg.checks.deep_timeout_s) + 5.0)
