"""The job model: what a job did, as values. Per-job streaming aggregates (``aggregates``) with each
GPU's fleet figures (``load``: under load and in communication phases, ``gpustate``, ``gpuerrors``:
error counters and their growth) and the job's host side (``hostaggregate``); the figures of the job
summary ``gpuperf.summary.v1`` (``summary``, with the job-wide ``totals``; its estimates and
diagnosis are ``diagnosis.jobsummary``'s); its bounded time series (``series``), the compact
AdminComment (``admincomment``), GPU models' peak figures (``gpuspecs``) and job references as Slurm
users write them (``jobref``). Pure apart from reading the job's env and affinity records (through
``env.report``, ``affinity.report``); imports only the layers below it (docs/ARCHITECTURE.md)."""
