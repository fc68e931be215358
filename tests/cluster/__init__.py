"""A real Slurm test cluster on one machine (see README.md)."""
