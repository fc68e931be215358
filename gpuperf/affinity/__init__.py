"""Affinity: which CPUs and memory each local rank of a job uses, next to its GPU(s) (``plan``,
pure, with the plan file's format), and what the tasks applied, read back for the job's report
(``report``). The prolog computes it (``prolog.affinityplan``), the SPANK plugin and ``gpuperf-run``
apply it. Imports only ``gpuperf.files``."""
