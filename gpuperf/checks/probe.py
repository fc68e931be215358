"""The active probe from gpuperf's side: run ``probe_script.py`` in the admin's CUDA-capable Python
(``fleet.probe_python``), read its JSON, judge each GPU against the node's other GPUs of its model, and
keep the latest figures in ``<state_dir>/fleet-probe.json``, from where they ride to the controller on
the next node summary (``load.node_figures``) and join the fingerprints.

Without that Python (or without CUDA in it) the probe is *unavailable*: it says why and never fails a node.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpuperf.files import jobstate

SCRIPT = Path(__file__).with_name("probe_script.py")
# a GPU this much below the best of its model on the node is slow: loose, because boards differ at the
# power cap (measured on 2x H200: 793 vs 685 TFLOP/s bf16 GEMM, 14%); the fleet's robust spread is finer
NODE_TOL = 0.25
RESULTS = "fleet-probe.json"
FIGURES = (("gemm_tflops", "probe_tflops", "GEMM", "TFLOP/s"), ("membw_gbs", "probe_membw_gbs", "memory copy", "GB/s"),
           ("p2p_link_gbs", "probe_p2p_gbs", "P2P (median link)", "GB/s"))


@dataclass
class ProbeRun:
    """One probe run: ``ok``, ``unavailable`` (cannot run here: why) or ``error`` (ran and failed: why)."""

    status: str
    why: str = ""
    gpus: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    t: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"status": self.status, "why": self.why, "gpus": self.gpus, "seconds": round(self.seconds, 2), "t": self.t}


def command(cfg: Any, gpus: list[int] | None = None, extra: list[str] | None = None) -> list[str] | None:
    """The probe's argv, or None when no probe Python is configured."""
    py = cfg.fleet.probe_python
    if not py:
        return None
    argv = [py, str(SCRIPT)] + (["--gpus", ",".join(map(str, gpus))] if gpus else []) + list(extra or [])
    return argv


def parse(stdout: str) -> ProbeRun:
    """The script's JSON (its last line) -> a ProbeRun; anything else is an error that says what came."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        res = json.loads(line)
    except ValueError:
        return ProbeRun("error", f"probe printed no JSON: {line[-200:]!r}")
    if not isinstance(res, dict) or res.get("schema") != "gpuperf.probe.v1":
        return ProbeRun("error", "probe output is not gpuperf.probe.v1")
    if res.get("error"):
        return ProbeRun("unavailable", str(res["error"]), t=float(res.get("t") or time.time()))
    gpus = [g for g in res.get("gpus") or [] if isinstance(g, dict)]
    return ProbeRun("ok", "", link_figures(gpus), t=float(res.get("t") or time.time()))


def link_figures(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each GPU's ``p2p_link_gbs``: the median over its peers of the link's rate, both directions averaged.

    A link belongs to two GPUs: averaging its directions charges neither end alone (a busy peer slows
    writes into it), and the median over peers flags the GPU whose links are all slow, not its neighbours
    that share one slow link with it."""
    by = {str(g.get("index")): g for g in gpus}
    out = []
    for g in gpus:
        links = []
        for peer, v in (g.get("p2p_gbs") or {}).items():
            back = ((by.get(str(peer)) or {}).get("p2p_gbs") or {}).get(str(g.get("index")))
            links.append((float(v) + float(back)) / 2 if isinstance(back, (int, float)) else float(v))
        out.append(dict(g, p2p_link_gbs=statistics.median(links) if links else None))
    return out


def run(cfg: Any, gpus: list[int] | None = None, extra: list[str] | None = None,
        keep_going: Callable[[], bool] | None = None) -> ProbeRun:
    """Run the probe (bounded by ``fleet.probe_timeout_s``; stopped early when ``keep_going()`` turns False)."""
    argv = command(cfg, gpus, extra)
    if argv is None:
        return ProbeRun("unavailable", "fleet.probe_python is not set (no CUDA-capable Python named for the probe)")
    if not os.access(argv[0], os.X_OK):
        return ProbeRun("unavailable", f"fleet.probe_python {argv[0]} is not an executable")
    t0 = time.monotonic()
    try:
        # its own session: a timeout kills the probe and anything it started (CUDA helpers, a shell's children)
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as e:
        return ProbeRun("unavailable", f"cannot start {argv[0]}: {e}")
    limit = float(cfg.fleet.probe_timeout_s)
    while True:
        try:
            out, err = p.communicate(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() - t0 > limit:
                status, why = "error", f"timed out after {limit:g} s"
            elif keep_going is not None and not keep_going():
                status, why = "unavailable", "stopped: a job started on the node"   # the job comes first
            else:
                continue
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.communicate()
            return ProbeRun(status, why, seconds=time.monotonic() - t0)
    if p.returncode != 0:
        return ProbeRun("error", f"probe exit {p.returncode}: {err.strip()[-300:]}", seconds=time.monotonic() - t0)
    res = parse(out)
    res.seconds = time.monotonic() - t0
    return res


def judge(gpus: list[dict[str, Any]], tol: float = NODE_TOL) -> list[dict[str, Any]]:
    """Per GPU: slow (with evidence) when a figure is more than ``tol`` below the best GPU of its model here."""
    best: dict[tuple[str, str], float] = {}
    for g in gpus:
        for key, *_ in FIGURES:
            v = g.get(key)
            if isinstance(v, (int, float)):
                k = (str(g.get("name")), key)
                best[k] = max(best.get(k, 0.0), float(v))
    out = []
    for g in gpus:
        ev = []
        for key, _, label, unit in FIGURES:
            v, b = g.get(key), best.get((str(g.get("name")), key))
            if isinstance(v, (int, float)) and b and v < (1.0 - tol) * b:
                ev.append(f"{label} {v:,.1f} {unit}, best {b:,.1f} on this node ({100 * (1 - v / b):.0f}% lower)")
        out.append({"index": g.get("index"), "uuid": g.get("uuid"), "name": g.get("name"), "slow": bool(ev),
                    "evidence": ev, "error": g.get("error")})
    return out


def figures(g: dict[str, Any]) -> dict[str, float | None]:
    """A probed GPU's fingerprint fields (``probe_*``)."""
    return {fp: (float(g[key]) if isinstance(g.get(key), (int, float)) else None) for key, fp, *_ in FIGURES}


def save(state_dir: str, res: ProbeRun) -> Path | None:
    """Keep an ``ok`` run's figures per GPU index (other runs change nothing)."""
    if res.status != "ok":
        return None
    path = Path(state_dir) / RESULTS
    kept = load(state_dir)
    for g in res.gpus:
        if "error" not in g and g.get("index") is not None:
            kept[str(g["index"])] = {"t": res.t, "uuid": g.get("uuid"), "name": g.get("name"), **figures(g)}
    jobstate.write_json(path, kept, mode=0o644)
    return path


def load(state_dir: str) -> dict[str, dict[str, Any]]:
    """The latest probe figures per GPU index ({} when none or unreadable)."""
    try:
        with open(Path(state_dir) / RESULTS) as f:
            d = json.load(f)
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}
