"""A time-segmented diagnosis: a job whose behaviour changes gets its phases (at most MAX_PHASES), each with
its share of GPU-hours, its class and its rate, from the daemon's series (1-minute means once full resolution
ages out).

Resolution: the series has SERIES_POINTS points per GPU over the job, whatever its length, and is cut into as many
equal stretches (BUCKETS), each classified from its means with the job-wide rules; neighbours of one class are
joined, and a stretch under the phase floor (``phase_min_share_pct`` of the GPU-hours, and MIN_POINTS points per
GPU: one or two points are noise, not a phase) joins its larger neighbour and the pair is judged again. So a phase
of 5% of a job is found from a one-minute job (60 samples at 1 s) to one of several days (1-minute means). Cost is
bounded: linear in the points read, and each join adds the two stretches' sums (never re-reads their points).
Stretches with no GPU work before the first working one are ``startup`` (imports, CUDA context, JIT
compilation, data loading), after the last working one ``idle_tail``, and between working ones ``idle`` with
what such a pause is (a checkpoint, an evaluation on the host): named, never the job's class. So is the ramp
into the first working phase (``RAMP_POINTS``): a stretch too short to hold a level of its own. A class that
comes back (an evaluation every two hours between training stretches) says how often (``recurs``).
"""

from __future__ import annotations

from typing import Any

from gpuperf.diagnosis.classify import classify
from gpuperf.diagnosis.signals import Signals, balance, num
from gpuperf.diagnosis.thresholds import PHASE_ONLY

# what the daemon hands the diagnosis per GPU (``SERIES_POINTS``): 1/120 of the job a point, so a phase of 5% holds
# 6 (a 12-hour job's points are 6 minutes, a 3-minute job's 1.5 s, a one-minute job's every 1 s sample). 8 GPUs x 120
# points x 19 lists are ~90 KB of JSON (phases.compact's 0.1 rounding): far inside the daemon's 1 MiB replies and the
# node summary's bounds (benchmarks/diag_phases_cost.py measures the diagnosis over them)
SERIES_POINTS = 120
BUCKETS = SERIES_POINTS  # stretches the job is cut into: one point per GPU each when the series is full
MAX_PHASES = 16     # a 12-hour job with an evaluation every 2 hours has 13 (start-up, 6 x training + evaluation)
MIN_POINTS = 3      # a phase holds at least this many points per GPU (a 5% phase of a one-minute job holds 3)
RAMP_POINTS = 2
RAMP_LEVEL = 0.5
_FIELDS = ("util_gpu_pct", "sm_active_pct", "tensor_active_pct", "dram_active_pct")
# the math pipes by kind, so a stretch of FP32, FP64, integer or per-kind tensor work is judged as the job is
_PIPES = ("fp16_active_pct", "fp32_active_pct", "fp64_active_pct", "int_active_pct", "tensor_hmma_pct",
          "tensor_imma_pct", "tensor_dmma_pct", "tensor_dfma_pct")
# the SM clock, so the working phases' rates are priced at the clock they ran at (an idle GPU clocks down
# without a CUDA context and up with one, so the job's mean clock is not the work's)
_CLOCK = ("sm_clock_mhz",)
_LINKS = ("nvlink_tx_bps", "nvlink_rx_bps", "pcie_tx_bps", "pcie_rx_bps")
SERIES_FIELDS = _FIELDS + _LINKS + _PIPES + _CLOCK
_BUSY, _BUSY_CLOCK = "busy", "busy_clock"     # bucket sums of SM activity and of SM activity x clock


def compact(series: dict) -> dict:
    """The series with values rounded (0.1) so the reply stays small."""
    return {gpu: {k: [None if num(v) is None else round(float(v), 1) for v in vals] for k, vals in ser.items()}
            for gpu, ser in series.items() if isinstance(ser, dict)}


def analyse(series: dict, th: dict[str, float], link_gbps: float | None = None) -> tuple[list[dict[str, Any]], float]:
    """The job's stretches, found once for ``segment``, ``working_factors`` and ``rates`` (their ``found``)."""
    return _phases(series, th, link_gbps)


def segment(series: dict, th: dict[str, float], link_gbps: float | None = None,
            found: tuple[list[dict[str, Any]], float] | None = None) -> list[dict[str, Any]]:
    """Phases of the job: [{"start", "end", "share_pct", "gpu_hours", "class", "evidence", "work"}, with
    ``recurs`` {"times", "every_s", "each_s"} on a class that comes back]; [] when one phase. ``work``: the stretch
    did GPU work (not start-up, an idle tail or idle).

    ``link_gbps``: one direction's raw rate of the GPUs' PCIe link (for stretches of host<->device copies);
    ``found``: ``analyse``'s result for the same series, when the caller has it."""
    runs, total = found if found is not None else _phases(series, th, link_gbps)
    if len(runs) < 2:
        return []
    out = [{"start": round(r["start"], 1), "end": round(r["end"], 1), "share_pct": round(100.0 * r["gpu_s"] / total, 1),
            "gpu_hours": round(r["gpu_s"] / 3600.0, 4), "class": r["class"], "evidence": r["evidence"][0],
            "work": _works(r, th)}
           for r in runs]
    _recurs(out)
    return out


def _recurs(phases: list[dict[str, Any]]) -> None:
    """Mark each class met in two or more separate phases between the first and last working ones (an evaluation
    or checkpoint every so often between training stretches) with how often: in place."""
    by: dict[str, list[dict]] = {}
    for p in phases:
        if p["class"] not in PHASE_ONLY:
            by.setdefault(p["class"], []).append(p)
    for cls, ps in by.items():
        if len(ps) < 2:
            continue
        every = (ps[-1]["start"] - ps[0]["start"]) / (len(ps) - 1)
        each = sum(p["end"] - p["start"] for p in ps) / len(ps)
        for p in ps:
            p["recurs"] = {"times": len(ps), "every_s": round(every, 1), "each_s": round(each, 1)}


def working_factors(series: dict, th: dict[str, float], link_gbps: float | None = None,
                    found: tuple[list[dict[str, Any]], float] | None = None) -> dict[str, float]:
    """{series field: its mean over the working phases / its mean over the whole series}, for the fields with a
    mean above zero ({} when the job is one phase): what a job-wide mean is multiplied by to be the working phases'
    own (start-up, the ramp into the work and an idle tail did part of it, not none). The SM clock's is its mean
    weighted by SM activity over the working phases, over its job-wide mean: the clock the work ran at."""
    runs, _ = found if found is not None else _phases(series, th, link_gbps)
    if len(runs) < 2:
        return {}
    every = _sum([r["agg"] for r in runs])
    work = [r["agg"] for r in runs if _works(r, th)]
    if not work:
        return {}
    part = _sum(work)
    out = {}
    for f in SERIES_FIELDS:
        whole, mine = _mean(every, f), _mean(part, f)
        if whole and mine is not None:
            out[f] = mine / whole
    # the SM clock's: the working phases' clock weighted by SM activity (a rate is activity x clock, so the clock of
    # an idle point in a working phase counts for nothing) over the job's mean clock
    busy = part["sum"].get(_BUSY, 0.0)
    if busy > 0 and out.get("sm_clock_mhz"):
        out["sm_clock_mhz"] = part["sum"].get(_BUSY_CLOCK, 0.0) / busy / _mean(every, "sm_clock_mhz")
    return out


def rates(series: dict, th: dict[str, float], link_gbps: float | None = None,
          found: tuple[list[dict[str, Any]], float] | None = None) -> list[dict[str, Any]]:
    """Each working phase's means of the series' fields (``{"start", "end", "class", "means": {field: mean}}``):
    what the phase's own rates are priced from ([] when the job is one phase)."""
    runs, _ = found if found is not None else _phases(series, th, link_gbps)
    if len(runs) < 2:
        return []
    out = []
    for r in runs:
        if _works(r, th):
            means = {f: _mean(r["agg"], f) for f in SERIES_FIELDS}
            busy = r["agg"]["sum"].get(_BUSY, 0.0)
            if busy > 0:
                means["sm_clock_mhz"] = r["agg"]["sum"].get(_BUSY_CLOCK, 0.0) / busy
            out.append({"start": r["start"], "end": r["end"], "class": r["class"],
                        "means": {k: v for k, v in means.items() if v is not None}})
    return out


def _mean(agg: dict, f: str) -> float | None:
    c = agg["cnt"].get(f, 0)
    return agg["sum"].get(f, 0.0) / c if c else None


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
    # buckets centred on an even grid from the first point to the last, so a series of BUCKETS points (the daemon's:
    # each point a mean over its interval, at its middle) gives each point a bucket of its own
    width = (t1 - t0) / (BUCKETS - 1)
    buckets = [_empty() for _ in range(BUCKETS)]
    idle_bar = th["idle_util_pct"]
    for gpu, ser in series.items():
        if not isinstance(ser, dict):
            continue
        # each point's bucket once, then field by field (the inner loop is the cost: 8 GPUs x 120 points x 17 fields)
        where = [None if (t := num(x)) is None else buckets[min(BUCKETS - 1, int((t - t0) / width + 0.5))]
                 for x in ser.get("t") or []]
        for b in where:
            if b is not None:
                b["gpus"].add(gpu)
                b["n"] += 1
        for f in SERIES_FIELDS:
            for b, v in zip(where, ser.get(f) or []):
                if b is not None and type(v) in (float, int):
                    b["sum"][f] = b["sum"].get(f, 0.0) + v
                    b["cnt"][f] = b["cnt"].get(f, 0) + 1
        n = len(where)
        util, sms, clks = (_col(ser, k, n) for k in ("util_gpu_pct", "sm_active_pct", "sm_clock_mhz"))
        for b, u, sm, clk in zip(where, util, sms, clks):
            if b is None:
                continue
            busy = sm if sm is not None else u
            if clk is not None and busy is not None:
                # the clock weighted by how busy the SMs were: the clock the work ran at
                b["sum"][_BUSY_CLOCK] = b["sum"].get(_BUSY_CLOCK, 0.0) + clk * busy
                b["sum"][_BUSY] = b["sum"].get(_BUSY, 0.0) + busy
            # no kernel: utilization says none and SM activity (which sees short kernels) agrees
            if (u is not None and u < idle_bar) and (sm is None or sm < idle_bar):
                b["idle"] += 1
    for k, b in enumerate(buckets):
        b["start"], b["end"] = t0 + (k - 0.5) * width, t0 + (k + 0.5) * width
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


def _small(run: dict, th: dict[str, float], total: float, min_points: float) -> bool:
    """Under the phase floor: a share of the GPU-hours under ``phase_min_share_pct`` or fewer than ``min_points``
    points per GPU."""
    return 100.0 * run["gpu_s"] / total < th["phase_min_share_pct"] or run["points"] < min_points


def _merge_small(runs: list[dict], th: dict[str, float], link_gbps: float | None, total: float,
                 cap: int) -> list[dict]:
    """The stretches with the smallest joined to a neighbour until at most ``cap`` remain, none under the floor."""
    # MIN_POINTS, or a tenth of the points of a series shorter than 30 (a 12-point series' phase of 2 points is a
    # sixth of the job; a 20-point one's single points flicker between classes: llama decode at 1 s)
    min_points = min(MIN_POINTS, 0.1 * sum(r["points"] for r in runs))
    while len(runs) > 1:
        small = min(range(len(runs)), key=lambda i: runs[i]["gpu_s"])
        if len(runs) <= cap and not _small(runs[small], th, total, min_points):
            # the smallest is a phase; a shorter one by points (fewer GPUs, a sparse stretch) may not be
            short = [i for i, r in enumerate(runs) if r["points"] < min_points]
            if not short:
                break
            small = short[0]
        # the smallest stretch joins its larger neighbour and the pair is judged again from its means
        j = small - 1 if small == len(runs) - 1 or (small > 0 and runs[small - 1]["gpu_s"] >= runs[small + 1]["gpu_s"]) \
            else small + 1
        a, b = sorted((small, j))
        runs[a:b + 1] = [_join(runs[a], runs[b], th, link_gbps)]
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


def _col(ser: dict, key: str, n: int) -> list[float | None]:
    """A field's ``n`` values as numbers (None: missing or not a number)."""
    vals = ser.get(key) or []
    return [num(v) for v in vals[:n]] + [None] * (n - len(vals))


def _empty() -> dict[str, Any]:
    return {"gpus": set(), "n": 0, "idle": 0, "sum": {}, "cnt": {}}


def _sum(aggs: list[dict]) -> dict[str, Any]:
    """The sums of several buckets (or stretches' sums) as one."""
    out = _empty()
    for a in aggs:
        out["gpus"] |= a["gpus"]
        out["n"] += a["n"]
        out["idle"] += a["idle"]
        for k, v in a["sum"].items():
            out["sum"][k] = out["sum"].get(k, 0.0) + v
        for k, v in a["cnt"].items():
            out["cnt"][k] = out["cnt"].get(k, 0) + v
    return out


_BETWEEN = "no GPU work between working stretches (a checkpoint, an evaluation or data preparation on the host)"


def _name_ends(runs: list[dict], th: dict[str, float]) -> list[dict]:
    """Leading stretches without GPU work before a working one are start-up, trailing ones an idle tail
    (neighbours of the same name joined), and those between working ones say what such a pause is."""
    work = [i for i, r in enumerate(runs) if not _no_work(r, th)]
    if not work:
        return runs
    for i, r in enumerate(runs):
        if (i < work[0] or i > work[-1]) and r["class"] not in PHASE_ONLY:
            name = "startup" if i < work[0] else "idle_tail"
            r["class"], r["evidence"] = name, [
                ("no GPU work before the first working stretch (imports, CUDA context, JIT compilation, data loading)"
                 if name == "startup" else "no GPU work after the last working stretch") + f": {r['evidence'][0]}"]
        elif work[0] < i < work[-1] and _no_work(r, th) and not r["evidence"][0].startswith(_BETWEEN):
            r["evidence"] = [f"{_BETWEEN}: {r['evidence'][0]}", *r["evidence"][1:]]
    out: list[dict] = []
    for r in runs:
        if out and r["class"] in PHASE_ONLY and out[-1]["class"] == r["class"]:
            out[-1] = dict(out[-1], buckets=out[-1]["buckets"] + r["buckets"], end=r["end"],
                           gpu_s=out[-1]["gpu_s"] + r["gpu_s"], agg=_sum([out[-1]["agg"], r["agg"]]))
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


def _join(a: dict, b: dict, th: dict[str, float], link_gbps: float | None) -> dict[str, Any]:
    """Two neighbouring stretches as one, judged from their summed means (their points are not read again)."""
    return _run(a["buckets"] + b["buckets"], th, link_gbps, _sum([a["agg"], b["agg"]]))


def _run(buckets: list[dict], th: dict[str, float], link_gbps: float | None = None,
         agg: dict | None = None) -> dict[str, Any]:
    """A stretch of buckets with its class from the means over them (``agg``: their sums, when known)."""
    agg = agg if agg is not None else _sum(buckets)

    def mean(f: str) -> float | None:
        return _mean(agg, f)

    n = agg["n"]

    def link(name: str) -> float | None:
        vals = [mean(f"{name}_tx_bps"), mean(f"{name}_rx_bps")]
        return sum(x for x in vals if x is not None) / 1e9 if any(x is not None for x in vals) else None

    gpus = agg["gpus"]
    fps = [x for x in (mean("fp16_active_pct"), mean("fp32_active_pct"), mean("fp64_active_pct")) if x is not None]
    dmma = [x for x in (mean("tensor_dmma_pct"), mean("tensor_dfma_pct")) if x is not None]
    s = Signals(util=mean("util_gpu_pct"), sm=mean("sm_active_pct"), tensor=mean("tensor_active_pct"),
                fp_max=max(fps) if fps else None,
                dram=mean("dram_active_pct"), idle_share=100.0 * agg["idle"] / n if n else None,
                hw_throttle_share=0.0, power_cap_share=0.0,
                nvlink_gbps=link("nvlink"), pcie_gbps=link("pcie"), nodes=1,
                pcie_balance=balance(mean("pcie_tx_bps"), mean("pcie_rx_bps")), cpu_eff=None, iowait=None,
                gpu_count=len(gpus), samples=n, fp32=mean("fp32_active_pct"), fp64=mean("fp64_active_pct"),
                fp16=mean("fp16_active_pct"), int_pipe=mean("int_active_pct"), hmma=mean("tensor_hmma_pct"),
                imma=mean("tensor_imma_pct"), dmma=max(dmma) if dmma else None, pcie_link_gbps=link_gbps)
    cls, ev = classify(s, th)
    return {"buckets": buckets, "agg": agg, "start": buckets[0]["start"], "end": buckets[-1]["end"],
            "gpu_s": sum(b["gpu_s"] for b in buckets), "class": cls, "evidence": ev, "signals": s,
            "link": link_gbps, "points": n / len(gpus) if gpus else 0.0}


def _merge_same(runs: list[dict], th: dict[str, float]) -> list[dict]:
    out: list[dict] = []
    for r in runs:
        if out and out[-1]["class"] == r["class"]:
            out[-1] = _join(out[-1], r, th, r["link"])
        else:
            out.append(r)
    return out
