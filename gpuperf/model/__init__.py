"""The job model: what a job did, as values. Per-job streaming aggregates (``aggregates``), the job
summary ``gpuperf.summary.v1`` (``summary``), its bounded time series (``series``), the compact
AdminComment (``admincomment``) and GPU models' peak figures (``gpuspecs``). Pure; imports only
the layers below (files, access)."""
