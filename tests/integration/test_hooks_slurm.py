"""gpuperf's four Slurm hooks, run by a real slurmd/slurmctld: what each records, as whom, and that a
broken gpuperf config never costs a job."""

from __future__ import annotations

import pwd
import re
import time
import uuid
from pathlib import Path

import pytest

from gpuperf.files import config

pytestmark = pytest.mark.slurm

NODE_HOOKS = ("prolog", "epilog")


def _taskprologs(records: dict[str, dict]) -> list[dict]:
    return [r for k, r in records.items() if k.startswith("taskprolog.")]


def test_root_job_every_hook_records_its_view_of_the_job(slurm_cluster):
    c = slurm_cluster
    node = c.node_names[0]
    job = c.sbatch("echo hello\n", "--gres=gpu:2", "--job-name=hooks")
    assert c.wait(job) == "COMPLETED", c.logs()
    slurmctld = c.wait_record(job, "epilog-slurmctld")["context"]
    records = c.job_records(job)

    for hook in NODE_HOOKS:
        ctx = records[hook]["context"]
        assert (ctx["hook"], ctx["job_id"], ctx["user"], ctx["uid"]) == (hook, job, "root", 0)
        assert ctx["gpus"] == [0, 1], f"{hook} saw GPUs {ctx['gpus']}"
        assert ctx["node"] == node
        assert records[hook]["config"] == str(c.gpuperf_config_path)
    assert records["epilog"]["context"]["exit_code"] == 0

    tasks = _taskprologs(records)
    assert len(tasks) == 1, f"one task in the batch step, got {sorted(records)}"
    t = tasks[0]["context"]
    assert (t["job_id"], t["user"], t["gpus"], t["node"]) == (job, "root", [0, 1], node)

    # the controller's hook sees no GPU indices and no node name, only the node list (FACTS.md)
    assert (slurmctld["job_id"], slurmctld["user"], slurmctld["uid"]) == (job, "root", 0)
    assert slurmctld["gpus"] == [] and slurmctld["node"] is None
    assert slurmctld["nodelist"] == node
    assert slurmctld["exit_code"] == 0

    row = c.wait_sacct(job, "COMPLETED", fields=("JobID", "State", "User", "AllocTRES"))
    assert row["JobID"] == str(job) and row["User"] == "root"
    assert "gres/gpu=2" in row["AllocTRES"]
    assert c.job_output(job).strip() == "hello"


def test_user_job_records_the_job_user(slurm_cluster):
    c = slurm_cluster
    pw = pwd.getpwnam(c.user)
    job = c.sbatch("id -u\n", "--gres=gpu:1", user=c.user)
    assert c.wait(job) == "COMPLETED", c.logs()
    slurmctld = c.wait_record(job, "epilog-slurmctld")["context"]
    for hook in NODE_HOOKS:
        ctx = c.job_record(job, hook)["context"]
        assert (ctx["user"], ctx["uid"], ctx["gpus"]) == (c.user, pw.pw_uid, [0])
    assert (slurmctld["user"], slurmctld["uid"]) == (c.user, pw.pw_uid)
    assert c.job_output(job).strip() == str(pw.pw_uid)
    assert c.wait_sacct(job, "COMPLETED")["User"] == c.user


def test_failing_job_exit_code_reaches_the_epilogs(slurm_cluster):
    c = slurm_cluster
    job = c.sbatch("exit 3\n", "--gres=gpu:1")
    assert c.wait(job) == "FAILED"
    slurmctld = c.wait_record(job, "epilog-slurmctld")["context"]
    epilog = c.job_record(job, "epilog")["context"]
    assert c.wait_sacct(job, "FAILED")["ExitCode"] == "3:0"
    # Slurm hands the hooks the raw wait status: exit code in the high byte
    assert epilog["exit_code"] >> 8 == 3 and slurmctld["exit_code"] >> 8 == 3
    assert c.node_states()[c.node_names[0]] in ("idle", "mix")


def test_broken_gpuperf_config_costs_nothing_and_logs_one_line_per_hook(slurm_cluster, gpuperf_config_reset):
    c = slurm_cluster
    key = f"bogus_{uuid.uuid4().hex[:8]}"
    # the instance's own [general] paths stay valid: a degraded hook keeps them (config._salvage_general)
    # and so never writes the machine's /var/log/gpuperf, /var/lib/gpuperf or /run/gpuperf
    general = {k: v for k, v in c.gpuperf_config()["general"].items() if isinstance(v, str)}
    paths = "".join(f'{k} = "{v}"\n' for k, v in general.items() if k != "log_level")
    c.write_gpuperf_config(f"[general]\n{paths}log_level = \"info\"\n{key} = 1\n")
    log = Path(general["log_file"])
    start = log.stat().st_size if log.exists() else 0

    job = c.sbatch("echo still-runs\n", "--gres=gpu:2")
    assert c.wait(job) == "COMPLETED", c.logs()
    assert c.job_output(job).strip() == "still-runs"

    def ours() -> list[str]:
        text = log.read_bytes()[start:].decode(errors="replace") if log.exists() else ""
        return [ln for ln in text.splitlines() if str(c.gpuperf_config_path) in ln and key in ln]

    end = time.monotonic() + 15
    while time.monotonic() < end and not any("gpuperf-epilog[" in ln for ln in ours()):
        time.sleep(0.2)
    time.sleep(0.5)  # a second line from the same hook run would come right after the first
    lines = ours()
    hooks = sorted(re.search(r"gpuperf-([a-z-]+)\[", ln).group(1) for ln in lines)
    # gpuperf-epilog-slurmctld is a shell script that reads only the config's paths (the controller
    # service validates the config when it starts): it has nothing to complain about here
    assert hooks == sorted(["prolog", "taskprolog", "epilog"]), "\n".join(lines)
    assert all(f"general.{key}" in ln and "unknown key" in ln for ln in lines), "\n".join(lines)
    assert c.node_states()[c.node_names[0]] in ("idle", "mix"), c.node_reason(c.node_names[0])
    assert c.wait_sacct(job, "COMPLETED")["State"] == "COMPLETED"


def test_two_node_job_runs_each_node_hook_on_its_node(slurm_cluster2):
    c = slurm_cluster2
    n1, n2 = c.node_names
    job = c.sbatch("/usr/bin/srun /bin/sh -c 'echo $SLURMD_NODENAME $SLURM_JOB_GPUS'\n",
                   "-N2", "--ntasks-per-node=1", "--gres=gpu:2")
    assert c.wait(job) == "COMPLETED", c.logs()
    assert sorted(c.job_output(job).splitlines()) == [f"{n1} 0,1", f"{n2} 0,1"]
    slurmctld = c.wait_record(job, "epilog-slurmctld")["context"]
    for node in (n1, n2):
        records = c.job_records(job, node)
        for hook in NODE_HOOKS:
            ctx = records[hook]["context"]
            assert (ctx["job_id"], ctx["node"], ctx["gpus"]) == (job, node, [0, 1]), f"{hook} on {node}"
        # batch step on the first node only, one srun task per node
        assert len(_taskprologs(records)) == (2 if node == n1 else 1), sorted(records)
    assert c.run("scontrol", "show", "hostnames", slurmctld["nodelist"]).stdout.split() == [n1, n2]
    assert c.wait_sacct(job, "COMPLETED", fields=("NNodes",))["NNodes"] == "2"
