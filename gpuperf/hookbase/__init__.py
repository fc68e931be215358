"""What every Slurm hook runs on: ``hook.run_hook`` (config, logging, record, always exit 0),
the config cache for hooks (``hookconf``), the guard that turns gpuperf's own failure into exit 0
(``guard``), the time bound (``watchdog``) and the job context from Slurm's environment
(``jobctx``). Kept light: the hooks import it on every job."""
