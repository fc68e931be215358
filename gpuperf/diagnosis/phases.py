"""A time-segmented diagnosis: a job whose behaviour changes gets up to MAX_PHASES phases, each with its
share of GPU-hours and its class, from the daemon's series (1-minute means once full resolution ages out).

Cost is bounded: the series is cut into at most BUCKETS equal stretches, each classified from its
means with the job-wide rules, and neighbours are merged; linear in the points read. Stretches with
no GPU work before the first working one are ``startup`` (imports, CUDA context, JIT compilation,
data loading), and after the last working one ``idle_tail``: named, never the job's class. So is the
ramp into the first working phase (``RAMP_POINTS``): a stretch too short to hold a level of its own.
"""

from __future__ import annotations

from typing import Any

from gpuperf.diagnosis.classify import classify
from gpuperf.diagnosis.signals import Signals, balance, num
from gpuperf.diagnosis.thresholds import PHASE_ONLY

BUCKETS = 12        # stretches the job is cut into: a 12-hour job's are an hour, a minute's 5 s
MAX_PHASES = 4      # more than a few phases is a timeline, which the report's charts already show
# The ramp: a first working stretch of at most two points of the series per GPU, busy less than half the level
# of the working stretch after it, is start-up. A point is a mean over its interval, so the ramp from nothing to
# the work's level is at most two points: the last one before the work (idle, or the process's own start) and
# the one the work began in (busy part of its interval). Their mean is at most half the level the work then
# holds (0 and at most the level, averaged): a blend of nothing and the work, whose class says nothing about
# the job (an idle point and a busy one read "GPU utilization 50%": input- or launch-bound). A longer stretch,
# or one at half the level or more, holds a behaviour of its own and keeps its class.
RAMP_POINTS = 2
RAMP_LEVEL = 0.5
_FIELDS = ("util_gpu_pct", "sm_active_pct", "tensor_active_pct", "dram_active_pct")
# the math pipes by kind, so a stretch of FP32, FP64, integer or per-kind tensor work is judged as the job is
_PIPES = ("fp16_active_pct", "fp32_active_pct", "fp64_active_pct", "int_active_pct", "tensor_hmma_pct",
          "tensor_imma_pct", "tensor_dmma_pct", "tensor_dfma_pct")
# the SM clock, so the working phases' rates are priced at the clock they ran at (an idle GPU clocks down
# without a CUDA context and up with one, so the job's mean clock is not the work's)
_CLOCK = ("sm_clock_mhz",)
# what the daemon hands the epilog with a finished job's aggregates: 8 GPUs x 24 points x 18 lists
# (about 21 KB as JSON) stay inside the daemon protocol's 64 KiB reply (docs/CONTRACTS.md)
SERIES_POINTS = 24
_LINKS = ("nvlink_tx_bps", "nvlink_rx_bps", "pcie_tx_bps", "pcie_rx_bps")
SERIES_FIELDS = _FIELDS + _LINKS + _PIPES + _CLOCK
_BUSY, _BUSY_CLOCK = "busy", "busy_clock"     # bucket sums of SM activity and of SM activity x clock


def compact(series: dict) -> dict:
    """The series with values rounded (0.1) so the reply stays small."""
    return {gpu: {k: [None if num(v) is None else round(float(v), 1) for v in vals] for k, vals in ser.items()}
            for gpu, ser in series.items() if isinstance(ser, dict)}


def segment(series: dict, th: dict[str, float], link_gbps: float | None = None) -> list[dict[str, Any]]:
    """Phases of the job: [{"start", "end", "share_pct", "gpu_hours", "class", "evidence", "work"}]; [] when one
    phase. ``work``: the stretch did GPU work (not start-up, an idle tail or idle).

    ``link_gbps``: one direction's raw rate of the GPUs' PCIe link (for stretches of host<->device copies)."""
    runs, total = _phases(series, th, link_gbps)
    if len(runs) < 2:
        return []
    return [{"start": round(r["start"], 1), "end": round(r["end"], 1), "share_pct": round(100.0 * r["gpu_s"] / total, 1),
             "gpu_hours": round(r["gpu_s"] / 3600.0, 4), "class": r["class"], "evidence": r["evidence"][0],
             "work": _works(r, th)}
            for r in runs]


def working_factors(series: dict, th: dict[str, float], link_gbps: float | None = None) -> dict[str, float]:
    """{series field: its mean over the working phases / its mean over the whole series}, for the fields with a
    mean above zero ({} when the job is one phase): what a job-wide mean is multiplied by to be the working phases'
    own (start-up, the ramp into the work and an idle tail did part of it, not none). The SM clock's is its mean
    weighted by SM activity over the working phases, over its job-wide mean: the clock the work ran at."""
    runs, _ = _phases(series, th, link_gbps)
    if len(runs) < 2:
        return {}
    every = [b for r in runs for b in r["buckets"]]
    work = [b for r in runs if _works(r, th) for b in r["buckets"]]
    out = {}
    for f in SERIES_FIELDS:
        whole, part = _mean(every, f), _mean(work, f)
        if whole and part is not None:
            out[f] = part / whole
    # the SM clock's: the working phases' clock weighted by SM activity (a rate is activity x clock, so the clock of
    # an idle point in a working phase counts for nothing) over the job's mean clock
    busy = sum(b["sum"].get(_BUSY, 0.0) for b in work)
    if busy > 0 and out.get("sm_clock_mhz"):
        out["sm_clock_mhz"] = sum(b["sum"].get(_BUSY_CLOCK, 0.0) for b in work) / busy / _mean(every, "sm_clock_mhz")
    return out


def _mean(buckets: list[dict], f: str) -> float | None:
    c = sum(b["cnt"].get(f, 0) for b in buckets)
    return sum(b["sum"].get(f, 0.0) for b in buckets) / c if c else None


def _works(run: dict, th: dict[str, float]) -> bool:
    return run["class"] not in PHASE_ONLY and not _no_work(run, th)


def _phases(series: dict, th: dict[str, float], link_gbps: float | None) -> tuple[list[dict[str, Any]], float]:
    """(the stretches of the job, merged and named, with their buckets; the GPU-seconds of all of them)."""
    points = [(t, gpu, ser) for gpu, ser in series.items() if isinstance(ser, dict)
              for t in [num(x) for x in ser.get("t") or []] if t is not None]
    if len(points) < 4:
        return [], 1.0
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    if t1 <= t0:
        return [], 1.0
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
            clk, busy = _at(ser, "sm_clock_mhz", i), sm if sm is not None else u
            if clk is not None and busy is not None:
                # the clock weighted by how busy the SMs were: the clock the work ran at
                b["sum"][_BUSY_CLOCK] = b["sum"].get(_BUSY_CLOCK, 0.0) + clk * busy
                b["sum"][_BUSY] = b["sum"].get(_BUSY, 0.0) + busy
            # no kernel: utilization says none and SM activity (which sees short kernels) agrees
            if (u is not None and u < th["idle_util_pct"]) and (sm is None or sm < th["idle_util_pct"]):
                b["idle"] += 1
    for k, b in enumerate(buckets):
        b["start"], b["end"] = t0 + k * width, t0 + (k + 1) * width
        b["gpu_s"] = width * len(b["gpus"])
    runs = [_run([b], th, link_gbps) for b in buckets if b["n"]]
    runs = _merge_same(runs, th)
    total = sum(r["gpu_s"] for r in runs) or 1.0
    # the start-up is found before short stretches join their neighbours (a start-up under the phase floor would
    # join the work and dilute the means its class and estimates are read from), and carved out after
    lead, ramp = _startup(runs, th)
    runs = _merge_small(runs, th, link_gbps, total, MAX_PHASES)
    if lead:
        head, runs = _carve(runs, lead, th, link_gbps)
        runs = [head] + _merge_small(_merge_same(runs, th), th, link_gbps, total, MAX_PHASES - 1)
        _name_startup(head, ramp)
    return _name_ends(runs, th), total


def _merge_small(runs: list[dict], th: dict[str, float], link_gbps: float | None, total: float,
                 cap: int) -> list[dict]:
    """The stretches with the smallest joined to a neighbour until at most ``cap`` remain, none under the floor."""
    while len(runs) > 1:
        small = min(range(len(runs)), key=lambda i: runs[i]["gpu_s"])
        if len(runs) <= cap and 100.0 * runs[small]["gpu_s"] / total >= th["phase_min_share_pct"]:
            break
        # the smallest stretch joins its larger neighbour and the pair is judged again from its means
        j = small - 1 if small == len(runs) - 1 or (small > 0 and runs[small - 1]["gpu_s"] >= runs[small + 1]["gpu_s"]) \
            else small + 1
        a, b = sorted((small, j))
        runs[a:b + 1] = [_run(runs[a]["buckets"] + runs[b]["buckets"], th, link_gbps)]
        runs = _merge_same(runs, th)
    return runs


def _carve(runs: list[dict], lead: int, th: dict[str, float], link_gbps: float | None) -> tuple[dict, list[dict]]:
    """(the first ``lead`` buckets as one stretch, the stretches after them, the working one they cut judged
    again): a stretch without GPU work that they reach into goes with them whole."""
    head: list[dict] = []
    rest: list[dict] = []
    for r in runs:
        take = max(0, min(len(r["buckets"]), lead - len(head)))
        if take and _no_work(r, th):
            take = len(r["buckets"])
        head += r["buckets"][:take]
        if take == len(r["buckets"]):
            continue
        rest.append(r if take == 0 else _run(r["buckets"][take:], th, link_gbps))
    return _run(head, th, link_gbps), rest


def _at(ser: dict, key: str, i: int) -> float | None:
    vals = ser.get(key) or []
    return num(vals[i]) if i < len(vals) else None


def _empty() -> dict[str, Any]:
    return {"gpus": set(), "n": 0, "idle": 0, "sum": {}, "cnt": {}}


def _name_ends(runs: list[dict], th: dict[str, float]) -> list[dict]:
    """Leading stretches without GPU work before a working one are start-up, trailing ones an idle tail
    (neighbours of the same name joined)."""
    work = [i for i, r in enumerate(runs) if not _no_work(r, th)]
    if not work:
        return runs
    for i, r in enumerate(runs):
        if (i < work[0] or i > work[-1]) and r["class"] not in PHASE_ONLY:
            name = "startup" if i < work[0] else "idle_tail"
            r["class"], r["evidence"] = name, [
                ("no GPU work before the first working stretch (imports, CUDA context, JIT compilation, data loading)"
                 if name == "startup" else "no GPU work after the last working stretch") + f": {r['evidence'][0]}"]
    out: list[dict] = []
    for r in runs:
        if out and r["class"] in PHASE_ONLY and out[-1]["class"] == r["class"]:
            out[-1] = dict(out[-1], buckets=out[-1]["buckets"] + r["buckets"], end=r["end"],
                           gpu_s=out[-1]["gpu_s"] + r["gpu_s"])
        else:
            out.append(r)
    return out


def _level(run: dict) -> float:
    """How busy a stretch kept the GPU, percent: the busiest of its SM activity (utilization without it), DRAM
    and host link (copies keep the SMs idle)."""
    s = run["signals"]
    busy = s.sm if s.sm is not None else s.util
    return max([x for x in (busy, s.dram, s.link_pct) if x is not None] or [0.0])


def _startup(runs: list[dict], th: dict[str, float]) -> tuple[int, dict | None]:
    """(how many leading buckets are start-up, the ramp among them or None): the stretches without GPU work before
    the first working one, and that one too when it is the ramp into the next (RAMP_POINTS): at most two points
    per GPU, busy less than RAMP_LEVEL of the level of the working stretch right after it. (0, None) when nothing
    worked."""
    work = [i for i, r in enumerate(runs) if not _no_work(r, th)]
    if not work:
        return 0, None
    i = work[0]
    ramp = None
    if i + 1 < len(runs) and not _no_work(runs[i + 1], th) and runs[i]["points"] <= RAMP_POINTS \
            and _level(runs[i]) < RAMP_LEVEL * _level(runs[i + 1]):
        ramp = dict(runs[i], next_level=_level(runs[i + 1]))
        i += 1
    return sum(len(r["buckets"]) for r in runs[:i]), ramp


def _name_startup(r: dict, ramp: dict | None) -> None:
    """Name the carved start-up stretch, its evidence from its means (and the ramp's, where one ends it)."""
    why = "no GPU work before the first working stretch (imports, CUDA context, JIT compilation, data loading)"
    if ramp is not None:
        why = (("no GPU work, then " if len(r["buckets"]) > len(ramp["buckets"]) else "")
               + f"the ramp into the first working stretch ({ramp['points']:.0f} points of the series busy "
               f"{_level(ramp):.0f}%, under half the {ramp['next_level']:.0f}% the work then holds: at most one point "
               "before the work and the one it began in)")
    r["class"], r["evidence"] = "startup", [f"{why}: {r['evidence'][0]}"]


def _no_work(run: dict, th: dict[str, float]) -> bool:
    """Whether a stretch did no GPU work: SM activity (or, without it, utilization) below the idle bar; start-up
    and an idle tail, by their names."""
    if run["class"] in PHASE_ONLY:
        return True
    s = run["signals"]
    busy = s.sm if s.sm is not None else s.util
    return run["class"] in ("idle", "input_bound") and (busy is None or busy < th["idle_util_pct"])


def _run(buckets: list[dict], th: dict[str, float], link_gbps: float | None = None) -> dict[str, Any]:
    """A stretch of buckets with its class from the means over them."""
    def mean(f: str) -> float | None:
        c = sum(b["cnt"].get(f, 0) for b in buckets)
        return sum(b["sum"].get(f, 0.0) for b in buckets) / c if c else None

    n = sum(b["n"] for b in buckets)
    def link(name: str) -> float | None:
        vals = [mean(f"{name}_tx_bps"), mean(f"{name}_rx_bps")]
        return sum(x for x in vals if x is not None) / 1e9 if any(x is not None for x in vals) else None

    gpus = set().union(*(b["gpus"] for b in buckets))
    fps = [x for x in (mean("fp16_active_pct"), mean("fp32_active_pct"), mean("fp64_active_pct")) if x is not None]
    dmma = [x for x in (mean("tensor_dmma_pct"), mean("tensor_dfma_pct")) if x is not None]
    s = Signals(util=mean("util_gpu_pct"), sm=mean("sm_active_pct"), tensor=mean("tensor_active_pct"),
                fp_max=max(fps) if fps else None,
                dram=mean("dram_active_pct"), idle_share=100.0 * sum(b["idle"] for b in buckets) / n if n else None,
                hw_throttle_share=0.0, power_cap_share=0.0,
                nvlink_gbps=link("nvlink"), pcie_gbps=link("pcie"), nodes=1,
                pcie_balance=balance(mean("pcie_tx_bps"), mean("pcie_rx_bps")), cpu_eff=None, iowait=None,
                gpu_count=len(gpus), samples=n, fp32=mean("fp32_active_pct"), fp64=mean("fp64_active_pct"),
                fp16=mean("fp16_active_pct"), int_pipe=mean("int_active_pct"), hmma=mean("tensor_hmma_pct"),
                imma=mean("tensor_imma_pct"), dmma=max(dmma) if dmma else None, pcie_link_gbps=link_gbps)
    cls, ev = classify(s, th)
    return {"buckets": buckets, "start": buckets[0]["start"], "end": buckets[-1]["end"],
            "gpu_s": sum(b["gpu_s"] for b in buckets), "class": cls, "evidence": ev, "signals": s,
            "link": link_gbps, "points": n / len(gpus) if gpus else 0.0}


def _merge_same(runs: list[dict], th: dict[str, float]) -> list[dict]:
    out: list[dict] = []
    for r in runs:
        if out and out[-1]["class"] == r["class"]:
            out[-1] = _run(out[-1]["buckets"] + r["buckets"], th, r["link"])
        else:
            out.append(r)
    return out
