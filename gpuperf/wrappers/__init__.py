"""Wrappers that act inside the job's tasks: gpuperf-run and the SPANK plugin's sources."""
