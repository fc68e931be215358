"""Where a benchmark job's wall time goes, from sbatch to COMPLETED, in consecutive segments (issue 29's cost run).

Every point is a wall-clock time (unix seconds) on the one host that runs controller, node and benchmark:
the benchmark's own clock around ``sbatch`` and when it saw COMPLETED; the timing wrappers' nanosecond stamps
around each hook (``gpu_job_cost.timing_hooks``: the wrapper runs in both modes, the hook only when gpuperf is
on); the batch script's first and last line (``gp-t script0|script1 <date +%s.%N>``); and what the workload
prints itself: each rank's process start, its wait for rank 0's store and when it could communicate
(``rankN: ... t_proc= t_wait= t_init=``), and rank 0's timed loop (``t_start= t_end=``).

The segments sum to the wall time, so a paired on/off difference per segment says where gpuperf's cost
lands and where the noise that hides it comes from. Pure functions: the benchmark feeds them text.
"""

from __future__ import annotations

import re
from typing import Mapping

# (segment, from point, to point), in the order a job passes them; consecutive, so they sum to the wall time
SEGMENTS = (("sbatch", "submit", "submitted"),            # the sbatch command (gpuperf's SPANK plugin in it)
            ("to_prolog", "submitted", "prolog0"),        # the scheduler's pass, the launch request
            ("prolog", "prolog0", "prolog1"),             # Prolog (the wrapper alone when off)
            ("to_script", "prolog1", "script0"),          # batch step launched
            ("to_python", "script0", "proc"),             # srun: step, SPANK, TaskProlog, exec of the ranks
            ("python_init", "proc", "init"),              # PyTorch import, CUDA device, the ranks' rendezvous
            ("to_loop", "init", "loop0"),                 # NCCL's communicator (first collective), warm-up
            ("loop", "loop0", "loop1"),                   # the timed all-reduce loop (fixed seconds)
            ("to_script_end", "loop1", "script1"),        # process group down, ranks exit, srun returns
            ("to_epilog", "script1", "epilog0"),          # step end reported, the node told to clean up
            ("epilog", "epilog0", "epilog1"),             # Epilog (the wrapper alone when off)
            ("to_completed", "epilog1", "completed"))     # the controller marks it, the benchmark's poll sees it
# the wall times: sbatch to COMPLETED (queue wait in); the job's own, as Slurm counts Start (at allocation,
# where the Prolog starts with PrologFlags=Alloc) to End, here to COMPLETED as the poll sees it (the Epilog in);
# and the node's, Prolog start to Epilog end (ns clocks on both sides)
WALLS = (("wall", "submit", "completed"), ("run_wall", "prolog0", "completed"), ("node_wall", "prolog0", "epilog1"))
POINT = re.compile(r"\bgp-t (script0|script1) (\d+(?:\.\d+)?)\b")
FIGURE = re.compile(r"\b(t_proc|t_wait|t_init|t_start|t_end)=([\d.]+)")


def hook_spans(log_text: str, job: int) -> list[tuple[str, int, int]]:
    """(hook, start ns, end ns) of each of ``job``'s lines ``JOB HOOK T0_NS T1_NS RC`` in the timing wrappers'
    log, in order; a line that does not read so is skipped."""
    out: list[tuple[str, int, int]] = []
    for line in log_text.splitlines():
        parts = line.split()
        if len(parts) != 5 or parts[0] != str(job):
            continue
        try:
            out.append((parts[1], int(parts[2]), int(parts[3])))
        except ValueError:
            continue
    return out


def hook_points(log_text: str, job: int) -> dict[str, float]:
    """``prolog0/1``, ``epilog0/1`` and ``taskprolog0/1`` (the first start, the last end over the job's tasks)
    from the timing wrappers' log."""
    out: dict[str, float] = {}
    for hook, t0_ns, t1_ns in hook_spans(log_text, job):
        if hook not in ("prolog", "epilog", "taskprolog"):
            continue
        t0, t1 = t0_ns / 1e9, t1_ns / 1e9
        out[hook + "0"] = min(out.get(hook + "0", t0), t0)
        out[hook + "1"] = max(out.get(hook + "1", t1), t1)
    return out


def output_points(text: str) -> dict[str, float]:
    """``script0/1`` from the batch script's stamps; ``proc`` (the first rank's process start), ``init`` (the
    last rank ready), ``wait`` (the longest wait for rank 0's store) and ``loop0/1`` from the workload's lines."""
    out: dict[str, float] = {}
    for name, value in POINT.findall(text):
        out[name] = float(value)
    procs, inits, waits = [], [], []
    for line in text.splitlines():
        figs = dict(FIGURE.findall(line))
        if re.match(r"\s*rank\d+:", line):
            procs += [float(figs["t_proc"])] if "t_proc" in figs else []
            inits += [float(figs["t_init"])] if "t_init" in figs else []
            waits += [float(figs["t_wait"])] if "t_wait" in figs else []
        elif "t_start" in figs and "t_end" in figs:
            out["loop0"], out["loop1"] = float(figs["t_start"]), float(figs["t_end"])
    if procs:
        out["proc"] = min(procs)
    if inits:
        out["init"] = max(inits)
    if waits:
        out["wait"] = max(waits)
    return out


def segments(points: Mapping[str, float]) -> dict[str, float | None]:
    """Seconds of each segment (None where a point is missing) and of each of WALLS: ``wall`` (submit to
    completed), ``run_wall`` (the job's start to completed) and ``node_wall`` (Prolog's start to Epilog's end)."""
    return {name: round(points[b] - points[a], 6) if a in points and b in points else None
            for name, a, b in (*SEGMENTS, *WALLS)}


def filled(segs: Mapping[str, float | None]) -> dict[str, float | None]:
    """``segs`` with any of WALLS it lacks (a run recorded before that wall was named) summed from its segments,
    which are consecutive; None where one of those is missing."""
    out = dict(segs)
    order = [name for name, _, _ in SEGMENTS]
    for name, a, b in WALLS:
        if out.get(name) is not None:
            continue
        first = next((n for n, x, _ in SEGMENTS if x == a), None)
        last = next((n for n, _, y in SEGMENTS if y == b), None)
        parts = [out.get(n) for n in order[order.index(first):order.index(last) + 1]] if first and last else [None]
        out[name] = round(sum(parts), 6) if all(v is not None for v in parts) else None
    return out
