"""Record a replay file with the nvml backend: header, one line per sweep, energy at start and end.

``python -m gpuperf.samplers.record --out FILE[.gz] --seconds N --interval 1 --workload NAME --how "..."``
Stops after N seconds or on SIGTERM/SIGINT, always closing the file with a final energy reading.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import signal
import socket
import sys
import time
from typing import IO, Any

from gpuperf import __version__
from gpuperf.access import nvmlq
from gpuperf.samplers.base import Sampler, SamplerUnavailable
from gpuperf.samplers.replay import SCHEMA


def header(sampler: Any, interval_s: float, workload: str, how: str) -> dict[str, Any]:
    """The recording's first line (CONTRACTS.md), with driver versions where NVML gives them."""
    h: dict[str, Any] = {"schema": SCHEMA, "how": how, "gpus": sampler.describe(), "interval_s": interval_s,
                         "workload": workload, "host": socket.gethostname(),
                         "recorded": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "gpuperf_version": __version__, "backend": sampler.name}
    try:
        m = nvmlq.nvml()
        h["driver_version"] = _text(nvmlq.query(m.nvmlSystemGetDriverVersion))
        h["nvml_version"] = _text(nvmlq.query(m.nvmlSystemGetNVMLVersion))
    except nvmlq.NvmlUnavailable:
        pass
    return h


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def open_out(path: str) -> IO[str]:
    """A text stream; gzip when the name ends in .gz."""
    return gzip.open(path, "wt", encoding="utf-8") if path.endswith(".gz") else open(path, "w", encoding="utf-8")


def record(sampler: Sampler, out: IO[str], seconds: float, interval_s: float, head: dict[str, Any],
           stop: list[bool] | None = None) -> int:
    """Write header and sweeps until ``seconds`` pass or ``stop[0]`` is set; returns sweeps written.

    A sweep that overruns the interval skips the next slot rather than queueing it.
    """
    stop = stop if stop is not None else [False]
    out.write(json.dumps(head) + "\n")
    start = time.monotonic()
    n, nxt, last = 0, start, None
    while not stop[0] and time.monotonic() - start < seconds:
        samples = sampler.sample()
        line: dict[str, Any] = {"t": samples[0].t if samples else time.time(),
                                "samples": [s.to_dict() for s in samples]}
        if n == 0:
            line["energy_j"] = _energy(sampler)
        last = line
        out.write(json.dumps(line) + "\n")
        n += 1
        nxt += interval_s
        now = time.monotonic()
        while nxt < now:  # overran: skip missed slots
            nxt += interval_s
        _sleep_until(nxt, stop)
    if last is not None and n > 1:
        # the closing energy reading belongs to one more sweep, so rates and energy line up
        samples = sampler.sample()
        out.write(json.dumps({"t": samples[0].t if samples else time.time(),
                              "samples": [s.to_dict() for s in samples], "energy_j": _energy(sampler)}) + "\n")
        n += 1
    out.flush()
    return n


def _energy(sampler: Sampler) -> dict[str, float]:
    return {str(k): v for k, v in sampler.read_energy().items() if v is not None}


def _sleep_until(deadline: float, stop: list[bool]) -> None:
    while not stop[0]:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.1))


def main(argv: list[str] | None = None) -> int:
    """Command line entry: record with the nvml backend."""
    p = argparse.ArgumentParser(prog="python -m gpuperf.samplers.record", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="recording to write (.jsonl or .jsonl.gz)")
    p.add_argument("--seconds", type=float, required=True, help="how long to record")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between sweeps")
    p.add_argument("--workload", default="", help="what ran on the GPUs (header)")
    p.add_argument("--how", default="", help="how the recording was made (header)")
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.interval <= 0:
        p.error("--seconds and --interval must be > 0")
    from gpuperf.samplers.nvml import NvmlSampler

    try:
        sampler = NvmlSampler()
    except SamplerUnavailable as e:
        print(f"record: {e}", file=sys.stderr)
        return 2
    stop = [False]

    def _stop(*_: Any) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        with open_out(a.out) as out:
            n = record(sampler, out, a.seconds, a.interval, header(sampler, a.interval, a.workload, a.how), stop)
    finally:
        sampler.close()
    print(f"record: {n} sweeps of {sampler.gpu_count()} GPU(s) -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
