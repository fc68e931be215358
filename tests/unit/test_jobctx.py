"""The job context a hook reads from Slurm's environment."""

from gpuperf.hookbase.jobctx import from_env, parse_gpu_list


def test_gpu_lists():
    assert parse_gpu_list("0,1") == [0, 1]
    assert parse_gpu_list("0-3") == [0, 1, 2, 3]
    assert parse_gpu_list("4,0-1") == [0, 1, 4]
    assert parse_gpu_list("") == []
    assert parse_gpu_list(None) == []
    assert parse_gpu_list("NoDevFiles") == []
    # MIG/UUID names are not indices: skipped, not guessed
    assert parse_gpu_list("GPU-1234,2") == [2]


def test_prolog_env():
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "1000", "SLURM_JOB_USER": "alice",
           "SLURM_JOB_GPUS": "2,3", "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n[1-2]"}
    c = from_env("prolog", env)
    assert (c.job_id, c.uid, c.user, c.gpus, c.node, c.nodelist) == (42, 1000, "alice", [2, 3], "n1", "n[1-2]")
    assert c.exit_code is None


def test_epilog_env_exit_code_and_cuda_fallback():
    env = {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_EXIT_CODE": "256",
           "SLURM_JOB_DERIVED_EC": "0:0"}
    c = from_env("epilog", env)
    assert c.gpus == [0] and c.exit_code == 256 and c.derived_exit_code == 0


def test_missing_values_are_none():
    c = from_env("prolog", {})
    assert c.job_id is None and c.uid is None and c.gpus == []
    assert from_env("prolog", {"SLURM_JOB_ID": "garbage"}).job_id is None
