"""GPU processes -> Slurm jobs (environ, ancestors, cgroup peers; never cgroup names), the mismatch
rule, and per-job host usage from procfs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gpuperf.daemon import hostusage
from gpuperf.daemon.attribution import (Attributor, Mismatches, mismatches, parse_cgroup, parse_environ_job,
                                        parse_stat)
from gpuperf.samplers.base import GpuSample


def test_parse_environ_job():
    assert parse_environ_job(b"PATH=/bin\0SLURM_JOB_ID=1234\0X=1\0") == 1234
    assert parse_environ_job(b"SLURM_JOBID=77\0") == 77
    assert parse_environ_job(b"SLURM_JOB_ID_X=3\0SLURM_JOB_IDX=4\0") is None
    assert parse_environ_job(b"SLURM_JOB_ID=abc\0") is None
    assert parse_environ_job(b"") is None


def test_parse_stat_with_hostile_command_name():
    line = "4242 (evil) (name 1) S 17 4242 4242 0 -1 4194560 " + " ".join(["0"] * 8) + " 20 0 1 0 987654 " + " ".join(["0"] * 30)
    assert parse_stat(line) == (17, 987654)
    assert parse_stat("garbage") is None


def test_parse_cgroup_v2_and_v1():
    assert parse_cgroup("0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n") == \
        "/system.slice/slurmstepd.scope/job_5/step_0/user/task_0"
    v1 = "12:cpuacct,cpu:/slurm/uid_0/job_9/step_batch\n11:memory:/slurm/uid_0/job_9/step_batch\n"
    assert parse_cgroup(v1) == "cpuacct,cpu:/slurm/uid_0/job_9/step_batch"
    assert parse_cgroup("") is None


def _spawn(env, *args):
    return subprocess.Popen(list(args) or ["/bin/sleep", "30"], env=env)


def test_real_processes_env_and_ancestor():
    # a job's process, and a child of it that cleared its environment (env -i)
    parent = subprocess.Popen(["/bin/sh", "-c", "/usr/bin/env -i /bin/sleep 30 & wait"],
                              env={"SLURM_JOB_ID": "4242", "PATH": "/usr/bin:/bin"})
    try:
        attr = Attributor()
        child = None
        end = time.time() + 5
        while time.time() < end and child is None:
            kids = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
            pids = kids.read_text().split() if kids.exists() else []
            child = int(pids[0]) if pids else None
            time.sleep(0.02)
        assert child is not None
        wait_env = time.time() + 5
        while b"SLURM_JOB_ID" in Path(f"/proc/{child}/environ").read_bytes() and time.time() < wait_env:
            time.sleep(0.02)              # still the forked shell, not yet exec'd env -i
        time.sleep(0.1)
        assert attr.job_of(parent.pid) == 4242
        assert b"SLURM_JOB_ID" not in Path(f"/proc/{child}/environ").read_bytes()
        assert attr.job_of(child) == 4242
        assert attr.job_of(999_999_999) is None
    finally:
        parent.kill()
        parent.wait()


def _fake_proc(root: Path, pid: int, ppid: int, environ: bytes, cgroup: str):
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (python3) S {ppid} 1 1 0 -1 0 " + " ".join(["0"] * 8) + " 20 0 1 0 5000 " + " ".join(["0"] * 30))
    (d / "environ").write_bytes(environ)
    (d / "cgroup").write_text(cgroup)


def test_cgroup_peer_names_the_job_without_parsing_names(tmp_path):
    # the cgroup is named by an opaque id (as Slurm 26's SLUIDs are): only a peer's environment says the job
    cg = "/system.slice/slurmstepd.scope/sluid_0c3f9a/step_0/user/task_0"
    _fake_proc(tmp_path, 100, 1, b"HOME=/\0", f"0::{cg}\n")                  # cleared env, parent init
    _fake_proc(tmp_path, 101, 1, b"SLURM_JOB_ID=55\0", f"0::{cg}\n")
    _fake_proc(tmp_path, 102, 1, b"", "0::/user.slice/sess-1\n")
    procs = tmp_path / "cg" / cg.lstrip("/")
    procs.mkdir(parents=True)
    (procs / "cgroup.procs").write_text("100\n101\n")
    (tmp_path / "cg" / "user.slice" / "sess-1").mkdir(parents=True)
    (tmp_path / "cg" / "user.slice" / "sess-1" / "cgroup.procs").write_text("102\n")
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    assert attr.job_of(100) == 55
    assert attr.job_of(102) is None


def test_pid_reuse_is_not_served_from_cache(tmp_path):
    _fake_proc(tmp_path, 200, 1, b"SLURM_JOB_ID=1\0", "0::/a\n")
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    assert attr.job_of(200) == 1
    d = tmp_path / "proc" / "200"
    (d / "stat").write_text((d / "stat").read_text().replace(" 5000 ", " 9000 "))   # new process, same pid
    (d / "environ").write_bytes(b"SLURM_JOB_ID=2\0")
    assert attr.job_of(200) == 2


def test_mismatch_rule():
    # allocated GPU: the job's own process is fine; another job's and a no-job process are not
    ms = mismatches(0, [(1, 10), (2, 11), (3, None)], [10])
    assert [(m.pid, m.job_id) for m in ms] == [(2, 11), (3, None)]
    # shared GPU: processes of either registered job are fine
    assert mismatches(0, [(1, 10), (2, 11)], [10, 11]) == []
    # unallocated GPU: any process is unaccounted
    assert [(m.pid, m.registered) for m in mismatches(1, [(5, 10)], [])] == [(5, ())]


def test_scan_jobs_real_process_usage():
    # 0.6 s of CPU, bounded by the child's own CPU clock (not wall time: a loaded machine would stretch
    # it), then a line on stdout says it is idle
    burn = subprocess.Popen(["/usr/bin/python3", "-c", "import time, sys\nwhile time.process_time()<0.6: pass\n"
                             "print('idle', flush=True)\ntime.sleep(30)"],
                            env={"SLURM_JOB_ID": "8080"}, stdout=subprocess.PIPE, text=True)
    try:
        assert burn.stdout.readline() == "idle\n"
        attr = Attributor()
        u = hostusage.scan_jobs(attr, {8080, 8081})
        assert set(u) == {8080, 8081} and u[8081].procs == {}
        (key, (cpu_s, _io, ppid)), = u[8080].procs.items()
        assert ppid == os.getpid()
        assert key.startswith(f"{burn.pid}:")
        assert 0.55 <= cpu_s <= 1.2  # /proc counts in clock ticks
        assert u[8080].rss_mib > 1.0
    finally:
        burn.kill()
        burn.wait()


def test_parse_stat_usage_fields():
    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S", "7", "1", "1", "0", "-1", "0", "0", "0", "0", "0", str(3 * ticks), str(ticks), str(5 * ticks), "0", "20", "0", "1",
              "0", "12345", "1000", "256"] + ["0"] * 17 + [str(2 * ticks)]
    u = hostusage.parse_stat_usage(9, "9 (x y) " + " ".join(fields))
    page_mib = os.sysconf("SC_PAGE_SIZE") / 2**20
    assert (u.ppid, u.start_ticks) == (7, 12345)
    assert u.cpu_s == pytest.approx(4.0) and u.children_cpu_s == pytest.approx(5.0) and u.iowait_s == pytest.approx(2.0)
    assert u.rss_mib == pytest.approx(256 * page_mib)


def test_net_counters_from_sysfs_fixture(tmp_path):
    stats = tmp_path / "class" / "net" / "eth0" / "statistics"
    stats.mkdir(parents=True)
    (stats / "rx_bytes").write_text("1000\n")
    (stats / "tx_bytes").write_text("2000\n")
    lo = tmp_path / "class" / "net" / "lo" / "statistics"
    lo.mkdir(parents=True)
    (lo / "rx_bytes").write_text("5\n")
    (lo / "tx_bytes").write_text("5\n")
    c = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    c.mkdir(parents=True)
    (c / "port_rcv_data").write_text("250\n")
    (c / "port_xmit_data").write_text("100\n")
    assert hostusage.net_counters(str(tmp_path)) == {"eth0": (1000.0, 2000.0), "mlx5_0:1": (1000.0, 400.0)}


def test_delay_accounting_switch(tmp_path):
    assert hostusage.delay_accounting(str(tmp_path)) is True          # older kernels: always on
    k = tmp_path / "sys" / "kernel"
    k.mkdir(parents=True)
    (k / "task_delayacct").write_text("0\n")
    assert hostusage.delay_accounting(str(tmp_path)) is False
    (k / "task_delayacct").write_text("1\n")
    assert hostusage.delay_accounting(str(tmp_path)) is True


def test_short_lived_children_count_through_their_parent():
    # three children of 0.2 s CPU each, all gone before the scan: only the shell is seen
    busy = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.2: pass"
    sh = subprocess.Popen(["/bin/sh", "-c", f"for i in 1 2 3; do /usr/bin/python3 -c '{busy}'; done; exec /bin/sleep 30"],
                          env={"SLURM_JOB_ID": "8090"})
    try:
        time.sleep(0.2)
        end = time.time() + 10
        while time.time() < end and Path(f"/proc/{sh.pid}/comm").read_text().strip() != "sleep":
            time.sleep(0.05)
        u = hostusage.scan_jobs(Attributor(), {8090})
        shell = [v for k, v in u[8090].procs.items() if k.startswith(f"{sh.pid}:")]
        assert len(u[8090].procs) == 1, u[8090].procs         # the children are gone
        assert shell[0][0] >= 0.55
    finally:
        sh.kill()
        sh.wait()


def test_a_process_of_another_user_cannot_claim_a_job_by_its_environment(tmp_path):
    # job 55 is registered to uid 1000; uid 1234 starts a GPU program with SLURM_JOB_ID=55 (its own job 66
    # in its parent's environment): the claim is refused and the process is attributed to its own job
    _fake_proc(tmp_path, 300, 299, b"SLURM_JOB_ID=55\0", "0::/a\n")
    _fake_proc(tmp_path, 299, 1, b"SLURM_JOB_ID=66\0", "0::/a\n")
    _fake_proc(tmp_path, 310, 1, b"SLURM_JOB_ID=55\0", "0::/b\n")      # the job's own process
    for pid, uid in ((300, 1234), (299, 1234), (310, 1000)):
        os.chown(tmp_path / "proc" / str(pid), uid, -1)
    uids = {55: 1000, 66: 1234}
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"), job_uid=uids.get)
    assert attr.job_of(300) == 66
    assert attr.job_of(310) == 55
    # without registrations (job_uid unset) the environment is all there is: the old behaviour
    assert Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg")).job_of(300) == 55


def test_a_huge_environment_is_scanned_in_bounded_chunks(tmp_path):
    big = b"".join(b"X%d=" % i + b"y" * 100_000 + b"\0" for i in range(60))        # ~6 MiB, as the kernel allows
    _fake_proc(tmp_path, 400, 1, big + b"SLURM_JOB_ID=77\0", "0::/a\n")
    _fake_proc(tmp_path, 401, 1, big * 2 + b"SLURM_JOB_ID=78\0", "0::/a2\n")       # past the bound: not read on
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    assert attr.job_of(400) == 77
    assert attr.job_of(401) is None


class _Gpu:
    def __init__(self) -> None:
        self.foreign: dict[int, tuple] = {}

    def note_foreign(self, pid: int, job_id: int | None, t: float) -> None:
        self.foreign.setdefault(pid, (job_id, t))


class _Agg:
    def __init__(self, gpu: int) -> None:
        self.gpus = {gpu: _Gpu()}

    def note_frameworks(self, names: list[str] | None) -> None:
        pass


class _Events:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def add_event(self, t: float, job: int | None, kind: str, data: dict) -> None:
        self.events.append((t, job, kind, data))


def test_a_process_gone_between_nvml_and_procfs_is_not_foreign_a_foreign_one_still_is(tmp_path):
    # recorded on a 4x H100 (suite at 52a714e): four one-GPU jobs side by side; the GEMM job's python
    # (pid 1637, GPU 0) exited 63 ms before Slurm saw the job complete, after NVML listed it at the job's last
    # sample (t 1795806715.193) and before the sweep read /proc/1637: the old code took "no /proc/1637/stat"
    # for "no job" and counted the GEMM job's own process as foreign (job None)
    gpus = {0: (1987000, 1637), 1: (1987001, 1658), 2: (1987002, 1638), 3: (1987004, 1639)}
    for job, pid in gpus.values():
        _fake_proc(tmp_path, pid, 1631, f"SLURM_JOB_ID={job}\0".encode(), f"0::/job_{job}/step_batch\n")
    _fake_proc(tmp_path, 900, 1, b"HOME=/\0", "0::/user.slice/sess-9\n")      # a process of no job
    attr = Attributor(proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cg"))
    running = {job: type("RJ", (), {"agg": _Agg(g)})() for g, (job, _) in gpus.items()}
    store, stats = _Events(), {"mismatches": 0}
    m = Mismatches(attr, running, store, stats)
    gpu_jobs = {g: [job] for g, (job, _) in gpus.items()}

    listed = {g: [pid] for g, (_, pid) in gpus.items()}        # what NVML lists on each GPU

    def sweep(t: float, extra: dict[int, list[int]] | None = None) -> None:
        samples = [GpuSample(gpu=g, t=t, processes=[{"pid": x} for x in pids + (extra or {}).get(g, [])])
                   for g, pids in listed.items()]
        m.check(t, samples, gpu_jobs, m.attribute(samples))

    t0 = 1795806714.693
    sweep(t0)
    assert stats["mismatches"] == 0 and not store.events
    # NVML's sample (the job's last) still lists pid 1637; procfs no longer has it when the sweep reads it
    shutil.rmtree(tmp_path / "proc" / "1637")
    sweep(t0 + 0.5)
    assert stats["mismatches"] == 0 and not store.events and not running[1987000].agg.gpus[0].foreign
    listed[0] = []                                               # NVML's next sample: the process has gone
    # a truly foreign process is still one, at first sight
    sweep(t0 + 1.0, {2: [900]})
    assert stats["mismatches"] == 1 and running[1987002].agg.gpus[2].foreign == {900: (None, t0 + 1.0)}
    assert store.events[-1][1:] == (1987002, "mismatch", {"gpu": 2, "pid": 900, "process_job": None, "registered": [1987002]})
    # a pid NVML keeps listing that procfs never shows (another pid namespace) is reported after the grace
    for k in range(12):
        sweep(t0 + 1.5 + 0.5 * k, {3: [950]})
    assert stats["mismatches"] == 2 and running[1987004].agg.gpus[3].foreign == {950: (None, t0 + 6.5)}
