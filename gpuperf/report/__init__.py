"""The job report's renderers and its way to the controller.

``terminal`` (rich) and ``html`` (plotly, self-contained) render a ``gpuperf.summary.v1``;
``transport`` sends node summaries to the controller (pyzmq + munge), ``collector`` receives them,
``clusterstore`` keeps them and the merged job summaries (SQLite); ``fromrecording`` folds a
recording the way the daemon would (tests, benchmarks, demos).
"""
