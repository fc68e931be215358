"""Access to the systems gpuperf reads: Slurm's commands (``slurm``) and NVML (``nvmlq``, the one
door to every NVML call). ``topology`` (node discovery) and ``samplers`` (GPU sampling backends)
sit on it, as their own packages. Imports only ``gpuperf.files`` (docs/ARCHITECTURE.md)."""
