"""The workload zoo against the diagnosis (issue 30): class vs label, estimate vs achieved, contradicting advice.

    PYTHONPATH=. python benchmarks/zoo_matrix.py [--out benchmarks/results/zoo]

Every recording in ``tests/data/recordings/zoo/`` (made by ``benchmarks/device/zoo_record.sh``) is
replayed through the daemon's streaming aggregates and the node summary with its finalize series, the
path a real job takes (aggregates -> summary -> diagnosis), over the workload process's lifetime
(``t_proc`` .. the end of its work): start-up, warm-up and idle tails included, as a job has them. Its
class is set against the LABEL declared in ``benchmarks/workloads/<workload>.py`` (what the workload
is, written before any diagnosis ran). The estimate is taken twice and set against the rate the
workload counted itself: over the timed work alone (``t_switch`` or ``t_start`` .. ``t_end``, a window
only the workload knows), and as the job's report gives it (over the job's own working phases, its
start-up and idle tail set apart by the diagnosis). Advice the report shows (a recommendation, a
finding's fix, a note) matching one of the label's ``contradicts`` categories (``CONTRADICTS`` below)
contradicts the label, unless it only says what the counters cannot tell, names the measurement that
would, and makes its suggestion conditional on it (``hedged``).

Writes ``matrix.md`` (confusion matrix, per-workload classes), ``estimates.md`` (estimate vs achieved by
datatype), ``contradictions.md`` and ``activity.md`` (pipe and tensor-kind activity each workload showed)
to ``--out``.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import re
import sys
import tempfile
from collections import Counter, defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from gpuperf.diagnosis import jobsummary, phases, roofline  # noqa: E402
from gpuperf.report import fromrecording  # noqa: E402

# per-GPU activity shown over each workload's timed work (activity.md): which pipe and tensor kind it used
ACTIVITY = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "tensor_hmma_pct", "tensor_imma_pct",
            "tensor_dfma_pct", "tensor_dmma_pct", "fp16_active_pct", "fp32_active_pct", "fp64_active_pct",
            "int_active_pct", "dram_active_pct", "util_gpu_pct")
RECORDINGS = os.path.join(REPO, "tests", "data", "recordings", "zoo")
WORKLOADS = os.path.join(HERE, "workloads")

# advice categories a LABEL can name as contradicting it -> what a recommendation of that kind says
CONTRADICTS: dict[str, str] = {
    "fp8": r"\bFP8\b|Transformer Engine",
    # recommending bf16/fp16 (not naming it as a condition, "if the job computes in bf16")
    "bf16": r"lower precision|mixed precision|autocast|half precision|(use|to|switch to|in) (bf16|fp16|bfloat16)\b(?! or)(?!/fp16, not)",
    "tf32": r"\bTF32\b",
    "attention": r"attention",
    "dataloader": r"DataLoader|num_workers|feed the GPU faster",
    "cuda_graphs": r"CUDA graphs?\b(?! would not help)|reduce-overhead",
    "torch_compile": r"torch\.compile",
    "math_roof": r"math roof|less math per result|fewer FLOPs|tensor cores do this math",
    "fewer_bytes": r"fewer bytes|DRAM round trips|intermediates stay on chip",
    # a fused optimizer recommended to a job that already steps one (or has no optimizer)
    "fused_optimizer": r"fused optimi[sz]ers?|fused AdamW?\b|fused=True|foreach",
    # PyTorch's own remedies named to a job with no PyTorch in it (JAX, CuPy, plain CUDA: issue 35)
    "pytorch_only": r"torch\.|PyTorch|DataLoader|num_workers|pin_memory|autocast|fused optimi[sz]ers?|channels_last",
}
# categories no hedge excuses: naming a framework the job does not use is wrong however it is conditioned
UNHEDGED = {"pytorch_only"}


def labels(folder: str = WORKLOADS) -> dict[str, dict[str, Any]]:
    """workload name -> its LABEL, read from the script's source (nothing is imported or run)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "zoo_*.py"))):
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LABEL" for t in node.targets):
                out[os.path.basename(path)[:-3]] = ast.literal_eval(node.value)
    return out


def _diagnosis(path: str, window: tuple[float, float], gpus: int = 1,
               framework: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary, diagnosis dict) of a job holding ``gpus`` of the recorded GPUs over ``window``, as the epilog
    builds it (the communication workloads of issue 29 hold 2). ``framework``: what the daemon would have read from
    the workload's CUDA processes' maps (the recordings hold no maps: the label's framework stands for it)."""
    with tempfile.TemporaryDirectory() as d:
        trimmed = fromrecording.trimmed(path, os.path.join(d, "w.jsonl"), window)
        aggs, series = fromrecording.replay_job(trimmed, job_id=7, node="rec", gpus=gpus, with_series=True,
                                                start_t=VIRTUAL_T0)
        with open(trimmed, encoding="utf-8") as f:
            f.readline()
            first = json.loads(f.readline() or "{}").get("t")
    if framework:
        aggs["frameworks"] = [framework]
    s = jobsummary.node_summary(aggs, {"job_id": 7, "node": "rec", "series": phases.compact(series or {})})
    # the replay's clock starts at VIRTUAL_T0 with the first sweep kept: the offset maps recorded times onto it
    s["_offset"] = VIRTUAL_T0 - float(first) if isinstance(first, (int, float)) else None
    return s, s["diagnosis"]


VIRTUAL_T0 = 1.7637e9


def phase_estimate(label: dict[str, Any], s: dict[str, Any], diag: dict[str, Any],
                   window: tuple[float, float]) -> tuple[float | None, list | None]:
    """(the report's rate for the working phase that covers most of the workload's timed ``window`` (recorded
    times), its bracket): the rate while the job did that work (``phase["rate"]``); the working phases' estimate
    where the job is one phase or its phases carry no rate."""
    rate, off = label.get("rate"), s.get("_offset")
    best = None
    if off is not None and rate in ("tflops", "gbps"):
        lo, hi = window[0] + off, window[1] + off
        for p in diag.get("phases") or []:
            if p.get("rate"):
                over = min(p["end"], hi) - max(p["start"], lo)
                if over > 0 and (best is None or over > best[0]):
                    best = (over, p["rate"])
    if best is None:
        return estimate(label, s, diag)
    r = best[1]
    if rate == "gbps":
        return r.get("dram_gbps"), None
    est, job_bracket = estimate(label, s, diag)
    val = r.get("value")
    if val is None or not est or not job_bracket:
        return val, None
    return val, [round(val * job_bracket[0] / est, 1), round(val * job_bracket[1] / est, 1)]


def average_estimate(label: dict[str, Any], s: dict[str, Any], diag: dict[str, Any]) -> tuple[float | None, list | None]:
    """(the report's job average of the rate, its bracket): over the whole job, start-up and idle included
    (``roofline.job_average``; the roofline itself where the job is one phase)."""
    avg = (diag.get("roofline") or {}).get("job_average")
    est, bracket = estimate(label, s, diag)
    if not avg or label.get("rate") not in ("tflops", "gbps"):
        return est, bracket
    val = avg.get("rate") if label["rate"] == "tflops" else avg.get("dram_gbps")
    if label["rate"] == "tflops" and val is not None and est and bracket:
        return val, [round(val * bracket[0] / est, 1), round(val * bracket[1] / est, 1)]
    return val, None


# Where the counters cannot tell two cases apart the advice is to say so, name the measurement that would, and
# make what it suggests conditional on that measurement (issue 30). A text that does all three (``hedged``) may
# name a contradicting category in its statement of what is not known, in the measurement, or under its
# condition ("only if ... show bf16: FP8 can ..."); any other clause of it that matches is still a contradiction.
_CANNOT_TELL = re.compile(r"not measured|cannot (?:be )?told?\b|cannot tell|can't tell", re.I)
_MEASUREMENT = re.compile(r"Nsight|\bncu\b|\bnsys\b|\bsm__\w+|autocast|kernel names", re.I)
_CONDITION = re.compile(r"^\s*(?:only )?if\b", re.I)


def advice(diag: dict[str, Any]) -> list[str]:
    """Every advice text the report shows: recommendations, findings' fixes and notes."""
    return (list(diag.get("recommendations") or []) + [f.get("fix", "") for f in diag.get("findings") or []]
            + list(diag.get("notes") or []))


def hedged(text: str, rx: re.Pattern) -> bool:
    """Whether every clause of ``text`` that matches ``rx`` is a statement of what the counters cannot tell, the
    measurement that would, or a suggestion under a condition, in a text that says what is not measured and
    names the measurement."""
    if not (_CANNOT_TELL.search(text) and _MEASUREMENT.search(text)):
        return False
    clauses = [c for c in re.split(r"; |\. ", text) if rx.search(c)]
    return all(_CANNOT_TELL.search(c) or _MEASUREMENT.search(c) or _CONDITION.search(c) for c in clauses)


def contradictions(label: dict[str, Any], diag: dict[str, Any]) -> list[str]:
    """The advice texts (recommendations, findings' fixes, notes) that match a category the label says
    contradicts it, unless hedged (``hedged``: the counters cannot tell, the measurement named, the suggestion
    conditional on it)."""
    out = []
    for cat in label.get("contradicts", []):
        rx = re.compile(CONTRADICTS[cat], re.I)
        out += [f"{cat}: {t}" for t in advice(diag) if rx.search(t) and (cat in UNHEDGED or not hedged(t, rx))]
    return sorted(set(out))


def hedged_advice(label: dict[str, Any], diag: dict[str, Any]) -> list[str]:
    """The advice texts that name a contradicting category only as ``hedged`` allows (listed, not counted)."""
    out = []
    for cat in label.get("contradicts", []):
        rx = re.compile(CONTRADICTS[cat], re.I)
        out += [f"{cat}: {t}" for t in advice(diag) if rx.search(t) and cat not in UNHEDGED and hedged(t, rx)]
    return sorted(set(out))


def estimate(label: dict[str, Any], s: dict[str, Any], diag: dict[str, Any]) -> tuple[float | None, list | None]:
    """(the diagnosis's estimate of the rate the label names, its stated bracket or None).

    TFLOP/s: the estimate for the kind of math in evidence (``roofline.kinds[kind]``) where the diagnosis
    gives one, else its ``tflops``; DRAM GB/s; PCIe GB/s (tx + rx) from the summary.
    """
    roof = diag.get("roofline") or {}
    rate = label.get("rate")
    if rate == "tflops":
        kinds, kind = roof.get("kinds") or {}, roof.get("kind")
        if isinstance(kinds.get(kind), (list, tuple)) and len(kinds[kind]) > 1:
            return kinds[kind][1], roof.get("bracket")
        return roof.get("tflops"), roof.get("bracket")
    if rate == "gbps":
        return roof.get("dram_gbps"), None
    if rate == "pcie_gbps":
        bps = (s.get("job") or {}).get("pcie_bps")
        return (bps / 1e9 if bps is not None else None), None
    return None, None


def judged_error_pct(got: float, est: float | None, bracket: list | None) -> float | None:
    """The error judged against the stated error: to the point estimate, or 0 inside a stated bracket
    [low, high] and the distance to its nearer end outside it."""
    if est is None or not got:
        return None
    if bracket and len(bracket) == 2 and bracket[0] is not None and bracket[1] is not None:
        lo, hi = float(bracket[0]), float(bracket[1])
        if lo <= got <= hi:
            return 0.0
        return 100.0 * ((lo if got < lo else hi) - got) / got
    return 100.0 * (est - got) / got


def stated_error_pct(dtype: str) -> float:
    """The error the diagnosis states for a datatype's estimate (a per-datatype table where roofline has one)."""
    by = getattr(roofline, "ERROR_PCT_BY_DTYPE", None)
    if isinstance(by, dict) and dtype in by:
        return float(by[dtype])
    return float(roofline.ERROR_PCT)


def job_end(ach: dict[str, Any]) -> float:
    """Where the workload's job ends: its timed work, an idle tail after it (``t_idle_end``), or working phases
    after the timed one (``t_job_end``: a multi-phase job's evaluation and checkpoint)."""
    return max(float(ach.get(k, 0.0)) for k in ("t_end", "t_idle_end", "t_job_end"))


def is_app(workload: str) -> bool:
    """Whether a workload is one of the real-application zoo's (``zoo_app_*``, issue 35)."""
    return workload.startswith("zoo_app_")


def evaluate(path: str, labs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """One recording's row: label, class, contradictions, estimate vs achieved; None when not a zoo workload."""
    wl = fromrecording.workload(path) or ""
    label = labs.get(wl)
    if label is None:
        return None
    ach = fromrecording.achieved(path)
    rec = fromrecording.load_recording(path)
    gpu = (rec.header.get("gpus") or [{}])[0].get("name") or "?"
    start = float(ach.get("t_proc", ach.get("t_start", 0.0)))
    end = job_end(ach)
    # a sweep's rates cover the interval before it: the job window starts one interval before t_proc
    ngpu = int(label.get("gpus", 1))
    s_job, diag = _diagnosis(path, (start - rec.interval_s, end + rec.interval_s), ngpu, label.get("framework"))
    row: dict[str, Any] = {"file": os.path.basename(path), "workload": wl, "gpu": gpu, "gpus": ngpu, "label": label["class"],
                           "dtype": label["dtype"], "kind": label["kind"], "framework": label["framework"],
                           "class": diag.get("class"), "busy_class": diag.get("busy_class"),
                           "phases": [p.get("class") for p in diag.get("phases") or []],
                           "recommendations": list(diag.get("recommendations") or []),
                           "contradicts": contradictions(label, diag), "hedged": hedged_advice(label, diag),
                           "rate": label.get("rate"),
                           "exact": bool(label.get("exact", True)), "achieved": None, "estimate": None, "error_pct": None,
                           "bracket": None, "judged_error_pct": None, "stated_error_pct": stated_error_pct(label["dtype"]),
                           "report_estimate": None, "report_bracket": None, "report_judged_error_pct": None,
                           "activity": {}}
    rate = label.get("rate")
    if rate and rate in ach:
        t0 = float(ach.get("t_switch", ach["t_start"]))
        s_w, d_w = _diagnosis(path, (t0, float(ach["t_end"])), ngpu, label.get("framework"))
        est, bracket = estimate(label, s_w, d_w)
        got = float(ach[rate])
        g = (s_w.get("gpus") or [{}])[0]
        stated = (d_w.get("roofline") or {}).get("kind_error_pct") if rate == "tflops" else None
        # what the job's report says: the rate of its working phase over the workload's timed work, and its average
        rep, rep_bracket = phase_estimate(label, s_job, diag, (t0, float(ach["t_end"])))
        avg, avg_bracket = average_estimate(label, s_job, diag)
        row.update(achieved=got, estimate=est, bracket=bracket, activity={k: g.get(k) for k in ACTIVITY},
                   error_pct=100.0 * (est - got) / got if est is not None and got else None,
                   judged_error_pct=judged_error_pct(got, est, bracket), report_estimate=rep,
                   report_bracket=rep_bracket, report_judged_error_pct=judged_error_pct(got, rep, rep_bracket),
                   average_estimate=avg, average_bracket=avg_bracket,
                   average_judged_error_pct=judged_error_pct(got, avg, avg_bracket))
        if stated is not None:
            row["stated_error_pct"] = float(stated)
    return row


def run(folder: str = RECORDINGS) -> list[dict[str, Any]]:
    """Rows for every zoo recording in ``folder``."""
    labs = labels()
    rows = [evaluate(p, labs) for p in sorted(glob.glob(os.path.join(folder, "*.jsonl*")))]
    return [r for r in rows if r is not None]


def scores(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's bars: share classed as labelled, recordings with contradicting advice, per-datatype error
    (over the timed work, and as the job's report gives it)."""
    ok = sum(r["class"] == r["label"] for r in rows)
    by_dtype: dict[str, list[float]] = defaultdict(list)
    by_report: dict[str, list[float]] = defaultdict(list)
    by_average: dict[str, list[float]] = defaultdict(list)
    stated: dict[str, float] = {}
    for r in rows:
        if r["judged_error_pct"] is not None and r["exact"]:
            by_dtype[r["dtype"]].append(abs(r["judged_error_pct"]))
            stated[r["dtype"]] = min(stated.get(r["dtype"], 1e9), r["stated_error_pct"])
        if r.get("report_judged_error_pct") is not None and r["exact"]:
            by_report[r["dtype"]].append(abs(r["report_judged_error_pct"]))
        if r.get("average_judged_error_pct") is not None and r["exact"]:
            by_average[r["dtype"]].append(abs(r["average_judged_error_pct"]))
    return {"n": len(rows), "classed_as_labelled": ok, "classed_pct": 100.0 * ok / len(rows) if rows else 0.0,
            "with_contradictions": sum(bool(r["contradicts"]) for r in rows),
            "dtype_max_error_pct": {d: max(v) for d, v in sorted(by_dtype.items())},
            "dtype_max_report_error_pct": {d: max(v) for d, v in sorted(by_report.items())},
            "dtype_max_average_error_pct": {d: max(v) for d, v in sorted(by_average.items())},
            "over_stated_report_error": sorted(r["file"] for r in rows if r.get("report_judged_error_pct") is not None
                                               and r["exact"] and abs(r["report_judged_error_pct"]) > r["stated_error_pct"]),
            "dtype_stated_error_pct": dict(sorted(stated.items())),
            "over_stated_error": sorted(r["file"] for r in rows if r["judged_error_pct"] is not None and r["exact"]
                                        and abs(r["judged_error_pct"]) > r["stated_error_pct"]),
            "dtype_missing_estimate": sorted({r["dtype"] for r in rows if r["rate"] and r["exact"]
                                              and r["achieved"] is not None and r["estimate"] is None})}


def _cell(x: float | None, fmt: str = "{:.1f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def matrix_md(rows: list[dict[str, Any]], sc: dict[str, Any]) -> str:
    """Confusion matrix (label rows, class columns) and the per-recording classes."""
    labs = sorted({r["label"] for r in rows})
    classes = sorted({r["class"] for r in rows} | set(labs))
    count = Counter((r["label"], r["class"]) for r in rows)
    one = [r for r in rows if r.get("gpus", 1) == 1]
    ok1, okn = sum(r["class"] == r["label"] for r in one), sum(r["class"] == r["label"] for r in rows if r not in one)
    split = (f" Single-GPU zoo (issue 30's bar): {ok1} of {len(one)} ({100.0 * ok1 / len(one):.1f}%); 2-GPU communication "
             f"workloads (issue 29): {okn} of {len(rows) - len(one)}.") if one and len(one) < len(rows) else ""
    app = [r for r in rows if is_app(r["workload"])]
    if app:
        ok_app = sum(r["class"] == r["label"] for r in app)
        split += (f" Real-application zoo (zoo_app_*, issue 35): {ok_app} of {len(app)} "
                  f"({100.0 * ok_app / len(app):.1f}%), with contradicting advice: {sum(bool(r['contradicts']) for r in app)}.")
    out = [f"Classed as labelled: {sc['classed_as_labelled']} of {sc['n']} recordings ({sc['classed_pct']:.0f}%); "
           f"with advice that contradicts the label: {sc['with_contradictions']}.{split}", "",
           "| label \\ class | " + " | ".join(classes) + " |", "|---|" + "---|" * len(classes)]
    for lab in labs:
        out.append(f"| **{lab}** | " + " | ".join(str(count[(lab, c)] or "") for c in classes) + " |")
    out += ["", "| recording | set | label | class | phases | dtype | kind | framework |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = "" if r["class"] == r["label"] else " ✗"
        cls = r["class"] + (f" ({r['busy_class']})" if r["busy_class"] else "")
        out.append(f"| {r['file']} | {'app' if is_app(r['workload']) else 'zoo'} | {r['label']} | {cls}{mark} | "
                   f"{', '.join(r['phases']) or '-'} | {r['dtype']} | {r['kind']} | {r['framework']} |")
    return "\n".join(out)


def estimates_md(rows: list[dict[str, Any]], sc: dict[str, Any]) -> str:
    """Estimate vs achieved by datatype, then per recording: over the timed work and as the job's report gives it."""
    out = ["Error = (estimate - achieved) / achieved; where the diagnosis states a bracket [low, high] the judged "
           "error is 0 inside it and the distance to its nearer end outside. Rows marked ~ count a lower bound of "
           "their own bytes (sort, gather, FFT, ...) and are not judged. Three estimates: over the timed work (a "
           "window only the workload knows), and two the job's report gives, each labelled there: the rate of its "
           "working phase (``phases[].rate``, the phase that covers most of the workload's timed work; where the job "
           "is one phase, the estimate over its working time, start-up and idle tail set apart) and its job average "
           "(``roofline.job_average``: the whole job, start-up and idle stretches included). The working phase's is "
           "judged against the stated error (issue 35); the job average is shown, not judged: a job that idles half its "
           "time averages half its rate. PCIe rates are the job's mean over the window in all three.", "",
           "| datatype | recordings | max abs judged error, timed work | max abs judged error, job report's working "
           "phase | max abs error, job average (not judged) | stated error |", "|---|---|---|---|---|---|"]
    for d, mx in sc["dtype_max_error_pct"].items():
        n = sum(1 for r in rows if r["dtype"] == d and r["judged_error_pct"] is not None and r["exact"])
        out.append(f"| {d} | {n} | {mx:.1f}% | {_cell(sc['dtype_max_report_error_pct'].get(d))}% | "
                   f"{_cell(sc['dtype_max_average_error_pct'].get(d))}% | ±{sc['dtype_stated_error_pct'][d]:.0f}% |")
    if sc["dtype_missing_estimate"]:
        out.append(f"\nno estimate at all for: {', '.join(sc['dtype_missing_estimate'])}")
    out += ["", "| recording | dtype | rate | achieved | timed work | bracket | error | judged | working phase | "
            "bracket | error | judged | job average | bracket | error | stated |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["achieved"] is None:
            continue
        cells = []
        for i, (est, br) in enumerate(((r["estimate"], r["bracket"]), (r["report_estimate"], r["report_bracket"]),
                                       (r.get("average_estimate"), r.get("average_bracket")))):
            err = "n/a" if est is None else f"{100.0 * (est - r['achieved']) / r['achieved']:+.1f}%" + \
                ("" if r["exact"] else " ~")
            cells += [_cell(est), "-" if not br else f"{br[0]:.0f}-{br[1]:.0f}", err]
            if i < 2:
                cells.append(_cell(judged_error_pct(r["achieved"], est, br), "{:+.1f}%"))
        out.append(f"| {r['file']} | {r['dtype']} | {r['rate']} | {r['achieved']:.1f} | " + " | ".join(cells)
                   + f" | ±{r['stated_error_pct']:.0f}% |")
    return "\n".join(out)


def activity_md(rows: list[dict[str, Any]]) -> str:
    """Mean activity per recording over its timed work: the pipes and tensor kinds each workload used."""
    short = [k.removesuffix("_pct").removesuffix("_active") for k in ACTIVITY]
    out = ["Mean % over the timed work (GPM through the nvml backend; '-' not offered).", "",
           "| recording | " + " | ".join(short) + " |", "|---|" + "---|" * len(short)]
    for r in rows:
        if r["activity"]:
            out.append(f"| {r['file']} | " + " | ".join(_cell(r["activity"].get(k)) for k in ACTIVITY) + " |")
    return "\n".join(out)


def contradictions_md(rows: list[dict[str, Any]]) -> str:
    """Every advice text (recommendation, finding's fix, note) that contradicts its recording's label, then those
    that name a contradicting category only hedged: the counters cannot tell, the measurement named, the
    suggestion conditional on it."""
    out = [f"{sum(bool(r['contradicts']) for r in rows)} of {len(rows)} recordings get advice that contradicts "
           "their label (category: advice; recommendations, findings' fixes and notes scanned).", ""]
    for r in rows:
        if r["contradicts"]:
            out.append(f"- **{r['file']}** (label {r['label']}, {r['dtype']}; classed {r['class']}):")
            out += [f"  - {c}" for c in r["contradicts"]]
    hedged_rows = [r for r in rows if r.get("hedged")]
    out += ["", f"{len(hedged_rows)} recordings get advice that names a contradicting category only where it says "
            "what the counters cannot tell, names the measurement that would, and makes the suggestion "
            "conditional on it (not counted):", ""]
    for r in hedged_rows:
        out.append(f"- **{r['file']}** (label {r['label']}, {r['dtype']}): " + "; ".join(
            sorted({c.split(':')[0] for c in r["hedged"]})))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the scores; write the three tables with --out."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="folder for matrix.md, estimates.md, contradictions.md, activity.md")
    a = p.parse_args(argv)
    rows = run()
    sc = scores(rows)
    head = ("Made by `PYTHONPATH=. python benchmarks/zoo_matrix.py --out benchmarks/results/zoo` from the "
            "recordings in tests/data/recordings/zoo (see its README).\n\n")
    docs = {"matrix.md": matrix_md(rows, sc), "estimates.md": estimates_md(rows, sc),
            "contradictions.md": contradictions_md(rows), "activity.md": activity_md(rows)}
    print(docs["matrix.md"].splitlines()[0])
    print(docs["estimates.md"])
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        for name, text in docs.items():
            with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
                f.write(head + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
