"""The job environment part: policy (pure), admin rules, NCCL version discovery, NCCL bench and tuning.

Kept import-free: the TaskProlog imports ``gpuperf.env.policy`` under a 50 ms budget.
"""
