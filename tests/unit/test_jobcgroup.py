"""The job's CPU time from its cgroup (``gpuperf.daemon.jobcgroup``): layouts of cgroup v1, v2 and a
hybrid host built as files in a temp dir, and how the host aggregate combines it with the process scan.
The real thing (Slurm's own cgroups on the test cluster) is tested in tests/integration/test_daemon_slurm.py.
"""

from __future__ import annotations

from pathlib import Path

from gpuperf.model.aggregates import HostAggregate
from gpuperf.daemon import jobcgroup

V1 = """12:pids:/
6:freezer:/slurm_n1/uid_1001/job_4242/step_0
3:cpu,cpuacct:/slurm_n1/uid_1001/job_4242/step_0/task_0
2:memory:/slurm_n1/uid_1001/job_4242/step_0/task_0
0::/
"""
V2 = "0::/system.slice/slurmstepd.scope/job_s1f9a2c/step_batch/user/task_0\n"
NO_SLURM = "5:cpuacct:/\n0::/user.slice/user-1000.slice/session-3.scope\n"


def _mk(root: Path, rel: str, name: str, text: str) -> Path:
    d = root / rel
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)
    return d


def test_job_level_is_the_job_component_of_the_path():
    assert jobcgroup.job_level("/slurm_n1/uid_1001/job_4242/step_0/task_0") == "/slurm_n1/uid_1001/job_4242"
    assert jobcgroup.job_level("/system.slice/slurmstepd.scope/job_s1f9a2c/step_batch/user/task_0") == \
        "/system.slice/slurmstepd.scope/job_s1f9a2c"
    assert jobcgroup.job_level("/user.slice/session-3.scope") is None
    assert jobcgroup.job_level("/a/job_") is None and jobcgroup.job_level(None) is None


def test_v1_cpuacct_in_a_combined_hierarchy(tmp_path):
    d = _mk(tmp_path, "cpu,cpuacct/slurm_n1/uid_1001/job_4242", "cpuacct.usage", "98487103\n")
    assert jobcgroup.locate(V1, str(tmp_path)) == str(d)
    assert abs(jobcgroup.read_cpu_s(str(d)) - 0.098487103) < 1e-12


def test_v2_cpu_stat_on_a_pure_and_a_hybrid_host(tmp_path):
    stat = "usage_usec 4250000\nuser_usec 4000000\nsystem_usec 250000\n"
    pure = tmp_path / "pure"
    d = _mk(pure, "system.slice/slurmstepd.scope/job_s1f9a2c", "cpu.stat", stat)
    assert jobcgroup.locate(V2, str(pure)) == str(d) and jobcgroup.read_cpu_s(str(d)) == 4.25
    hybrid = tmp_path / "hybrid"
    d = _mk(hybrid, "unified/system.slice/slurmstepd.scope/job_s1f9a2c", "cpu.stat", stat)
    assert jobcgroup.locate(V2, str(hybrid)) == str(d)


def test_no_counter_or_no_job_level_means_no_cgroup(tmp_path):
    # v1 line names the job, but Slurm keeps no cpuacct group (jobacct_gather/linux): nothing there
    assert jobcgroup.locate(V1, str(tmp_path)) is None
    _mk(tmp_path, "cpuacct", "cpuacct.usage", "1\n")
    assert jobcgroup.locate(NO_SLURM, str(tmp_path)) is None
    assert jobcgroup.read_cpu_s(str(tmp_path / "gone")) is None
    assert jobcgroup.parse_cpu_stat("user_usec 5\n") is None


def test_host_aggregate_takes_the_larger_and_keeps_the_last_reading():
    h = HostAggregate(cpus_allocated=4)
    h.update_procs({"10:1": (2.0, 0.0, 1)}, 100.0)
    assert h.cpu_time_s == 2.0 and h.cpu_source == "processes"
    h.update_cgroup(5.5)
    assert h.cpu_time_s == 5.5 and h.cpu_source == "cgroup"
    h.update_cgroup(None)            # the cgroup went away with the job: the last reading stands
    h.update_cgroup(3.0)             # the counter only grows: a smaller reading never lowers it
    assert h.cgroup_cpu_s == 5.5
    h.update_procs({"10:1": (9.0, 0.0, 1)}, 100.0)
    assert h.cpu_time_s == 9.0 and h.cpu_source == "processes"
    d = h.to_dict(10.0)
    assert d["cpu_time_s"] == 9.0 and d["cpu_time_procs_s"] == 9.0 and d["cpu_source"] == "processes"
    again = HostAggregate.from_state(h.to_state())
    assert again.cgroup_cpu_s == 5.5 and again.cpu_time_s == 9.0
    # a state written before cgroups were read still loads
    old = h.to_state()
    del old["cgroup"], old["cgroup_cpu_s"]
    assert HostAggregate.from_state(old).cgroup_cpu_s is None


# one path per layout: recorded on the releases at hand (tests/data/cgroups/README.md), and 26.05's v2 form
DATA = Path(__file__).resolve().parents[1] / "data" / "cgroups"
SLUID_V2 = "0::/system.slice/n1_slurmstepd.scope/s585M8F56AJ000/step_batch/user/task_0\n"


def test_the_job_level_of_every_recorded_layout_and_of_26_05s_sluid_directory():
    want = {"slurm-22.05-v1-batch.cgroup": ("/slurm_slurm37n1/uid_0/job_2550021", None),
            "slurm-22.05-v2-step.cgroup": (None, "/system.slice/gpu1_slurmstepd.scope/job_1"),
            "slurm-24.11-v1-batch.cgroup": ("/slurm_slurm37tn1/uid_0/job_5609026", None),
            "slurm-26.05-v1-batch.cgroup": ("/slurm_slurm37sn1/uid_0/job_6604000", None)}
    for name, (v1, v2) in want.items():
        got_v1, got_v2 = jobcgroup.cpu_cgroup_lines((DATA / name).read_text())
        assert (jobcgroup.job_level(got_v1), jobcgroup.job_level(got_v2) if v2 else v2) == (v1, v2), name
    # 26.05: the job's directory is its SLUID, no job_ prefix (26.05.5's cgroup_v2.so); the step's parent is the job
    assert jobcgroup.job_level(jobcgroup.cpu_cgroup_lines(SLUID_V2)[1]) == \
        "/system.slice/n1_slurmstepd.scope/s585M8F56AJ000"
    assert jobcgroup.job_level("/system.slice/slurmstepd.scope/s585M8F56AJ000/step_extern/slurm") == \
        "/system.slice/slurmstepd.scope/s585M8F56AJ000"


def test_a_sluid_named_job_is_located_and_counted(tmp_path):
    d = _mk(tmp_path, "system.slice/n1_slurmstepd.scope/s585M8F56AJ000", "cpu.stat", "usage_usec 2000000\n")
    assert jobcgroup.locate(SLUID_V2, str(tmp_path)) == str(d) and jobcgroup.read_cpu_s(str(d)) == 2.0
