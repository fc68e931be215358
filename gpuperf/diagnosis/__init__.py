"""Why a job was slow: one primary class from its summary, with the evidence, a confidence, and what to change.

Pure: ``diagnose(summary, series=None, thresholds=None) -> Diagnosis``. Order of judgement: nothing
sampled, or most of it under a profiler (``no_data``; ``profiler.py``); allocated GPUs left unused
(``unused_gpus``, with the class of the GPUs that worked); then the rules in ``classify.py`` on the
working GPUs. Findings (tensor cores unused, SMs
underfilled, host copies) and the distance to the roofline stand beside the class; a series splits the
job into phases, and then the class is that with the most GPU-hours over its working phases (start-up and an
idle tail are phases, never the class of a job that worked), so the class never contradicts the phases; a short
job that never reached its GPU work is ``startup`` for all of it (``_never_worked``).
Thresholds come from ``[report] thresholds`` in the config (``thresholds.py`` says why each is what it is).
``jobsummary`` gives the whole summary: the job model's figures with their estimates and this diagnosis.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpuperf.model import gpuspecs
from gpuperf.model.profiled import mask_series
from gpuperf.model.totals import job_totals
from gpuperf.diagnosis import advice, phases, profiler, roofline
from gpuperf.diagnosis.classify import classify
from gpuperf.diagnosis.signals import Signals, num, pct, signals
from gpuperf.diagnosis.thresholds import CLASSES, DEFAULTS, PHASE_ONLY, resolve_thresholds

__all__ = ["CLASSES", "DEFAULTS", "Diagnosis", "diagnose", "resolve_thresholds"]


@dataclass
class Diagnosis:
    """One primary class, how sure, whether GPUs were imbalanced, the evidence, and 1-3 recommendations."""

    cls: str
    imbalanced: bool = False
    evidence: list[str] = field(default_factory=list)
    recommendations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    confidence: str = "high"                 # high | medium | low | none (what the class rests on)
    findings: list[dict[str, str]] = field(default_factory=list)
    roofline: dict[str, Any] | None = None   # estimates and distance to the roof (roofline.job_estimate)
    unused: dict[str, Any] | None = None     # {"gpus", "count", "of", "wasted_gpu_hours"} when GPUs sat unused
    busy_class: str | None = None            # with unused_gpus: the class of the GPUs that worked
    phases: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data; the class under the key ``class``."""
        d = asdict(self)
        d["class"] = d.pop("cls")
        return d


def diagnose(summary: dict, series: dict | None = None, thresholds: dict | None = None,
             roof: dict[str, Any] | None = None) -> Diagnosis:
    """The primary class of a job from its summary (and optional per-GPU series), with evidence.

    ``roof``: ``roofline.job_estimate`` of all the summary's GPUs when the caller has it (the summary's
    estimates did), so a merge over every GPU of a multi-node job does not compute it twice."""
    th = resolve_thresholds(thresholds)
    gpus = [g for g in summary.get("gpus") or [] if isinstance(g, dict)]
    prof_notes = profiler.notes(gpus)
    if prof_notes:
        share = profiler.share_pct(gpus)
        if share >= th["profiler_share_pct"]:
            # the profiler's figures are not the job's: no class, and no advice drawn from them
            return Diagnosis(cls="no_data", evidence=profiler.evidence(gpus, share), confidence="none",
                             recommendations=[profiler.RECOMMENDATION],
                             notes=prof_notes + _notes(signals(summary), summary, th, "no_data"))
        if series:
            series = mask_series(series, gpus, drop=True)     # the phases judge the rest of the time only
    unused, used = _unused(gpus, th)
    work = _restrict(summary, used) if unused else summary
    s = signals(work, series if not unused else None)
    cls, evidence = classify(s, th)
    spec = gpuspecs.lookup((used or gpus or [{}])[0].get("name"))
    d = Diagnosis(cls=cls, evidence=evidence, confidence=_confidence(cls, s))
    d.imbalanced, imb = _imbalance(gpus, th)
    if cls != "no_data":
        d.findings = advice.findings(s, th)
        d.evidence += [f["text"] for f in d.findings]
        if spec is not None and s.profiled:
            d.roofline = _round(roof if roof is not None and not unused else roofline.job_estimate(used or gpus, spec))
            d.roofline["model"] = spec.model
    if unused:
        d.unused = unused
        d.busy_class, d.cls = cls, "unused_gpus"
        d.evidence.insert(0, f"{unused['count']} of {unused['of']} allocated GPUs had no kernel for at least "
                             f"{th['unused_share_pct']:.0f}% of the job ({', '.join(unused['gpus'])}): "
                             f"{unused['wasted_gpu_hours']:.3g} GPU-hours wasted; the working GPUs are {cls}")
    else:
        d.evidence += imb
    if series and unused:
        # the working GPUs' series: bursts and phases of the GPUs that did nothing say nothing
        keep = {str(g.get("gpu")) for g in used} | {f"{g.get('node')}:{g.get('gpu')}" for g in used}  # one node's, or a merge's
        series = {k: v for k, v in series.items() if k in keep}
    if series and cls not in ("no_data",):
        burst = _bursts(series, th)
        if burst:
            d.evidence.append(burst)
        found = phases.analyse(series, th, s.pcie_link_gbps)
        d.phases = phases.segment(series, th, found=found)
        cls = _from_phases(d, cls)
        _working_roof(d, phases.working_factors(series, th, found=found))
        if spec is not None and s.profiled and d.roofline is not None:
            _phase_rates(d, phases.rates(series, th, found=found), spec)
    _never_worked(d, s, summary, th)
    d.notes = prof_notes + _notes(s, summary, th, d.cls, d.roofline)
    if d.roofline is not None and spec is not None:
        line = _roof_line(d.busy_class or d.cls, d.roofline, spec)
        if line and line not in d.evidence:
            d.evidence.append(line)
    d.recommendations = advice.recommend(d.cls, s, spec, d.roofline, d.findings, d.imbalanced and not unused, th)
    d.notes += advice.notes(d.busy_class or d.cls, s, spec, d.roofline, th)
    if unused:
        more = advice.recommend(cls, s, spec, d.roofline, d.findings, False, th)
        d.recommendations = (d.recommendations[:1] + [r for r in more if r not in d.recommendations[:1]])[:3]
    return d


# classes the phases cannot judge (they see no throttle reasons, hosts or nodes): the job-wide rule stands
_JOB_ONLY = ("no_data", "throttled", "communication_bound", "busy_unprofiled")


def _from_phases(d: Diagnosis, cls: str) -> str:
    """The class with the most GPU-hours over the working phases (summed over its phases: training stretches
    between evaluations) when the job's means (diluted by start-up, idle tails or a minority phase) say otherwise;
    the evidence says so. Returns the class the working GPUs get."""
    work = [p for p in d.phases if p.get("work") and p["class"] not in PHASE_ONLY]
    if not work or cls in _JOB_ONLY:
        return cls
    shares: dict[str, float] = {}
    for p in work:
        shares[p["class"]] = shares.get(p["class"], 0.0) + p["share_pct"]
    main = max(shares, key=lambda c: shares[c])
    if main == cls or main in _JOB_ONLY:
        return cls
    n = sum(p["class"] == main for p in work)
    others: dict[str, float] = {}
    for p in d.phases:
        if p["class"] != main:
            others[p["class"]] = others.get(p["class"], 0.0) + p["share_pct"]
    note = (f"class from the working phases ({main}, {shares[main]:.0f}% of the GPU-hours"
            + (f" in {n} stretches" if n > 1 else "") + f"): the job-wide means read {cls}, diluted by the other "
            "phases (" + ", ".join(f"{c} {v:.0f}%" for c, v in others.items()) + ")")
    if d.cls == "unused_gpus":
        d.busy_class = main
    else:
        d.cls = main
    d.evidence.insert(0 if d.cls != "unused_gpus" else 1, note)
    return main


# a job that held more GPU memory than a CUDA context's own (~0.5 GiB on H100) put data or a model there
STARTUP_MEM_MIB = 1024.0
# a start-up (imports, model build, compilation, data loading) keeps at least its main thread on the CPU or
# waiting on its disk through it: its busiest host's CPU and block-I/O seconds cover half the wall at least;
# a job that imported, put 2 GiB on its GPU and slept read 0.27 (4x H100, idle.py --seconds 10, -c2)
STARTUP_HOST_BUSY = 0.5


def _host_busy(summary: dict) -> float | None:
    """The busiest host's (CPU + block-I/O wait) seconds per wall second over the job (None: not measured)."""
    busy = []
    for h in (summary.get("hosts") or {}).values():
        cpu_s = num(h.get("cpu_time_s")) if isinstance(h, dict) else None
        wall = num(h.get("wall_s")) or num(summary.get("wall_s"))
        if cpu_s is None or not wall:
            continue
        io = num(h.get("iowait_pct")) or 0.0     # share of (CPU + I/O wait) time spent waiting
        busy.append((cpu_s / (1.0 - io / 100.0) if io < 100.0 else wall) / wall)
    return max(busy) if busy else None


def _never_worked(d: Diagnosis, s: Signals, summary: dict, th: dict[str, float]) -> None:
    """A job that never reached its GPU work is in start-up for all of it (imports, model build, compilation, data
    loading), not idle: no GPU work, its host busy through the job (not only its imports), GPU memory held
    past a context's. In place."""
    busy = s.sm if s.sm is not None else s.util
    mem = num((summary.get("job") or {}).get("mem_peak_mib"))
    # kernels in most samples, however small, are work the job reached (input-bound, or a profiler replaying them)
    rare = d.cls == "idle" or (s.idle_share is not None and s.idle_share >= th["idle_share_pct"])
    if not rare or busy is None or busy >= th["idle_util_pct"] or any(p.get("work") for p in d.phases):
        return
    if s.cpu_eff is None or s.cpu_eff < th["input_host_cpu_pct"] or mem is None or mem < STARTUP_MEM_MIB:
        return
    host = _host_busy(summary)
    if host is None or host < STARTUP_HOST_BUSY:
        return          # busy for its imports, then waiting with its GPU memory held: an idle GPU
    wall = num(summary.get("wall_s"))
    if wall is None or wall > th["startup_max_s"]:
        return
    d.cls, d.phases = "startup", []
    d.evidence.insert(0, f"start-up for all {wall:.0f} s")
    d.evidence.insert(1, f"no GPU work (SM active {pct(s.sm)}, utilization {pct(s.util)}) while the host's CPUs were "
                         f"{pct(s.cpu_eff)} busy ({host:.1f} CPU-seconds a second through the job, disk waits included) and {mem / 1024:.1f} GiB "
                         "of GPU memory were held: the job was still "
                         "starting (imports, model build, JIT compilation, data loading, NCCL init) when it ended")


def _working_roof(d: Diagnosis, factors: dict[str, float] | None = None) -> None:
    """The roofline over the working phases: start-up, a ramp into the work and idle tails dilute the job's means
    (``roofline.over_working``, with each activity's working-phase mean over its job-wide one: ``factors``). What
    it covers is labelled (``covers``), and the job's average stays beside it (``job_average``)."""
    if d.roofline is None:
        return
    share = sum(p["share_pct"] for p in d.phases if p.get("work")) if d.phases else 100.0
    if not d.phases or not 0 < share < 95.0:
        d.roofline["covers"] = "the whole job"
        return
    kind = d.roofline.get("kind")
    d.roofline["job_average"] = {"covers": "the whole job, start-up and idle stretches included",
                                 "rate": roofline.rate(d.roofline, kind) if kind else None,
                                 "tflops": d.roofline.get("tflops"), "dram_gbps": d.roofline.get("dram_gbps")}
    roofline.over_working(d.roofline, factors or {}, share)
    d.roofline["covers"] = f"the working phases, {share:.0f}% of the job"


def _phase_rates(d: Diagnosis, found: list[dict[str, Any]], spec: gpuspecs.GpuSpec) -> None:
    """Each working phase's own rate (``rate``: the job's kind of math at that phase's activity and clock, and its
    DRAM bandwidth), labelled as the phase's: the rate while the job did that work. In place."""
    kind = (d.roofline or {}).get("kind")
    by_start = {round(r["start"], 1): r["means"] for r in found}
    for p in d.phases:
        means = by_start.get(p["start"]) if p.get("work") else None
        if means is None:
            continue
        est = roofline.gpu_estimate(means, spec)
        rate = est.get(f"{kind}_rate") if kind else None
        p["rate"] = {"covers": "this phase", "kind": kind, "value": None if rate is None else round(rate, 1),
                     "unit": roofline.KINDS[kind][3] if kind else None,
                     "dram_gbps": None if est["dram_gbps"] is None else round(est["dram_gbps"], 0)}


def _confidence(cls: str, s: Signals) -> str:
    if cls == "no_data":
        return "none"
    if s.profiled:
        return "high"
    return "medium" if s.sm is not None else "low"


def _notes(s: Signals, summary: dict, th: dict[str, float], cls: str, roof: dict[str, Any] | None = None) -> list[str]:
    notes = []
    if s.util is not None and s.sm is not None and s.util >= 90 and s.sm < 50:
        notes.append(f"NVML utilization {pct(s.util)} but SM active {pct(s.sm)}: 'utilization' only says a "
                     "kernel was running, not how much of the GPU it used")
    if cls != "no_data" and s.sm is None:
        notes.append("no SM/tensor/DRAM activity (needs GPM on Hopper+ or DCGM): classified from utilization only "
                     "(low confidence: says whether kernels ran, not what bounds them)")
    if s.power_cap_share >= th["throttle_share_pct"] and cls != "throttled":
        notes.append(f"at the software power cap {pct(s.power_cap_share)} of the time (normal for busy GPUs)")
    q = summary.get("quality") or {}
    if q.get("partial"):
        notes.append("summary is partial: " + "; ".join(str(r) for r in q.get("reasons") or []))
    return notes


def _unused(gpus: list[dict], th: dict[str, float]) -> tuple[dict[str, Any] | None, list[dict]]:
    """(the unused-GPU finding or None, the GPUs that worked): idle >= unused_share while another works."""
    if len(gpus) < 2:
        return None, gpus
    idle, used = [], []
    for g in gpus:
        share = num(g.get("idle_pct"))
        busy = [num(g.get(k)) for k in ("util_gpu_pct", "sm_active_pct") if num(g.get(k)) is not None]
        if share is not None:
            # no kernel by NVML's count, and no SM activity either (short kernels escape NVML's sampling)
            no_work = share >= th["unused_share_pct"] and (not busy or max(busy) < th["idle_util_pct"])
        elif busy:
            no_work = max(busy) < th["idle_util_pct"]
        else:
            used.append(g)          # nothing measured: not evidence of anything
            continue
        (idle if no_work else used).append(g)
    working = [g for g in used if any(num(g.get(k)) is not None for k in ("util_gpu_pct", "sm_active_pct", "idle_pct"))]
    if not idle or not working:
        return None, gpus
    wasted = sum(num(g.get("seconds")) or 0.0 for g in idle) / 3600.0
    return {"gpus": [f"{g.get('node')}:{g.get('gpu')}" for g in idle], "count": len(idle), "of": len(gpus),
            "wasted_gpu_hours": round(wasted, 4)}, used


def _restrict(summary: dict, gpus: list[dict]) -> dict:
    """The summary as if the job had held only ``gpus`` (job-wide figures recomputed)."""
    job = job_totals(gpus)
    if job.get("idle_pct") is None:
        # summaries that kept each GPU's no-kernel share but not its seconds (older, or trimmed ones)
        shares = [(num(g.get("idle_pct")), num(g.get("seconds")) or 1.0) for g in gpus if num(g.get("idle_pct")) is not None]
        if shares:
            job["idle_pct"] = sum(v * w for v, w in shares) / sum(w for _, w in shares)
    return dict(summary, gpus=gpus, job=job)


def _roof_line(cls: str, roof: dict[str, Any], spec: gpuspecs.GpuSpec) -> str | None:
    if cls in ("compute_bound", "busy_unprofiled") and roof.get("tflops") is not None:
        kind = roof.get("kind") or "tensor"
        act, r = (roof.get("kinds") or {}).get(kind) or [roof.get("compute_roof_pct"), None]
        err = roof.get("kind_error_pct") or roofline.ERROR_PCT
        if r is None:
            return f"busiest pipe: {roofline.DTYPES.get(kind, kind)} at {pct(act)} (no peak known for it)"
        line = (f"estimated {r:.0f} {roofline.KINDS[kind][3]} per GPU of {roofline.DTYPES[kind]} work, "
                f"its pipe {pct(act)} busy (±{err:.0f}%)")
        if roof.get("working_share_pct"):
            line += f", over the working phases ({roof['working_share_pct']:.0f}% of the job)"
            avg = (roof.get("job_average") or {}).get("rate")
            if avg is not None:
                line += f"; job average {avg:.0f} (the whole job, start-up and idle included)"
        if roof.get("bracket") and kind == "hmma":
            lo, hi = roof["bracket"]
            line += f"; as TF32 {lo:.0f}" + (f", as FP8 {hi:.0f}" if spec.fp8 else "")
        elif roof.get("bracket"):
            lo, hi = roof["bracket"]
            line += f"; kind not measured: {lo:.0f} (as FP64 tensor) to {hi:.0f} (as FP8/INT8)"
        return line
    if cls == "memory_bound" and roof.get("dram_gbps") is not None:
        line = (f"estimated {roof['dram_gbps']:.0f} GB/s per GPU of {spec.mem_bw_gbps:.0f} GB/s peak "
                f"({pct(roof['dram_roof_pct'])} of the bandwidth roof, ±{roofline.ERROR_PCT:.0f}%)")
        avg = (roof.get("job_average") or {}).get("dram_gbps")
        if roof.get("working_share_pct") and avg is not None:
            line += (f", over the working phases ({roof['working_share_pct']:.0f}% of the job); job average {avg:.0f} "
                     "(the whole job, start-up and idle included)")
        return line
    return None


def _round(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in d.items()}


def _imbalance(gpus: list[dict], th: dict[str, float]) -> tuple[bool, list[str]]:
    if len(gpus) < 2:
        return False, []
    for key, label in (("sm_active_pct", "SM active"), ("util_gpu_pct", "utilization")):
        vals = [(num(g.get(key)), g) for g in gpus if num(g.get(key)) is not None]
        if len(vals) < 2:
            continue
        lo, hi = min(vals, key=lambda x: x[0]), max(vals, key=lambda x: x[0])
        if hi[0] - lo[0] >= th["imbalance_spread_pct"]:
            return True, [f"{label} differs across GPUs: {pct(lo[0])} on {lo[1].get('node')}:{lo[1].get('gpu')} "
                          f"vs {pct(hi[0])} on {hi[1].get('node')}:{hi[1].get('gpu')}"]
        break  # SM activity, where known, is the better figure; utilization only when SM is absent
    return False, []


def _bursts(series: dict, th: dict[str, float]) -> str | None:
    """'Works in bursts' evidence from the per-GPU series: samples with no kernel and samples nearly all busy."""
    utils = [v for ser in series.values() for v in (ser.get("util_gpu_pct") or []) if num(v) is not None]
    if len(utils) < 10:
        return None
    idle = sum(1 for v in utils if v < th["idle_util_pct"]) / len(utils)
    busy = sum(1 for v in utils if v >= 80.0) / len(utils)
    # both states common: the GPU runs flat out, then waits (input pipeline, synchronisation, checkpoints)
    if idle >= 0.15 and busy >= 0.15:
        return f"the GPU works in bursts: no kernel in {idle:.0%} of the samples, over 80% busy in {busy:.0%}"
    return None
