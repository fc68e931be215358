"""The job environment part: policy (pure), admin rules, NCCL version discovery, NCCL bench and tuning,
and the job's env records read back for its report (``report``). The prolog's step that plans it is
``prolog.envplan``, the TaskProlog's that exports it ``prolog.envtask``.

Kept import-free: the TaskProlog imports ``gpuperf.env.policy`` under a 50 ms budget.
"""
