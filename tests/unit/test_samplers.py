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

from gpuperf.files import config
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


# --- dcgm backend, against a stand-in of the DCGM bindings and hostengine -----------------------------

FAKES = Path(__file__).resolve().parent.parent / "fakes" / "dcgm_bindings"
REC = Path(__file__).resolve().parent.parent / "data" / "recordings" / "matmul_bf16-h100-80gb-hbm3.jsonl.gz"


def dcgm_values(s: dict) -> dict[int, object]:
    """A recorded GpuSample dict in DCGM's units (profiling fields are 0-1 ratios)."""
    from gpuperf.samplers.dcgm import DEVICE_FIELDS, PROF_FIELDS

    out: dict[int, object] = {}
    for fid, (name, scale) in {**DEVICE_FIELDS, **PROF_FIELDS}.items():
        if s.get(name) is not None:
            out[fid] = int(s[name]) if name == "throttle_reasons" else s[name] / scale
    return out


@pytest.fixture
def hostengine(monkeypatch):
    """The stand-in DCGM bindings (tests/fakes/README.md) on sys.path, hostengine up with two GPUs.

    NOT a real DCGM: it follows the public bindings' signatures and return shapes; no real
    hostengine was available to test against.
    """
    import sys

    monkeypatch.syspath_prepend(str(FAKES))
    import fake_hostengine as he

    he.reset()
    he.up = True
    sweep = next(sw for sw in load_recording(str(REC)).sweeps if sw[0].get("tensor_active_pct", 0) > 90)
    # DCGM gpu ids 0,1 are NVML indices 1,0: the backend must report NVML indices
    for gpu_id, nvml_index in ((0, 1), (1, 0)):
        he.gpus[gpu_id] = {**dcgm_values(sweep[0]), 52: nvml_index, 156: 1_000_000.0 * (gpu_id + 1)}
    he.gpus[1][155] = 123.0  # tell the GPUs apart
    yield he
    he.reset()
    for mod in ("pydcgm", "dcgm_structs", "dcgm_fields", "fake_hostengine"):
        sys.modules.pop(mod, None)


def test_dcgm_sample_matches_the_recorded_sample_it_was_fed(hostengine):
    from gpuperf.samplers.dcgm import DcgmSampler

    src = next(sw for sw in load_recording(str(REC)).sweeps if sw[0].get("tensor_active_pct", 0) > 90)[0]
    s = DcgmSampler()
    try:
        got = s.sample()
        assert [x.gpu for x in got] == [0, 1]
        by = {x.gpu: x for x in got}
        assert by[0].power_w == 123.0 and by[1].power_w == pytest.approx(src["power_w"])
        for name in ("tensor_active_pct", "sm_active_pct", "dram_active_pct", "util_gpu_pct", "mem_used_mib",
                     "sm_clock_mhz", "pcie_rx_bps"):
            assert getattr(by[1], name) == pytest.approx(src[name]), name
        assert by[1].throttle_reasons == src["throttle_reasons"]
        assert by[1].nvlink_tx_bps is None  # blank in DCGM -> None, never 0
        assert s.read_energy() == {1: pytest.approx(1000.0), 0: pytest.approx(2000.0)}
        watch = [c for c in hostengine.calls if c[0] == "watch"]
        assert [c[3] for c in watch] == [1_000_000] * 3     # device, profiling, per-kind: 1 s, in microseconds
        assert any(1004 in c[2] for c in watch) and any(155 in c[2] for c in watch)
    finally:
        s.close()
    assert hostengine.groups == {} and hostengine.field_groups == {}  # cleaned up in the hostengine


def test_dcgm_without_profiling_still_gives_device_fields(hostengine):
    from gpuperf.samplers.dcgm import DcgmSampler

    hostengine.prof_supported = False
    s = DcgmSampler()
    x = s.sample()[0]
    assert x.power_w is not None and x.util_gpu_pct is not None
    assert x.tensor_active_pct is None and x.sm_active_pct is None
    s.close()


def test_dcgm_maps_the_per_kind_fields_and_a_gpu_without_them_keeps_the_rest(hostengine):
    from gpuperf.samplers.dcgm import KIND_FIELDS, DcgmSampler

    assert {fid: name for fid, (name, _) in KIND_FIELDS.items()} == {
        1013: "tensor_imma_pct", 1014: "tensor_hmma_pct", 1015: "tensor_dfma_pct", 1016: "int_active_pct"}
    for g in hostengine.gpus.values():
        g.update({1013: 0.02, 1014: 0.55, 1015: 0.0, 1016: 0.125})
    s = DcgmSampler()
    x = s.sample()[0]
    s.close()
    assert (x.tensor_imma_pct, x.tensor_hmma_pct, x.tensor_dfma_pct, x.int_active_pct) == \
        pytest.approx((2.0, 55.0, 0.0, 12.5))
    assert x.tensor_dmma_pct is None                                 # DCGM has no DMMA field
    # a hostengine that cannot watch DFMA (pre-Hopper): the per-kind group is lost, not the profiling one
    hostengine.unsupported.add(1015)
    s = DcgmSampler()
    x = s.sample()[0]
    s.close()
    assert x.tensor_active_pct is not None and x.sm_active_pct is not None
    assert x.tensor_hmma_pct is None and x.int_active_pct is None    # None, never 0
    assert hostengine.field_groups == {}


def test_dcgm_probe_and_auto_choice(hostengine):
    from gpuperf.samplers import dcgm as dcgm_mod

    assert dcgm_mod.probe() is None
    assert "no hostengine at 10.0.0.9" in dcgm_mod.probe(address="10.0.0.9")
    assert open_sampler("auto").name == "dcgm"
    hostengine.up = False
    assert "no hostengine" in probe("dcgm")
    with pytest.raises(SamplerUnavailable, match="dcgm: hostengine at localhost"):
        open_sampler("dcgm")
    # auto falls through to nvml, which has no GPU here either: the error names both reasons
    with pytest.raises(SamplerUnavailable, match="dcgm: .*nvml: "):
        open_sampler("auto")


def test_dcgm_unix_socket_address(hostengine):
    hostengine.address = "/run/nvhe.sock"
    s = open_sampler("dcgm:unix:/run/nvhe.sock")
    assert s.gpu_count() == 2
    assert ("connect", "/run/nvhe.sock", 2000) in hostengine.calls
    s.close()


def test_dcgm_bindings_missing_is_unavailable():
    from gpuperf.samplers import dcgm as dcgm_mod

    assert "not importable" in dcgm_mod.probe()


# --- the contract every backend passes ---------------------------------------------------------------

# tensor activity by kind and the non-tensor pipes: percent of the interval, None where not offered
KIND_PCT = ("tensor_hmma_pct", "tensor_imma_pct", "tensor_dfma_pct", "tensor_dmma_pct",
            "fp16_active_pct", "fp32_active_pct", "fp64_active_pct", "int_active_pct")
KIND_VALUES = {"tensor_hmma_pct": 61.0, "tensor_imma_pct": 3.0, "tensor_dfma_pct": 7.5, "tensor_dmma_pct": 7.0,
               "fp16_active_pct": 1.5, "fp32_active_pct": 12.0, "fp64_active_pct": 4.0, "int_active_pct": 20.0}


def kinds_recording(path: Path) -> Path:
    """A 2-GPU recording where GPU 0's sampler offered the per-kind metrics and GPU 1's did not."""
    lines = [{"schema": "gpuperf.recording.v1", "how": "unit test", "interval_s": 1.0, "workload": "kinds",
              "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}, {"index": 1, "name": "NVIDIA A100-SXM4-80GB"}]}]
    for i in range(6):
        t = 1_700_000_000.0 + i
        lines.append({"t": t, "samples": [GpuSample(gpu=0, t=t, util_gpu_pct=100.0, sm_active_pct=90.0,
                                                    tensor_active_pct=70.0, **KIND_VALUES).to_dict(),
                                          GpuSample(gpu=1, t=t, util_gpu_pct=100.0, sm_active_pct=90.0,
                                                    tensor_active_pct=70.0).to_dict()]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture(params=["replay", "replay-kinds", "dcgm"])
def any_sampler(request, tmp_path):
    if request.param == "replay":
        s = open_sampler(f"replay:{REC}?loop")
    elif request.param == "replay-kinds":
        s = open_sampler(f"replay:{kinds_recording(tmp_path / 'k.jsonl')}?loop")
    else:
        he = request.getfixturevalue("hostengine")
        for g in he.gpus.values():
            g.update({fid: KIND_VALUES[name] / scale for fid, (name, scale) in _kind_fields().items()})
        s = open_sampler("dcgm")
    yield s
    s.close()


def _kind_fields():
    from gpuperf.samplers.dcgm import KIND_FIELDS

    return KIND_FIELDS


def test_every_backend_keeps_the_sampler_contract(any_sampler):
    s = any_sampler
    assert isinstance(s.name, str) and s.name
    for _ in range(3):
        before = time.time()
        sweep = s.sample()
        assert len(sweep) == s.gpu_count() > 0
        assert [x.gpu for x in sweep] == sorted({x.gpu for x in sweep})
        for x in sweep:
            assert isinstance(x, GpuSample)
            assert before - 1 <= x.t <= time.time() + 1
            for name in ("util_gpu_pct", "sm_active_pct", "tensor_active_pct", "dram_active_pct", *KIND_PCT):
                v = getattr(x, name)
                assert v is None or 0 <= v <= 100, (name, v)
            assert x.power_w is None or x.power_w >= 0
            assert GpuSample.from_dict(json.loads(json.dumps(x.to_dict()))) == x
    if s.name == "dcgm" or "k.jsonl" in getattr(s, "path", ""):
        # the backend carries tensor activity by kind and the integer pipe where it is offered
        assert all(getattr(sweep[0], k) == pytest.approx(KIND_VALUES[k]) for k in
                   ("tensor_hmma_pct", "tensor_imma_pct", "tensor_dfma_pct", "int_active_pct")), sweep[0]
    energy = s.read_energy()
    assert set(energy) == {x.gpu for x in sweep}
    assert all(v is None or v >= 0 for v in energy.values())


# --- recorder and the workload runner ---------------------------------------------------------------

def test_record_writes_a_replayable_recording_with_energy_at_both_ends(tmp_path):
    import io

    from gpuperf.samplers.record import record

    src = ReplaySampler(str(REC), clock="virtual", start_t=1000.0)
    buf = io.StringIO()
    head = {"schema": "gpuperf.recording.v1", "how": "test", "gpus": [{"index": 0}], "interval_s": 0.01}
    n = record(src, buf, seconds=0.2, interval_s=0.01, head=head)
    out = tmp_path / "r.jsonl"
    out.write_text(buf.getvalue())
    rec = load_recording(str(out))
    assert len(rec.sweeps) == n >= 3
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert "energy_j" in lines[1] and "energy_j" in lines[-1]
    assert all("energy_j" not in x for x in lines[2:-1])          # the costly counter only at the ends
    assert rec.offsets_s == pytest.approx(list(range(n)), abs=0.05)   # the sampler's (virtual) stamps kept
    assert [sw[0]["util_gpu_pct"] for sw in rec.sweeps] == \
        [sw[0]["util_gpu_pct"] for sw in load_recording(str(REC)).sweeps[:n]]


def test_record_stops_when_told():
    import io

    from gpuperf.samplers.record import record

    src = ReplaySampler(str(REC), clock="virtual", start_t=0.0)
    stop = [True]
    assert record(src, io.StringIO(), seconds=60, interval_s=1, head={"schema": "x"}, stop=stop) == 0


def _record_workloads():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "record_workloads.py"
    spec = importlib.util.spec_from_file_location("record_workloads", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_record_workloads_arguments_for_the_allreduce_recording(tmp_path):
    rw = _record_workloads()
    assert set(rw.available()) >= {"matmul_bf16", "membound", "idle", "tiny_kernels", "input_bound", "allreduce"}
    assert rw.parse_workloads(" allreduce ,idle") == ["allreduce", "idle"]
    for bad in ("", "allreduce,nope"):
        with pytest.raises(ValueError, match="unknown workload"):
            rw.parse_workloads(bad)
    assert rw.model_slug("NVIDIA H200") == "h200"
    assert rw.model_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    out = tmp_path / "allreduce-h200.jsonl.gz"
    rec, wl = rw.commands("allreduce", out, 40.0, 3.0, 3.0, 1.0, "4x H200")
    assert rec[1:3] == ["-m", "gpuperf.samplers.record"] and str(out) in rec
    assert float(rec[rec.index("--seconds") + 1]) > 46          # outlives lead + workload + tail
    # and a workload that runs its grace out (a long model build or compile before its timed work)
    slow, _ = rw.commands("allreduce", out, 5.0, 1.0, 1.0, 0.5, "1x H100", grace_s=100.0)
    assert float(slow[slow.index("--seconds") + 1]) > 5 + 1 + 1 + 100
    assert wl[1].endswith("benchmarks/workloads/allreduce.py") and wl[-2:] == ["--seconds", "40.0"]
    assert "workload: benchmarks/workloads/allreduce.py --seconds 40.0" in rec[-1]
    with pytest.raises(SystemExit):
        rw.main(["--out", str(tmp_path), "--workloads", "allreduce", "--seconds", "0"])


def test_allreduce_workload_always_disables_nvls():
    src = (Path(__file__).resolve().parents[2] / "benchmarks" / "workloads" / "allreduce.py").read_text()
    # set before torch is imported, and again in each spawned worker
    assert src.index('os.environ["NCCL_NVLS_ENABLE"] = "0"') < src.index("import torch")
    assert src.count('os.environ["NCCL_NVLS_ENABLE"] = "0"') == 2


# --- nvml backend decisions (the backend itself is validated on real GPUs) -----------------------------

def test_nvml_counter_requests_scope_nvlink_to_all_links_and_skip_pcie_under_gpm():
    from gpuperf.samplers.nvml import ALL_LINKS, counter_fields, per_link

    # GPM gives NVLink and PCIe rates for 0.075 ms; the NVLink counter call costs 1.33 ms per GPU
    assert counter_fields(has_nvlink=True, has_gpm=True) == []
    assert counter_fields(has_nvlink=True, has_gpm=False) == [(138, ALL_LINKS), (139, ALL_LINKS), (197, 0), (198, 0)]
    assert counter_fields(has_nvlink=False, has_gpm=True) == []
    assert counter_fields(has_nvlink=False, has_gpm=False) == [(197, 0), (198, 0)]
    assert per_link([(138, ALL_LINKS), (197, 0)], [0, 3]) == [(138, 0), (138, 3), (197, 0)]


def test_nvml_sum_fields_adds_links_and_drops_a_field_with_a_missing_link():
    from gpuperf.samplers.nvml import sum_fields

    req = [(138, 0), (138, 1), (139, 0), (139, 1)]
    assert sum_fields(req, [(138, 10.0), (138, 5.0), (139, 1.0), (139, None)]) == {138: 15.0}


def test_nvml_counter_rate():
    from gpuperf.samplers.nvml import counter_rate

    assert counter_rate(1000.0, 3000.0, 2.0, 1024.0) == 1024.0 * 1000.0
    assert counter_rate(None, 5.0, 1.0, 1.0) is None
    assert counter_rate(5.0, 4.0, 1.0, 1.0) is None      # reset (driver reload): unknown, not negative
    assert counter_rate(1.0, 2.0, 0.0, 1.0) is None


class _FakeGpmNvml:
    """The few pynvml names ``_Gpm`` uses; metric ids in ``offered`` answer, others fail as NotSupported."""

    NVML_GPM_METRICS_GET_VERSION = 1

    class NVMLError(Exception):
        value = 3

    def __init__(self, values: dict[int, float]):
        self.values = values

    def nvmlGpmSampleAlloc(self):
        return object()

    def nvmlGpmSampleGet(self, handle, sample):
        return 0

    def nvmlGpmSampleFree(self, sample):
        return 0

    def c_nvmlGpmMetricsGet_t(self):
        from types import SimpleNamespace

        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None,
                               metrics=[SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(98)])

    def nvmlGpmMetricsGet(self, req):
        for m in req.metrics[:req.numMetrics]:
            ok = m.metricId in self.values
            m.nvmlReturn, m.value = (0, self.values[m.metricId]) if ok else (3, 0.0)
        return req


@pytest.mark.parametrize("offered", ["all", "none"])
def test_nvml_gpm_reads_tensor_activity_by_kind_and_leaves_unoffered_metrics_none(monkeypatch, offered):
    from gpuperf.access import nvmlq
    from gpuperf.samplers.nvml import GPM_METRICS, _Gpm

    kinds = {4: 20.0, 6: 7.5, 7: 61.0, 8: 7.0, 9: 3.0, 11: 4.0, 12: 12.0, 13: 1.5}
    base = {2: 90.0, 5: 70.0, 10: 30.0}
    mod = _FakeGpmNvml({**base, **(kinds if offered == "all" else {})})
    monkeypatch.setattr(nvmlq, "_state", {"init": True, "error": None, "mod": mod})
    assert {GPM_METRICS[i][0] for i in kinds} == set(KIND_PCT)
    gpm = _Gpm(mod, handle=object(), nvlink=False)
    assert gpm.sweep() == {}                         # the first sample has nothing to compare with
    for _ in range(2):                               # the second sweep asks only what the GPU offered
        got = gpm.sweep()
        s = GpuSample(gpu=0, t=0.0, **got)
        if offered == "all":
            assert {k: getattr(s, k) for k in KIND_PCT} == KIND_VALUES
        else:
            assert all(getattr(s, k) is None for k in KIND_PCT) and s.tensor_active_pct == 70.0


def test_per_kind_metrics_reach_the_summary_as_per_gpu_means_and_none_where_missing(tmp_path):
    from gpuperf.diagnosis import jobsummary as summary
    from gpuperf.report import fromrecording

    aggs, _ = fromrecording.replay_job(str(kinds_recording(tmp_path / "k.jsonl")), job_id=3, node="n")
    s = summary.node_summary(aggs, {"job_id": 3, "node": "n"})
    by = {g["gpu"]: g for g in s["gpus"]}
    for k in KIND_PCT:
        assert by[0][k] == pytest.approx(KIND_VALUES[k]), k
        assert by[1][k] is None, k                    # the GPU lacked them: missing, never 0
        assert s["job"][k] == pytest.approx(KIND_VALUES[k]), k   # job mean over the GPUs that had it
