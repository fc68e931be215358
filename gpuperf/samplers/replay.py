"""The ``replay`` backend: plays a recording made with ``nvml`` on real GPUs (``docs/CONTRACTS.md``).

Two clocks:

- ``wall`` (default): each ``sample()`` returns the next sweep of the recording, in order, stamped
  with the current time, so the daemon can treat it as live. ``interval_s`` (recording interval /
  speed) is the pace at which to call it; the sampler itself never sleeps.
- ``virtual``: the stamps advance by the recording's own intervals from ``start_t``, independent of
  the wall clock, so a benchmark can replay 30 days in seconds (with ``loop=True``) and every
  time-weighted integral (energy, bytes) still comes out right.

Energy (``read_energy``) is the recorded counter interpolated between its readings, continued across
loops; where a recording has fewer than two readings for a GPU it is power integrated over time.
"""

from __future__ import annotations

import gzip
import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from gpuperf.samplers.base import GpuSample, SamplerUnavailable

SCHEMA = "gpuperf.recording.v1"


@dataclass
class Recording:
    """A parsed recording: its header and the sweeps (recording offsets from the first, seconds)."""

    header: dict[str, Any]
    offsets_s: list[float]
    sweeps: list[list[dict[str, Any]]]          # per sweep: GpuSample dicts without "t"
    energy_j: dict[int, list[float]]            # per recorded GPU: cumulative energy at each sweep
    interval_s: float

    @property
    def gpu_indices(self) -> list[int]:
        """Recorded GPU indices, in order."""
        return [int(g["index"]) for g in self.header.get("gpus", [])] or sorted(
            {int(s["gpu"]) for sw in self.sweeps for s in sw})


def _open_text(path: str):
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def load_recording(path: str) -> Recording:
    """Read and validate a recording (plain or gzip JSON lines); a bad one is SamplerUnavailable."""
    try:
        fh = _open_text(path)
    except OSError as e:
        raise SamplerUnavailable(f"replay: cannot open {path}: {e.strerror or e}") from None
    with fh:
        try:
            return parse_recording(fh, path)
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise SamplerUnavailable(f"replay: cannot read {path}: {e}") from None


def parse_recording(lines: Any, name: str = "<recording>") -> Recording:
    """Parse an iterable of JSON lines into a Recording; errors name the line."""
    header: dict[str, Any] | None = None
    times: list[float] = []
    sweeps: list[list[dict[str, Any]]] = []
    readings: dict[int, list[tuple[int, float]]] = {}   # gpu -> [(sweep index, energy_j)]
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SamplerUnavailable(f"replay: {name}:{lineno}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise SamplerUnavailable(f"replay: {name}:{lineno}: expected an object")
        if header is None:
            if obj.get("schema") != SCHEMA:
                raise SamplerUnavailable(f"replay: {name}:{lineno}: header schema is {obj.get('schema')!r}, expected {SCHEMA!r}")
            header = obj
            continue
        if "samples" not in obj:
            continue  # host lines and future line kinds
        try:
            t = float(obj["t"])
            samples = [_strip_t(s) for s in obj["samples"]]
        except (KeyError, TypeError, ValueError) as e:
            raise SamplerUnavailable(f"replay: {name}:{lineno}: bad sweep ({type(e).__name__}: {e})") from None
        if times and t < times[-1]:
            raise SamplerUnavailable(f"replay: {name}:{lineno}: time goes backwards ({t} < {times[-1]})")
        for gpu, e in (obj.get("energy_j") or {}).items():
            if e is not None:
                readings.setdefault(int(gpu), []).append((len(sweeps), float(e)))
        times.append(t)
        sweeps.append(samples)
    if header is None:
        raise SamplerUnavailable(f"replay: {name}: empty file, no header")
    if not sweeps:
        raise SamplerUnavailable(f"replay: {name}: header but no sweeps")
    interval = float(header.get("interval_s") or 1.0)
    offsets = [t - times[0] for t in times]
    energy = {g: _energy_series(g, offsets, sweeps, readings.get(g, []), interval) for g in _gpus_in(sweeps)}
    return Recording(header, offsets, sweeps, energy, interval)


def _strip_t(d: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(d, dict) or "gpu" not in d:
        raise ValueError("a sample needs 'gpu'")
    out = {k: v for k, v in d.items() if k != "t"}
    out["gpu"] = int(out["gpu"])
    return out


def _gpus_in(sweeps: list[list[dict[str, Any]]]) -> list[int]:
    return sorted({s["gpu"] for sw in sweeps for s in sw})


def _power_at(sweep: list[dict[str, Any]], gpu: int) -> float:
    for s in sweep:
        if s["gpu"] == gpu:
            return float(s.get("power_w") or 0.0)
    return 0.0


def _energy_series(gpu: int, offsets: list[float], sweeps: list[list[dict[str, Any]]],
                   readings: list[tuple[int, float]], interval: float) -> list[float]:
    """Cumulative energy at each sweep: recorded readings interpolated in time, else integrated power."""
    n = len(offsets)
    if len(readings) >= 2:
        out = [0.0] * n
        for (i0, e0), (i1, e1) in zip(readings, readings[1:]):
            span = offsets[i1] - offsets[i0]
            for i in range(i0, i1 + 1):
                frac = (offsets[i] - offsets[i0]) / span if span > 0 else 1.0
                out[i] = e0 + (e1 - e0) * frac
        first_i, first_e = readings[0]
        last_i, last_e = readings[-1]
        # outside the readings: continue with integrated power
        for i in range(first_i - 1, -1, -1):
            out[i] = out[i + 1] - _power_at(sweeps[i + 1], gpu) * (offsets[i + 1] - offsets[i])
        for i in range(last_i + 1, n):
            out[i] = out[i - 1] + _power_at(sweeps[i], gpu) * (offsets[i] - offsets[i - 1])
        return out
    out = [readings[0][1] if readings else 0.0]
    for i in range(1, n):
        out.append(out[-1] + _power_at(sweeps[i], gpu) * (offsets[i] - offsets[i - 1]))
    if readings:  # one reading: anchor the series on it
        shift = readings[0][1] - out[readings[0][0]]
        out = [e + shift for e in out]
    return out


class ReplaySampler:
    """Sampler protocol over a recording: in order, re-stamped, optionally looped and on virtual time."""

    name = "replay"

    def __init__(self, path: str, speed: float = 1.0, loop: bool = False, clock: str = "wall",
                 gpus: int | None = None, start_t: float | None = None, keep_processes: bool = False):
        if speed <= 0:
            raise ValueError(f"replay speed must be > 0, got {speed}")
        if clock not in ("wall", "virtual"):
            raise ValueError(f"replay clock must be 'wall' or 'virtual', got {clock!r}")
        self.path, self.speed, self.loop, self.clock = path, speed, loop, clock
        self.rec = load_recording(path)
        self._recorded = _gpus_in(self.rec.sweeps)
        # gpus=N replays N GPUs, GPU i playing recorded GPU i mod (recorded count): 8 GPUs from a 1-GPU file
        self._n = gpus if gpus else len(self._recorded)
        if self._n <= 0:
            raise SamplerUnavailable(f"replay: {path}: no GPUs in the recording")
        # recorded pids belong to the recording machine; here they would look like foreign processes
        self.keep_processes = keep_processes
        self._pos = -1                  # index of the last returned sweep
        self._loops = 0                 # completed passes
        self._vt = time.time() if start_t is None else float(start_t)
        self._finished = False

    # -- Sampler protocol ---------------------------------------------------------------------------

    def gpu_count(self) -> int:
        """GPUs replayed."""
        return self._n

    def describe(self) -> list[dict[str, Any]]:
        """Static facts of each replayed GPU, from the recording's header (GPU i plays recorded i mod n)."""
        meta = {int(g["index"]): g for g in self.rec.header.get("gpus", []) if isinstance(g, dict) and "index" in g}
        out = []
        for i in range(self._n):
            g = meta.get(self._recorded[i % len(self._recorded)], {})
            out.append({"index": i, "name": g.get("name"), "uuid": g.get("uuid"),
                        "memory_total_mib": g.get("memory_total_mib"), "power_limit_w": g.get("power_limit_w")})
        return out

    @property
    def interval_s(self) -> float:
        """Wall seconds between calls that play the recording at ``speed``."""
        return self.rec.interval_s / self.speed

    @property
    def finished(self) -> bool:
        """True once a non-looping replay has returned its last sweep and been asked again."""
        return self._finished

    def sample(self) -> list[GpuSample]:
        """The next sweep, in order; ``[]`` once a non-looping replay is over."""
        nxt = self._pos + 1
        if nxt >= len(self.rec.sweeps):
            if not self.loop:
                self._finished = True
                return []
            self._loops, nxt = self._loops + 1, 0
            step = self.rec.interval_s  # the gap between the end of one pass and the start of the next
        else:
            step = self.rec.offsets_s[nxt] - self.rec.offsets_s[self._pos] if self._pos >= 0 else 0.0
        self._pos = nxt
        if self.clock == "virtual":
            self._vt += step
            t = self._vt
        else:
            t = time.time()
        by_gpu = {s["gpu"]: s for s in self.rec.sweeps[nxt]}
        out = []
        for i in range(self._n):
            d = by_gpu.get(self._recorded[i % len(self._recorded)])
            if d is None:
                continue  # that GPU missed this sweep in the recording
            kw = dict(d)
            kw["gpu"], kw["t"] = i, t
            kw["processes"] = [dict(p) for p in d.get("processes", [])] if self.keep_processes else []
            out.append(GpuSample.from_dict(kw))
        return out

    def read_energy(self) -> dict[int, float | None]:
        """Cumulative energy per GPU at the replay position (recorded counter, continued across loops)."""
        pos = max(self._pos, 0)
        out: dict[int, float | None] = {}
        for i in range(self._n):
            g = self._recorded[i % len(self._recorded)]
            series = self.rec.energy_j.get(g)
            if not series:
                out[i] = None
                continue
            per_pass = series[-1] - series[0] + _power_at(self.rec.sweeps[0], g) * self.rec.interval_s
            out[i] = series[pos] + self._loops * per_pass
        return out

    def close(self) -> None:
        """Nothing to release."""


def from_spec(arg: str, speed: float = 1.0) -> ReplaySampler:
    """Build from the part after ``replay:``: ``FILE[?speed=60&loop=1&clock=virtual&gpus=8&processes=1]``."""
    path, _, query = arg.partition("?")
    if not path:
        raise SamplerUnavailable("replay: no file given (use replay:FILE)")
    opts = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    known = {"speed", "loop", "clock", "gpus", "processes"}
    unknown = set(opts) - known
    if unknown:
        raise SamplerUnavailable(f"replay: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
    try:
        return ReplaySampler(
            path,
            speed=float(opts.get("speed", speed)),
            loop=_truthy(opts.get("loop", "0")),
            clock=opts.get("clock", "wall"),
            gpus=int(opts["gpus"]) if "gpus" in opts else None,
            keep_processes=_truthy(opts.get("processes", "0")),
        )
    except ValueError as e:
        raise SamplerUnavailable(f"replay: {e}") from None


def _truthy(v: str) -> bool:
    return v.lower() in ("", "1", "true", "yes", "on")
