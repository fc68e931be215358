"""Sampler backends: the replay mechanics, the backend registry, and one contract test all backends pass.

The nvml backend is validated on real GPUs (``benchmarks/sampler_cost.py`` and the committed
recordings in ``tests/data/recordings/``), not here: this machine has no GPU.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from gpuperf import config
from gpuperf.samplers import open_sampler, probe
from gpuperf.samplers.base import GpuSample, SamplerUnavailable
from gpuperf.samplers.replay import ReplaySampler, load_recording


def write_recording(path: Path, sweeps: int = 5, gpus: int = 2, interval: float = 1.0,
                    energy: dict[int, dict[str, float]] | None = None, gz: bool = False) -> Path:
    """A small recording in the contract's format; sweep i has power 100+i W and util i %."""
    lines = [{"schema": "gpuperf.recording.v1", "how": "unit test", "interval_s": interval,
              "gpus": [{"index": g, "name": "X", "uuid": f"GPU-{g}", "memory_total_mib": 1000, "power_limit_w": 700}
                       for g in range(gpus)], "workload": "synthetic", "host": "h"}]
    t0 = 1_700_000_000.0
    for i in range(sweeps):
        line = {"t": t0 + i * interval,
                "samples": [GpuSample(gpu=g, t=t0 + i * interval, power_w=100.0 + i, util_gpu_pct=float(i),
                                      processes=[{"pid": 4242, "mem_mib": 10.0}]).to_dict() for g in range(gpus)]}
        if energy and i in energy:
            line["energy_j"] = energy[i]
        lines.append(line)
        if i == 1:
            lines.append({"t": t0 + i * interval, "host": {"cpu_pct": 5}})  # host lines are skipped
    text = "".join(json.dumps(x) + "\n" for x in lines)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_replay_returns_sweeps_in_order_restamped_to_now(tmp_path):
    s = ReplaySampler(str(write_recording(tmp_path / "r.jsonl")), speed=60)
    before = time.time()
    got = [s.sample() for _ in range(5)]
    assert [sw[0].util_gpu_pct for sw in got] == [0, 1, 2, 3, 4]
    assert all(before <= x.t <= time.time() for sw in got for x in sw)
    assert s.interval_s == pytest.approx(1 / 60)
    assert s.sample() == [] and s.finished


def test_replay_virtual_clock_loops_and_keeps_time_and_energy_consistent(tmp_path):
    # energy readings at the first and last sweep: 1000 J then 1400 J over 4 s
    rec = write_recording(tmp_path / "r.jsonl.gz", energy={0: {"0": 1000.0, "1": 5.0}, 4: {"0": 1400.0, "1": 9.0}}, gz=True)
    s = ReplaySampler(str(rec), loop=True, clock="virtual", start_t=0.0)
    s.sample()
    assert s.read_energy()[0] == pytest.approx(1000.0)
    ts = [s.sample()[0].t for _ in range(4)]
    assert ts == [1.0, 2.0, 3.0, 4.0]
    assert s.read_energy()[0] == pytest.approx(1400.0)
    # one more pass: the wrap gap is one recording interval at the first sweep's power (100 W)
    for _ in range(5):
        sw = s.sample()
    assert sw[0].t == pytest.approx(9.0)
    assert s.read_energy()[0] == pytest.approx(1400.0 + 100.0 + 400.0)
    # 30 days of 1 s sweeps would be this loop 2.6 M times; energy keeps growing monotonically
    last = s.read_energy()[0]
    for _ in range(1000):
        s.sample()
        now = s.read_energy()[0]
        assert now >= last
        last = now


def test_replay_energy_interpolates_between_readings(tmp_path):
    rec = write_recording(tmp_path / "r.jsonl", energy={0: {"0": 0.0}, 4: {"0": 40.0}})
    s = ReplaySampler(str(rec))
    vals = []
    for _ in range(5):
        s.sample()
        vals.append(s.read_energy()[0])
    assert vals == pytest.approx([0, 10, 20, 30, 40])


def test_replay_without_energy_readings_integrates_power(tmp_path):
    s = ReplaySampler(str(write_recording(tmp_path / "r.jsonl", sweeps=3)))
    for _ in range(3):
        s.sample()
    assert s.read_energy()[0] == pytest.approx(101.0 + 102.0)


def test_replay_drops_recorded_pids_unless_asked(tmp_path):
    rec = str(write_recording(tmp_path / "r.jsonl"))
    assert ReplaySampler(rec).sample()[0].processes == []
    assert ReplaySampler(rec, keep_processes=True).sample()[0].processes == [{"pid": 4242, "mem_mib": 10.0}]


def test_replay_spec_options_and_gpu_fanout(tmp_path):
    rec = write_recording(tmp_path / "r.jsonl", gpus=2)
    s = open_sampler(f"replay:{rec}?gpus=8&loop&clock=virtual&speed=100", config.defaults())
    assert s.gpu_count() == 8 and s.loop and s.clock == "virtual" and s.speed == 100
    sw = s.sample()
    assert [x.gpu for x in sw] == list(range(8))
    assert len(s.read_energy()) == 8
    with pytest.raises(SamplerUnavailable, match="unknown option"):
        open_sampler(f"replay:{rec}?sped=2")


@pytest.mark.parametrize("content, match", [
    ("", "no header"),
    ('{"schema": "other"}\n', "header schema"),
    ('{"schema": "gpuperf.recording.v1"}\n', "no sweeps"),
    ('{"schema": "gpuperf.recording.v1"}\n{"t": 1, "samples": [{"gpu": 0}]}\nnot json\n', ":3: not JSON"),
    ('{"schema": "gpuperf.recording.v1"}\n{"t": 2, "samples": []}\n{"t": 1, "samples": []}\n', "backwards"),
    ('{"schema": "gpuperf.recording.v1"}\n{"t": 2, "samples": [{"util_gpu_pct": 1}]}\n', ":2: bad sweep"),
])
def test_replay_bad_files_are_clear_errors(tmp_path, content, match):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(SamplerUnavailable, match=match):
        load_recording(str(p))


def test_replay_missing_file_is_unavailable(tmp_path):
    with pytest.raises(SamplerUnavailable, match="cannot open"):
        open_sampler(f"replay:{tmp_path}/nope.jsonl")


def test_unknown_backend_is_refused():
    with pytest.raises(SamplerUnavailable, match="unknown sampler backend"):
        open_sampler("bogus")
    assert probe("bogus") is not None
