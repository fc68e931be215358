"""A time-segmented diagnosis: a job whose behaviour changes gets up to MAX_PHASES phases, each with its
share of GPU-hours and its class, from the daemon's series (1-minute means once full resolution ages out).

Cost is bounded: the series is cut into at most BUCKETS equal stretches, each classified from its
means with the job-wide rules, and neighbours are merged; linear in the points read.
"""

from __future__ import annotations

from typing import Any

from gpuperf.diagnosis.classify import classify
from gpuperf.diagnosis.signals import Signals, balance, num

BUCKETS = 12        # stretches the job is cut into: a 12-hour job's are an hour, a minute's 5 s
MAX_PHASES = 4      # more than a few phases is a timeline, which the report's charts already show
_FIELDS = ("util_gpu_pct", "sm_active_pct", "tensor_active_pct", "dram_active_pct")
# what the daemon hands the epilog with a finished job's aggregates: 8 GPUs x 24 points x 5 lists stay
# far inside the daemon protocol's 64 KiB reply (docs/CONTRACTS.md)
SERIES_POINTS = 24
_LINKS = ("nvlink_tx_bps", "nvlink_rx_bps", "pcie_tx_bps", "pcie_rx_bps")
SERIES_FIELDS = _FIELDS + _LINKS


def compact(series: dict) -> dict:
    """The series with values rounded (0.1) so the reply stays small."""
    return {gpu: {k: [None if num(v) is None else round(float(v), 1) for v in vals] for k, vals in ser.items()}
            for gpu, ser in series.items() if isinstance(ser, dict)}


def segment(series: dict, th: dict[str, float]) -> list[dict[str, Any]]:
    """Phases of the job: [{"start", "end", "share_pct", "gpu_hours", "class", "evidence"}]; [] when one phase."""
    points = [(t, gpu, ser) for gpu, ser in series.items() if isinstance(ser, dict)
              for t in [num(x) for x in ser.get("t") or []] if t is not None]
    if len(points) < 4:
        return []
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    if t1 <= t0:
        return []
    width = (t1 - t0) / BUCKETS
    buckets = [_empty() for _ in range(BUCKETS)]
    for gpu, ser in series.items():
        if not isinstance(ser, dict):
            continue
        ts = ser.get("t") or []
        for i, t in enumerate(ts):
            t = num(t)
            if t is None:
                continue
            b = buckets[min(BUCKETS - 1, int((t - t0) / width))]
            b["gpus"].add(gpu)
            b["n"] += 1
            for f in SERIES_FIELDS:
                v = _at(ser, f, i)
                if v is not None:
                    b["sum"][f] = b["sum"].get(f, 0.0) + v
                    b["cnt"][f] = b["cnt"].get(f, 0) + 1
            u, sm = _at(ser, "util_gpu_pct", i), _at(ser, "sm_active_pct", i)
            # no kernel: utilization says none and SM activity (which sees short kernels) agrees
            if (u is not None and u < th["idle_util_pct"]) and (sm is None or sm < th["idle_util_pct"]):
                b["idle"] += 1
    for k, b in enumerate(buckets):
        b["start"], b["end"] = t0 + k * width, t0 + (k + 1) * width
        b["gpu_s"] = width * len(b["gpus"])
    runs = [_run([b], th) for b in buckets if b["n"]]
    runs = _merge_same(runs, th)
    total = sum(r["gpu_s"] for r in runs) or 1.0
    while len(runs) > 1:
        small = min(range(len(runs)), key=lambda i: runs[i]["gpu_s"])
        if len(runs) <= MAX_PHASES and 100.0 * runs[small]["gpu_s"] / total >= th["phase_min_share_pct"]:
            break
        # the smallest stretch joins its larger neighbour and the pair is judged again from its means
        j = small - 1 if small == len(runs) - 1 or (small > 0 and runs[small - 1]["gpu_s"] >= runs[small + 1]["gpu_s"]) \
            else small + 1
        a, b = sorted((small, j))
        runs[a:b + 1] = [_run(runs[a]["buckets"] + runs[b]["buckets"], th)]
        runs = _merge_same(runs, th)
    if len(runs) < 2:
        return []
    return [{"start": round(r["start"], 1), "end": round(r["end"], 1), "share_pct": round(100.0 * r["gpu_s"] / total, 1),
             "gpu_hours": round(r["gpu_s"] / 3600.0, 4), "class": r["class"], "evidence": r["evidence"][0]}
            for r in runs]


def _at(ser: dict, key: str, i: int) -> float | None:
    vals = ser.get(key) or []
    return num(vals[i]) if i < len(vals) else None


def _empty() -> dict[str, Any]:
    return {"gpus": set(), "n": 0, "idle": 0, "sum": {}, "cnt": {}}


def _run(buckets: list[dict], th: dict[str, float]) -> dict[str, Any]:
    """A stretch of buckets with its class from the means over them."""
    def mean(f: str) -> float | None:
        c = sum(b["cnt"].get(f, 0) for b in buckets)
        return sum(b["sum"].get(f, 0.0) for b in buckets) / c if c else None

    n = sum(b["n"] for b in buckets)
    def link(name: str) -> float | None:
        vals = [mean(f"{name}_tx_bps"), mean(f"{name}_rx_bps")]
        return sum(x for x in vals if x is not None) / 1e9 if any(x is not None for x in vals) else None

    gpus = set().union(*(b["gpus"] for b in buckets))
    s = Signals(util=mean("util_gpu_pct"), sm=mean("sm_active_pct"), tensor=mean("tensor_active_pct"), fp_max=None,
                dram=mean("dram_active_pct"), idle_share=100.0 * sum(b["idle"] for b in buckets) / n if n else None,
                hw_throttle_share=0.0, power_cap_share=0.0,
                nvlink_gbps=link("nvlink"), pcie_gbps=link("pcie"), nodes=1,
                pcie_balance=balance(mean("pcie_tx_bps"), mean("pcie_rx_bps")), cpu_eff=None, iowait=None, gpu_count=len(gpus), samples=n)
    cls, ev = classify(s, th)
    return {"buckets": buckets, "start": buckets[0]["start"], "end": buckets[-1]["end"],
            "gpu_s": sum(b["gpu_s"] for b in buckets), "class": cls, "evidence": ev}


def _merge_same(runs: list[dict], th: dict[str, float]) -> list[dict]:
    out: list[dict] = []
    for r in runs:
        if out and out[-1]["class"] == r["class"]:
            out[-1] = _run(out[-1]["buckets"] + r["buckets"], th)
        else:
            out.append(r)
    return out
