"""A job's aggregates and series from a recording, the way the daemon would have folded it.

For tests, benchmarks and the demo: replays a recording (``replay`` backend, virtual clock) through
the daemon's streaming aggregates, so a summary built from it went through the same code as a
real job's.
"""

from __future__ import annotations

from typing import Any

from gpuperf.diagnosis import phases
from gpuperf.model.aggregates import JobAggregates
from gpuperf.samplers.replay import ReplaySampler, load_recording

# what the daemon's finalize reply carries for the phases (``diagnosis.phases.SERIES_FIELDS``), and power
SERIES_FIELDS = (*phases.SERIES_FIELDS, "power_w")


def replay_job(path: str, job_id: int = 1, node: str = "n1", gpus: int | None = None, start_t: float = 1.7637e9,
               loops: int = 1, with_series: bool = False, store: Any = None) -> tuple[dict[str, Any], dict[str, dict] | None]:
    """(aggregates dict, series or None) of a job that ran the recording ``loops`` times on ``gpus`` GPUs;
    ``store``: a daemon ``Store`` that keeps each sweep, as the daemon's does."""
    sampler = ReplaySampler(path, clock="virtual", loop=loops > 1, gpus=gpus, start_t=start_t)
    header = sampler.rec.header
    names = {int(g["index"]): g.get("name") for g in header.get("gpus", [])}
    recorded = sampler.rec.gpu_indices
    agg = JobAggregates.new(job_id, node, range(sampler.gpu_count()), start_t, sampler.rec.interval_s)
    for i, g in agg.gpus.items():
        g.name = names.get(recorded[i % len(recorded)])
    series: dict[str, dict] | None = {str(i): {"t": [], **{f: [] for f in SERIES_FIELDS}} for i in agg.gpus} \
        if with_series else None
    agg.energy_reading(sampler.read_energy(), start_t)
    n = len(sampler.rec.sweeps) * loops
    last_t = start_t
    for _ in range(n):
        sweep = sampler.sample()
        if not sweep:
            break
        last_t = sweep[0].t
        agg.add_sweep(last_t, sweep)
        if store is not None:
            store.in_transaction(store.add_samples, sweep)
        if series is not None:
            for s in sweep:
                ser = series[str(s.gpu)]
                ser["t"].append(s.t)
                for f in SERIES_FIELDS:
                    ser[f].append(getattr(s, f))
    agg.energy_reading(sampler.read_energy(), last_t)
    agg.end = last_t
    return agg.to_dict(), series


def node_judgement(path: str, cfg: Any, store: Any, job_id: int = 1, node: str = "n1", uid: int | None = None,
                   user: str | None = None, gpus: int | None = None,
                   start_t: float = 1.7637e9) -> tuple[dict[str, Any], dict[str, Any]]:
    """(aggregates, node summary as sent) of a job that ran the recording, judged as a node judges a job at its
    end: its sweeps kept in the daemon ``store``, the series the hand-over reads from it (``daemon.handover``),
    the summary the delivery writes into the job's dir under ``cfg.general.run_dir`` (``daemon.deliver``)."""
    import logging

    from gpuperf.daemon import deliver, handover

    aggs, _ = replay_job(path, job_id=job_id, node=node, gpus=gpus, start_t=start_t, store=store)
    taken: list[tuple[dict, dict]] = []
    hand = handover.Handover(store, lambda a, c: taken.append((a, c)), cfg.controller.series_points,
                             logging.getLogger("gpuperf.replay"))
    hand.deliver_finalised(aggs, {"job_id": job_id, "user": user, "uid": uid, "node": node, "exit_code": 0})
    done, summary = deliver.write(cfg, *taken[0])
    if summary is None:
        raise RuntimeError(f"{path}: no node summary: {'; '.join(done['errors'])}")
    return aggs, summary


def workload(path: str) -> str | None:
    """The workload label of a recording (its header's ``workload``)."""
    return load_recording(path).header.get("workload")


def workload_window(path: str) -> tuple[float, float] | None:
    """The timed loop's window (unix seconds) the workload stored in the header's ``achieved``, if any."""
    for fig in (load_recording(path).header.get("achieved") or {}).values():
        if isinstance(fig, dict) and isinstance(fig.get("t_start"), (int, float)) and isinstance(fig.get("t_end"), (int, float)):
            return float(fig["t_start"]), float(fig["t_end"])
    return None


def trimmed(path: str, dest: str, window: tuple[float, float] | None = None) -> str:
    """A copy of the recording with only the sweeps inside its workload window (whole when it has none).

    A sweep's rates cover the interval before it, so the first one kept is a full interval past the start.
    """
    import gzip
    import json

    win = window or workload_window(path)
    with gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    head = json.loads(lines[0])
    step = float(head.get("interval_s") or 1.0)
    keep = [ln for ln in lines[1:] if ln.strip() and (win is None or win[0] + step <= json.loads(ln).get("t", 0) <= win[1])]
    with open(dest, "w", encoding="utf-8") as f:
        f.write("\n".join([lines[0], *keep]) + "\n")
    return dest


def window_job(path: str, gpus: int | None = None,
               window: tuple[float, float] | None = None) -> tuple[dict[str, Any], dict[str, dict] | None]:
    """(node summary, series) of a job that held ``gpus`` of the recorded GPUs over the workload's window."""
    import os
    import tempfile

    from gpuperf.diagnosis import jobsummary

    with tempfile.TemporaryDirectory() as d:
        aggs, series = replay_job(trimmed(path, os.path.join(d, "window.jsonl"), window), job_id=7, node="rec", gpus=gpus,
                                  with_series=True)
    return jobsummary.node_summary(aggs, {"job_id": 7, "node": "rec"}), series


def achieved(path: str) -> dict[str, Any]:
    """The workload's own figures (its report lines, merged): tflops, gbps or busbw_gbps, and its window."""
    out: dict[str, Any] = {}
    for fig in (load_recording(path).header.get("achieved") or {}).values():
        if isinstance(fig, dict):
            out.update(fig)
    return out
