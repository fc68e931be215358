"""The node daemon: GPU sampling, job attribution, aggregates, store, metrics."""
