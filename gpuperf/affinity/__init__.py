"""Affinity: which CPUs and memory each local rank of a job uses, next to its GPU(s) (``plan``,
pure). The prolog computes it (``prolog.affinityplan``), the SPANK plugin and ``gpuperf-run``
apply it."""
