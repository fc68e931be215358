"""Pure decisions: how far each GPU is from its model's fleet median, which GPUs are flagged, and why.

Deviation is in robust units: (distance from the model's median, in the bad direction) / max(IQR/1.349,
floor). A GPU is flagged on a metric when the deviation is at least ``z`` *and* the gap is material
(``min_gap``): a homogeneous fleet has a tiny spread, and a 1% slower GPU is not worth an admin's time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gpuperf.fleet.fingerprint import SLOWDOWN_REASONS

MIN_MODEL_GPUS = 8       # a model's median means little over fewer GPUs
DEFAULT_Z = 5.0


@dataclass(frozen=True)
class Rule:
    """One compared metric: its words, unit, which side is worse, the spread floor and the material gap."""

    metric: str
    label: str
    unit: str
    worse: str            # "low" or "high"
    floor: float          # spread floor: relative to the median for "low" metrics, absolute for "high"
    min_gap: float        # material gap: relative for "low", absolute for "high"
    nd: int = 0


RULES = (
    Rule("clock_mhz", "SM clock under load (below the power cap)", "MHz", "low", 0.01, 0.04),
    Rule("slowdown_pct", "slowdown throttle", "% of busy time", "high", 1.0, 5.0),
    Rule("temp_c", "temperature under load", "°C", "high", 1.5, 6.0),
    Rule("nvlink_gbs", "NVLink rate in communication phases", "GB/s", "low", 0.02, 0.10, 1),
    Rule("pcie_gbs", "PCIe rate in communication phases", "GB/s", "low", 0.03, 0.15, 1),
    Rule("nvlink_errors", "NVLink error counters grew by", "over recent jobs", "high", 10.0, 100.0),
    Rule("ecc_corrected", "corrected ECC errors grew by", "over recent jobs", "high", 10.0, 100.0),
    Rule("probe_tflops", "probe GEMM", "TFLOP/s", "low", 0.01, 0.05, 1),
    Rule("probe_membw_gbs", "probe memory bandwidth", "GB/s", "low", 0.01, 0.05),
    Rule("probe_p2p_gbs", "probe P2P bandwidth", "GB/s", "low", 0.02, 0.10, 1),
)


@dataclass
class GpuRank:
    """One GPU's place: its worst deviation, whether it is flagged, and the evidence."""

    node: str
    idx: int
    uuid: str
    model: str
    jobs: int
    score: float
    flagged: bool
    evidence: list[str] = field(default_factory=list)
    deviations: dict[str, float] = field(default_factory=dict)
    figures: dict[str, float | None] = field(default_factory=dict)
    xids: int = 0

    @property
    def headline(self) -> str:
        """'GPU-… on n17 idx 3: <evidence>; <evidence>'."""
        return f"{self.uuid or 'GPU ?'} on {self.node} idx {self.idx}: " + ("; ".join(self.evidence) or "no deviation")

    def to_dict(self) -> dict[str, Any]:
        """Plain data for --json."""
        return {"node": self.node, "gpu": self.idx, "uuid": self.uuid, "model": self.model, "jobs": self.jobs,
                "score": round(self.score, 2), "flagged": self.flagged, "evidence": self.evidence,
                "headline": self.headline, "deviations": {k: round(v, 2) for k, v in self.deviations.items()},
                "figures": {k: (round(v, 3) if v is not None else None) for k, v in self.figures.items()},
                "xids": self.xids}


def _num(x: float, nd: int) -> str:
    return f"{x:,.{nd}f}"


def deviation(rule: Rule, x: float, st: dict[str, float]) -> tuple[float, bool]:
    """(deviation in robust units, material gap) of value ``x`` against model stats ``st``."""
    med = st["median"]
    sigma = (st["p75"] - st["p25"]) / 1.349
    if rule.worse == "low":
        scale = max(sigma, rule.floor * abs(med), 1e-9)
        gap = med - x
        return gap / scale, med > 0 and gap / med >= rule.min_gap
    scale = max(sigma, rule.floor)
    gap = x - med
    return gap / scale, gap >= rule.min_gap


def rank_gpu(row: dict[str, Any], stats: dict[str, dict[str, float]], z: float = DEFAULT_Z) -> GpuRank:
    """One fingerprint (``FleetStore.gpus()`` row) against its model's stats."""
    fig = row["fig"]
    r = GpuRank(node=row["node"], idx=int(row["idx"]), uuid=row["uuid"], model=row["model"],
                jobs=int(row.get("jobs_total") or 0), score=0.0, flagged=False, figures=dict(fig),
                xids=int(row.get("xids") or 0))
    for rule in RULES:
        x, st = fig.get(rule.metric), stats.get(rule.metric)
        if x is None or st is None or st["n"] < MIN_MODEL_GPUS:
            continue
        dev, material = deviation(rule, x, st)
        r.deviations[rule.metric] = dev
        r.score = max(r.score, dev)
        if dev >= z and material:
            r.flagged = True
            r.evidence.append(_evidence(rule, x, st["median"], row))
    for c, label in (("ecc_uncorrected", "uncorrected ECC errors"), ("remapped_rows", "rows remapped")):
        if (row.get(f"err_{c}") or 0) >= 0.5:   # decayed: about one event among the recent jobs
            r.evidence.append(f"{label} while jobs ran (decayed count {row[f'err_{c}']:.1f})")
    if r.xids:
        codes = ", ".join(map(str, json.loads(row.get("xid_last") or "[]"))) or "?"
        r.evidence.append(f"{r.xids} XID event(s) while jobs ran (last: XID {codes})")
    return r


def _evidence(rule: Rule, x: float, med: float, row: dict[str, Any]) -> str:
    jobs = int(row.get("jobs_total") or 0)
    if rule.metric == "slowdown_pct":
        busy = row.get("busy_s") or 0.0
        parts = [f"{reason} {100.0 * (row.get(f'thr_{reason}') or 0.0) / busy:.0f}%" for reason in SLOWDOWN_REASONS
                 if busy and (row.get(f"thr_{reason}") or 0.0) / busy >= 0.01]
        return f"{', '.join(parts) or 'slowdown'} of busy time over {jobs} jobs (model median {med:.0f}%)"
    if rule.unit == "over recent jobs":
        return f"{rule.label} {x:,.0f} {rule.unit} (model median {med:,.0f})"
    over = f" over {jobs} jobs" if not rule.metric.startswith("probe_") else ""
    return f"{rule.label} {_num(x, rule.nd)} {rule.unit}{over}, model median {_num(med, rule.nd)}"


def rank(rows: list[dict[str, Any]], stats: dict[str, dict[str, dict[str, float]]], z: float = DEFAULT_Z) -> list[GpuRank]:
    """Every GPU ranked: flagged first, then by worst deviation."""
    out = [rank_gpu(row, stats.get(row["model"], {}), z) for row in rows]
    out.sort(key=lambda g: (not g.flagged, -g.score, g.node, g.idx))
    return out


def rank_nodes(gpus: list[GpuRank]) -> list[dict[str, Any]]:
    """Nodes by their worst GPU: flagged GPUs, worst score, the worst GPU's headline."""
    nodes: dict[str, dict[str, Any]] = {}
    for g in gpus:
        n = nodes.setdefault(g.node, {"node": g.node, "gpus": 0, "flagged": 0, "score": 0.0, "worst": None})
        n["gpus"] += 1
        n["flagged"] += int(g.flagged)
        if n["worst"] is None or g.score > n["score"]:
            n["score"], n["worst"] = g.score, g.headline
    return sorted(nodes.values(), key=lambda n: (-n["flagged"], -n["score"], n["node"]))


def flagged_on_node(gpus: list[GpuRank], node: str) -> list[GpuRank]:
    """The flagged GPUs of one node."""
    return [g for g in gpus if g.node == node and g.flagged]
