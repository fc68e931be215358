"""The collective benchmark's timing and pinning without a GPU: a stand-in torch whose GPU is a
clock (a sleep holds it, each collective takes a fixed GPU time) and whose host issue costs a
settable time, so the queued timing's promise -- the GPU runs the collectives back to back, the host's
issue rate does not show -- is checked; the ranks' CPUs from gpuperf's affinity plan or even chunks."""

from __future__ import annotations

import types

import pytest

from gpuperf.env import interval as iv, ncclbench as nb, ncclworker as nw

REPO_NODES = "tests/data/nodes"


class FakeGpu:
    """One GPU stream on a host clock: work starts when both the host issued it and the GPU is free."""

    def __init__(self, host_per_op: float, gpu_per_op: float, hz: float = 1.5e9) -> None:
        self.host = 0.0      # the host's clock (what time.perf_counter returns)
        self.gpu = 0.0       # when the GPU's queue runs dry
        self.host_per_op, self.gpu_per_op, self.hz = host_per_op, gpu_per_op, hz
        self.sleeps: list[float] = []

    def enqueue(self, seconds: float) -> None:
        self.gpu = max(self.gpu, self.host) + seconds

    def op(self) -> None:
        self.host += self.host_per_op
        self.enqueue(self.gpu_per_op)

    def torch(self) -> types.SimpleNamespace:
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = True) -> None:
                self.t = 0.0

            def record(self) -> None:
                self.t = max(gpu.gpu, gpu.host)   # an event completes when the work before it has

            def synchronize(self) -> None:
                gpu.host = max(gpu.host, self.t)

            def elapsed_time(self, later: "Event") -> float:
                return (later.t - self.t) * 1e3

        def sleep(cycles: int) -> None:
            gpu.sleeps.append(cycles / gpu.hz)
            gpu.enqueue(cycles / gpu.hz)

        return types.SimpleNamespace(cuda=types.SimpleNamespace(Event=Event, _sleep=sleep))


@pytest.fixture
def gpu(monkeypatch) -> FakeGpu:
    g = FakeGpu(host_per_op=40e-6, gpu_per_op=10e-6)
    monkeypatch.setattr(nw, "time", types.SimpleNamespace(perf_counter=lambda: g.host))
    return g


def test_launched_timing_reads_the_hosts_issue_rate_and_queued_reads_the_gpus(gpu: FakeGpu) -> None:
    tm = nw.Timers(gpu.torch(), cuda=True)
    assert tm.sleep_hz == pytest.approx(gpu.hz)                     # calibrated from the sleep kernel itself
    assert tm.launched(gpu.op, 100) / 100 == pytest.approx(40e-6, rel=0.01)   # the host's 40 us, not NCCL's 10 us
    assert tm.host_per_op == pytest.approx(40e-6)
    assert tm.queued(gpu.op, 100) / 100 == pytest.approx(10e-6)     # the GPU's own time
    assert tm.starved == 0 and gpu.sleeps[-1] > 101 * 40e-6          # slept longer than the host took to issue


def test_a_host_slower_than_expected_takes_the_repeat_again_with_a_longer_sleep(gpu: FakeGpu) -> None:
    tm = nw.Timers(gpu.torch(), cuda=True)
    tm.launched(gpu.op, 10)
    gpu.host_per_op = 200e-6      # the host slows down (another process, a frequency drop) after sizing
    assert tm.queued(gpu.op, 100) / 100 == pytest.approx(10e-6)
    assert tm.starved >= 1 and gpu.sleeps[-1] > gpu.sleeps[-2]


def test_no_sleep_kernel_or_no_gpu_falls_back_to_launched(gpu: FakeGpu) -> None:
    t = gpu.torch()
    del t.cuda._sleep
    tm = nw.Timers(t, cuda=True)
    assert tm.queued(gpu.op, 50) / 50 == pytest.approx(40e-6, rel=0.01)
    cpu = nw.Timers(gpu.torch(), cuda=False)
    assert cpu.launched(gpu.op, 5) == pytest.approx(5 * 40e-6)       # wall clock


def test_calls_per_repeat_aims_at_the_target_within_bounds() -> None:
    assert nw.calls_per_repeat(10e-6, 0.005, 500) == 500
    assert nw.calls_per_repeat(100e-6, 0.005, 500) == 50
    assert nw.calls_per_repeat(0.1, 0.005, 500) == 2
    assert nb.busbw_gbps(1_000_000_000, 1.0, 2, "allgather/launched") == pytest.approx(0.5)


def test_ranks_are_pinned_next_to_their_gpus_or_in_even_chunks(monkeypatch) -> None:
    monkeypatch.setattr(nb.os, "sched_getaffinity", lambda pid: set(range(128)))
    cpus = nb.rank_cpus(4, f"{REPO_NODES}/pcie-l40s-2s")   # GPUs 0,1 on NUMA 0 (CPUs 0-31,64-95), 2,3 on NUMA 1
    assert len(cpus) == 4 and all(cpus)
    numa0 = set(range(0, 32)) | set(range(64, 96))
    assert set(cpus[0]) <= numa0 and set(cpus[1]) <= numa0 and not set(cpus[2]) & numa0
    assert not set(cpus[0]) & set(cpus[1])
    # one NUMA node (the lent H200 VMs): this process's CPUs in equal disjoint chunks
    assert nb.rank_cpus(2, f"{REPO_NODES}/h200x4-vm") == [list(range(64)), list(range(64, 128))]
    monkeypatch.setattr(nb.os, "sched_getaffinity", lambda pid: {0})
    assert nb.rank_cpus(2, f"{REPO_NODES}/h200x4-vm") == [[0], [0]]  # fewer CPUs than ranks: shared


def test_strict_bar_needs_the_lower_bound_above_it_lenient_only_no_proven_loss() -> None:
    wide = iv.Interval(7, 1.0, 0.90, 1.11)
    assert not iv.below_bar(wide, 0.02) and not iv.clears_bar(wide, 0.02)
    assert iv.clears_bar(iv.Interval(7, 1.0, 0.981, 1.02), 0.02)
    assert iv.below_bar(iv.Interval(7, 0.9, 0.85, 0.97), 0.02)
    assert not iv.clears_bar(iv.Interval(1, 1.0, None, None), 0.02)


def test_ranks_take_a_starved_repeat_again_together(gpu: FakeGpu) -> None:
    """Ranks deciding alone would run different numbers of collectives and hang each other (seen on 2x H200):
    a rank whose own repeat was fine still takes it again when another rank says so."""
    asked: list[bool] = []
    other_rank_starved = iter([True, False])

    def agree(mine: bool) -> bool:
        asked.append(mine)
        return mine or next(other_rank_starved)

    tm = nw.Timers(gpu.torch(), cuda=True, agree=agree)
    tm.launched(gpu.op, 10)
    sleeps = len(gpu.sleeps)
    assert tm.queued(gpu.op, 100) / 100 == pytest.approx(10e-6)
    assert asked == [False, False] and tm.starved == 1 and len(gpu.sleeps) == sleeps + 2
