"""Fleet health: per-GPU performance fingerprints from every job's aggregates, ranking against each
model's fleet median, the drain policy on them (docs in ``gpuperf/fleet/README.md``). The figures it
folds are measured below it: under load by the job model (``model.load``, ``model.gpustate``,
``model.gpuerrors``), by the active probe in ``checks.probe``."""
