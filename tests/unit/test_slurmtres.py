"""Slurm's own GPU figures (gres/gpuutil, gres/gpumem) beside gpuperf's: parsing sacct's TRES text, the
report's line, and when the two disagree beyond Slurm's sampling (``gpuperf doctor``'s check)."""

from __future__ import annotations

from pathlib import Path

from gpuperf.commands import doctor_checks
from gpuperf.report import slurmtres

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "slurm" / "tres" / "steps_1gpu.txt"


def _rows() -> list[dict[str, str]]:
    return [dict(zip(slurmtres.FIELDS, ln.split("|", 3))) for ln in FIXTURE.read_text().splitlines()]


def _summary(util: float, mem_mib: float, seconds: float = 600.0, gpus: int = 1) -> dict:
    return {"start": 1000.0, "end": 1000.0 + seconds,
            "job": {"gpu_count": gpus, "util_gpu_pct": util, "mem_peak_mib": mem_mib}}


class _Sacct:
    def run(self, tool, *args, **kw):
        assert tool == "sacct" and "-P" in args
        return FIXTURE.read_text()


def test_figures_from_the_busiest_step_and_the_largest_peak():
    got = slurmtres.figures(_rows(), gpus=1)
    assert got == slurmtres.SlurmGpu(util_pct=85.0, mem_mib=12288.0)
    assert slurmtres.read(_Sacct(), 7001, 1) == got
    assert slurmtres.figures([{"TRESUsageInAve": "cpu=00:00:01,mem=4M", "TRESUsageInMax": "mem=4M"}], 1) is None


def test_the_report_line_puts_both_side_by_side():
    text = slurmtres.line(_summary(83.0, 12400.0), slurmtres.SlurmGpu(85.0, 12288.0))
    assert "GPU util 85% (gpuperf 83%)" in text and "12.0 GiB (gpuperf 12.1 GiB)" in text
    assert slurmtres.line(_summary(83.0, 12400.0), None) is None


def test_sampling_explains_small_gaps_not_large_ones_nor_a_higher_slurm_peak():
    slurm = slurmtres.SlurmGpu(85.0, 12288.0)
    assert slurmtres.disagreement(_summary(80.0, 12400.0), slurm) is None
    assert "GPU utilisation" in slurmtres.disagreement(_summary(30.0, 12400.0), slurm)
    # a short job: few Slurm samples, a wide allowance
    assert slurmtres.util_tolerance(60.0) > slurmtres.util_tolerance(3600.0) >= 5.0
    assert slurmtres.disagreement(_summary(50.0, 12400.0, seconds=60.0), slurm) is None
    assert "memory peak" in slurmtres.disagreement(_summary(85.0, 6000.0), slurm)
    # Slurm's multi-GPU figures are wrong before 24.05.1: never judged there
    assert slurmtres.disagreement(_summary(10.0, 100.0, gpus=2), slurm, (23, 11, 4)) is None


def test_doctor_warns_on_a_disagreement_and_is_silent_without_slurm_figures():
    assert doctor_checks.check_slurm_gpu({}) == []
    ok = doctor_checks.check_slurm_gpu({"slurm_gpu": {1: None, 2: None}})
    assert ok[0].status == "ok"
    bad = doctor_checks.check_slurm_gpu({"slurm_gpu": {1: None, 2: "GPU utilisation: Slurm 85%, gpuperf 30%"}})
    assert bad[0].status == "warn" and "job 2" in bad[0].detail and "1 of 2" in bad[0].detail
