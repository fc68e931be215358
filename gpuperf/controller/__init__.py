"""The controller part: node summaries in, merged job summaries and AdminComments out.

One long-lived service (``service``, run as ``gpuperf daemon --controller``): ``collector`` takes
node summaries in (pyzmq + munge, ``transport``/``libmunge``; the node side imports only
``transport``) into ``clusterstore`` (SQLite); ``notices`` reads the job-end notices
``gpuperf-epilog-slurmctld`` drops into ``queue``, the durable queue in the same store; ``merge``
folds a job's node summaries into one; ``accounting`` writes AdminComments in batches. Data flows one
way: nodes -> controller -> store/sacct; ``gpuperf.report`` renders what the store holds and never
imports the service.
"""
