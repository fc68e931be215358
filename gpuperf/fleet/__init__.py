"""Fleet health: per-GPU performance fingerprints from every job's aggregates, ranking against each
model's fleet median, and the opt-in active probe (docs in ``gpuperf/fleet/README.md``)."""
