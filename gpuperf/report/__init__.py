"""The job report's renderers.

``terminal`` (rich) and ``html`` (plotly, self-contained) render a ``gpuperf.summary.v1``;
``fromrecording`` folds a recording the way the daemon would (tests, benchmarks, demos). The
controller's receiving, storing and merging of summaries live in ``gpuperf.controller``.
"""
