"""The controller part: node summaries in, merged job summaries and AdminComments out.

``transport`` sends node summaries to the controller (pyzmq + munge; the node side imports only
this module), ``collector`` receives them, ``clusterstore`` keeps them and the merged job summaries
(SQLite), ``merge`` folds a job's node summaries into one and writes its AdminComment. Data flows one
way: nodes -> controller -> store/sacct; ``gpuperf.report`` renders what the store holds and never
imports the collector.
"""
