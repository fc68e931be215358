"""gpuperf: Slurm integration for GPU clusters (health, affinity, NCCL environment, efficiency reports)."""

__version__ = "0.1.0"
