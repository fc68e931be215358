"""The job environment on a real Slurm: what a batch step and an srun step see, the user's own values,
GPUPERF=off, and a bad admin policy that must cost nothing but the injection."""

from __future__ import annotations

import pwd

import pytest


pytestmark = pytest.mark.slurm

SHOW = r"env | grep -E '^(NCCL_[A-Z_]*|CUDA_DEVICE_ORDER|PYTORCH_CUDA_ALLOC_CONF|OMP_NUM_THREADS|GPUPERF_ENV_SET)=' | awk -v t={tag} '{{print t, $0}}'"


def _quoted(cmd: str) -> str:
    """``cmd`` inside the batch script's double quotes, expanded only by the task's shell."""
    return cmd.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


SCRIPT = f"""
{SHOW.format(tag="batch")}
srun -n1 --gres=gpu:1 sh -c "{_quoted(SHOW.format(tag="step1"))}"
export OMP_NUM_THREADS=3
srun -n1 --gres=gpu:1 sh -c "{_quoted(SHOW.format(tag="step2"))}"
"""


def _seen(output: str) -> dict[str, dict[str, str]]:
    """{'batch': {NAME: value}, 'step1': {...}, ...} from the job's output."""
    out: dict[str, dict[str, str]] = {}
    for line in output.splitlines():
        tag, _, kv = line.partition(" ")
        if "=" in kv:
            name, _, value = kv.partition("=")
            out.setdefault(tag, {})[name] = value
    return out


def test_batch_and_srun_steps_see_the_injected_variables(slurm_cluster):
    c = slurm_cluster
    job = c.sbatch(SCRIPT, "--gres=gpu:2", "--cpus-per-task=4", "--job-name=env", user=c.user)
    assert c.wait(job) == "COMPLETED", c.logs()
    seen = _seen(c.job_output(job))
    for tag in ("batch", "step1", "step2"):
        assert seen.get(tag, {}).get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True", (tag, c.job_output(job))
        assert "CUDA_DEVICE_ORDER" not in seen[tag]  # four identical L40S: CUDA's order is the PCI order
        assert not [n for n in seen[tag] if n.startswith("NCCL_")]  # one node: no network variables
    assert seen["batch"]["OMP_NUM_THREADS"] == "2"  # 4 CPUs for the 2 GPU processes of the batch task
    assert seen["step1"]["OMP_NUM_THREADS"] == "4"  # the step's own value replaced the inherited one
    assert seen["step2"]["OMP_NUM_THREADS"] == "3"  # the script's export is the user's: it survives

    cache = c.run_dir / "jobs" / str(job) / "env.json"
    st = cache.stat()
    assert st.st_uid == pwd.getpwnam(c.user).pw_uid and st.st_mode & 0o777 == 0o600
    recs = sorted((cache.parent / "env").glob("step-*.json"))
    assert len(recs) >= 2, recs  # the batch step and the srun steps recorded what they exported


def test_user_exported_value_survives(slurm_cluster):
    c = slurm_cluster
    job = c.sbatch(SCRIPT, "--gres=gpu:1", "--export=ALL,PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6",
                   user=c.user)
    assert c.wait(job) == "COMPLETED", c.logs()
    seen = _seen(c.job_output(job))
    for tag in ("batch", "step1", "step2"):
        assert seen[tag]["PYTORCH_CUDA_ALLOC_CONF"] == "garbage_collection_threshold:0.6", (tag, seen)
    for tag in ("batch", "step1"):
        assert "OMP_NUM_THREADS:" in seen[tag]["GPUPERF_ENV_SET"], seen  # the rest was still injected


def test_gpuperf_off_injects_nothing(slurm_cluster):
    c = slurm_cluster
    job = c.sbatch(SCRIPT, "--gres=gpu:1", "--export=ALL,GPUPERF=off", user=c.user)
    assert c.wait(job) == "COMPLETED", c.logs()
    seen = _seen(c.job_output(job))
    assert "PYTORCH_CUDA_ALLOC_CONF" not in seen.get("batch", {}) and "PYTORCH_CUDA_ALLOC_CONF" not in seen.get("step1", {})
    assert seen["step2"] == {"OMP_NUM_THREADS": "3"}


def test_step_opt_out_takes_back_the_batch_steps_injection(slurm_cluster):
    c = slurm_cluster
    script = f"""
{SHOW.format(tag="batch")}
GPUPERF=off srun -n1 --gres=gpu:1 sh -c "{_quoted(SHOW.format(tag="off"))}"
"""
    job = c.sbatch(script, "--gres=gpu:1", user=c.user)
    assert c.wait(job) == "COMPLETED", c.logs()
    seen = _seen(c.job_output(job))
    assert seen["batch"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert seen.get("off", {}) == {}, seen  # inherited from the batch step, taken back by the step's TaskProlog


BAD_POLICY = """
[general]
run_dir = "{run}"
state_dir = "{state}"
log_file = "{log}"
node_root = "{root}"
[env]
[[env.rules]]
name = "guide-tree"
set = {{ NCCL_ALGO = "Tree" }}
"""


def test_bad_policy_is_one_clear_error_and_exports_nothing(gpuperf_config_reset):
    c = gpuperf_config_reset
    cfg = c.gpuperf_config()
    text = BAD_POLICY.format(run=c.run_dir, state=cfg["general"]["state_dir"], log=cfg["general"]["log_file"],
                             root=cfg["general"].get("node_root", ""))
    c.write_gpuperf_config(text)
    p = c.run("gpuperf", "env")
    assert p.returncode == 2
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "guide-tree" in err[0] and "NCCL_ALGO" in err[0] and "force = true" in err[0], err
    job = c.sbatch(SCRIPT, "--gres=gpu:1", user=c.user)
    assert c.wait(job) == "COMPLETED", c.logs()  # the job runs; gpuperf's broken config costs it nothing
    seen = _seen(c.job_output(job))
    assert "PYTORCH_CUDA_ALLOC_CONF" not in seen.get("batch", {}) and "NCCL_ALGO" not in seen.get("batch", {})
    assert seen["step2"] == {"OMP_NUM_THREADS": "3"}
    # hooks on a broken config keep its valid [general] paths: they log to the instance's log
    assert "guide-tree" in c.gpuperf_log()


def test_two_node_job_gets_the_network_variables_on_every_node(slurm_cluster2):
    c = slurm_cluster2
    n1, n2 = c.node_names
    show = _quoted(SHOW.format(tag="$SLURMD_NODENAME"))  # expanded in each task, not by the batch shell
    job = c.sbatch(f'/usr/bin/srun /bin/sh -c "{show}"\n', "-N2", "--ntasks-per-node=1", "--gres=gpu:1",
                   user=c.user)
    assert c.wait(job) == "COMPLETED", c.logs()
    seen = _seen(c.job_output(job))
    # both nodes are the pcie-l40s-2s fixture: one active RoCE port mlx5_0 whose RoCE v2 GID index is 3
    roce = next(n for n in _topology(c)["nics"] if n["kind"] == "roce" and n["state"] == "ACTIVE")
    for node in (n1, n2):
        assert seen[node]["NCCL_IB_HCA"] == f"={roce['name']}:{roce['port']}", (node, seen)
        assert seen[node]["NCCL_IB_GID_INDEX"] == str(roce["gid_index_rocev2"])
        assert "NCCL_NET_GDR_LEVEL" not in seen[node]  # nvidia_peermem is not loaded on that node
        for name in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL"):
            assert name not in seen[node]


def _topology(c) -> dict:
    from gpuperf.topology import load_node

    return load_node(c.gpuperf_config()["general"]["node_root"], health=False).topology


def test_two_node_job_gets_the_fabrics_admin_rule_on_every_node(slurm_cluster2):
    """RoCE traffic class from the admin's rule (issue 16): both nodes' tasks get it beside the built-in plan."""
    c = slurm_cluster2
    cfg = c.gpuperf_config()
    cfg.setdefault("env", {})["rules"] = [{
        "name": "roce-tc", "match": {"nic_kind": "roce", "multi_node": True}, "set": {"NCCL_IB_TC": "106"},
        "reason": "fabric A's lossless class, DSCP 26 with ECN (NCCL_IB_TC: "
                  "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)"}]
    c.write_gpuperf_config(cfg)
    try:
        show = _quoted(SHOW.format(tag="$SLURMD_NODENAME"))
        job = c.sbatch(f'/usr/bin/srun /bin/sh -c "{show}"\n', "-N2", "--ntasks-per-node=1", "--gres=gpu:1",
                       user=c.user)
        assert c.wait(job) == "COMPLETED", c.logs()
        seen = _seen(c.job_output(job))
        for node in c.node_names:
            assert seen[node]["NCCL_IB_TC"] == "106", (node, seen)
            assert seen[node]["NCCL_IB_HCA"].startswith("=mlx5_")  # the built-in plan is still there
        one = c.sbatch(f"{SHOW.format(tag='one')}\n", "-N1", "--gres=gpu:1", user=c.user)
        assert c.wait(one) == "COMPLETED", c.logs()
        assert "NCCL_IB_TC" not in _seen(c.job_output(one)).get("one", {})  # multi_node = true: not for one node
    finally:
        c.reset_gpuperf_config()
