"""Fuzzing the ops an ordinary user reaches on the user socket (issue 36, item 5): ``taskenv`` with a hostile
environment, config, listing and plan file, ``job``, ``jobs``, ``live``, ``series``, ``health``, ``ping``,
each from the job's owner, another user and root. Every example must end within its time and memory
(wall time and tracemalloc's peak: ``test_fuzz_messages.limited``) and its bytes of root's log, answer with
a reply that encodes, and never let an exception out of ``Ops.handle``.
"""

from __future__ import annotations

import logging
import os

from hypothesis import given, strategies as st

from gpuperf.daemon import protocol, ratelimit
from gpuperf.env.plan import EnvPlan, EnvVar
from gpuperf.files import config, jobstate, jsonlite
from gpuperf.prolog import taskdaemon
from test_daemon_parts import _ops
from test_fuzz_messages import FUZZ, _json, limited

LOG_BYTES = 800           # root's log an example may grow: one cut line (a traceback alone is ~1.5 KB)
REPLY_BYTES = 1 << 20

_text = st.one_of(st.text(max_size=30), st.sampled_from(["0", "batch", "extern", "interactive", "77", "-1", "8_3",
                                                          "12.0", "/../../etc/x", "9" * 5000, "\n\x1b[2J", "0x4d"]),
                  st.text(alphabet="0123456789", min_size=1, max_size=6000))
_env_names = st.sampled_from(["SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_CPUS_PER_TASK",
                              "CUDA_VISIBLE_DEVICES", "SLURM_LOCALID", "SLURM_JOB_GPUS", "GPUPERF", "NCCL_ALGO",
                              "OMP_NUM_THREADS", "GPUPERF_AFFINITY_OMP", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "X"])
_envs = st.dictionaries(_env_names, _text, max_size=8).map(lambda e: {"SLURM_JOB_ID": "77", **e})


def _plan_text(draw) -> str:
    kind = draw(st.sampled_from(["good", "fields", "json", "raw", "huge"]))
    good = EnvPlan([EnvVar("NCCL_X", "1", "r", "default:x"), EnvVar("OMP_NUM_THREADS", "4", "r", "default:omp_threads",
                                                                    None, "omp_threads")]).to_dict()
    if kind == "good":
        return jsonlite.dumps(good)
    if kind == "fields":   # the plan's own fields with hostile values
        key = draw(st.sampled_from(["vars", "skipped", "notes", "disabled", "nccl_system", "schema"]))
        return jsonlite.dumps({**good, key: draw(_json)})
    if kind == "huge":     # finding 1: a key or a value of 100,000 characters
        big = "k" * 100_000
        return jsonlite.dumps(draw(st.sampled_from([{**good, "skipped": [{"name": "x", "reason": "r", "rule": "q", big: 1}]},
                                                    {**good, "vars": [{"name": big, "value": "1"}]},
                                                    {**good, "notes": [big]}, {big: 1}])))
    if kind == "json":
        return jsonlite.dumps(draw(_json))
    return draw(st.text(max_size=200))


@st.composite
def user_requests(draw):
    """(plan file text, its owner, op, job member, uid)."""
    op = draw(st.sampled_from(["taskenv", "taskenv", "taskenv", "job", "jobs", "live", "series", "health", "ping"]))
    uid = draw(st.sampled_from([1000, 4242, 0]))
    if op == "taskenv":
        job = {"env": draw(_envs), "config": draw(st.sampled_from(["ok", "other"])),
               "cpus": draw(st.one_of(st.none(), st.integers(0, 1 << 20))),
               "pid": draw(st.one_of(st.none(), st.integers(1, 2**31))),
               "nccl": draw(st.one_of(st.none(), st.fixed_dictionaries(
                   {"dirs": st.dictionaries(st.text(max_size=20), st.lists(st.text(max_size=20), max_size=3), max_size=3),
                    "wheels": st.lists(st.text(max_size=30), max_size=3)})))}
    elif op in ("job", "series"):
        job = {"job_id": draw(st.sampled_from([8, 9, 77, 2**40])), "max_points": draw(st.integers(1, 100_000))}
    elif op == "health":
        job = {"gpus": draw(st.one_of(st.none(), st.lists(st.integers(0, 8), max_size=4))),
               "max_age_s": draw(st.one_of(st.none(), st.floats(0, 1e6)))}
    else:
        job = draw(st.one_of(st.none(), st.just({})))
    return _plan_text(draw), draw(st.sampled_from([0, 1000])), op, job, uid


class _Bytes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.n = self.tracebacks = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        self.n += len(text) + 1
        self.tracebacks += "Traceback" in text


def test_the_user_sockets_ops_answer_any_request_within_time_memory_and_log_bytes(tmp_path):
    ops, jobs, _, _ = _ops(tmp_path)
    ops.taskenv = taskdaemon.run
    jobs.register({"job_id": 8, "uid": 1000, "gpus": [0]})
    jobs.register({"job_id": 9, "uid": 4242, "gpus": [1]})
    cfg = ops.cfg
    plan = jobstate.job_dir(cfg.general.run_dir, 77) / "env.json"
    plan.parent.mkdir(parents=True, exist_ok=True)
    sent_cfg = {"ok": {"source": cfg.source, "digest": config.digest(cfg)}, "other": {"source": "/x", "digest": "0"}}
    logged = _Bytes()
    lg = logging.getLogger("gpuperf")
    lg.addHandler(logged)

    @FUZZ
    @given(user_requests())
    def one(req):
        text, owner, op, job, uid = req
        plan.write_text(text)
        os.chmod(plan, 0o600)
        os.chown(plan, owner, owner)
        if op == "taskenv":
            job = {**job, "config": sent_cfg[job["config"]]}
        frame = protocol.encode(protocol.request(op, job)) if job is not None else protocol.encode({"v": 1, "op": op})
        before, tracebacks = logged.n, logged.tracebacks
        ops.log_budget = ratelimit.LogBudget()   # each example starts with a user's whole budget
        with limited():
            reply = ops.handle(frame, uid, "user")
        assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool)
        assert len(protocol.encode(reply)) < REPLY_BYTES
        assert logged.n - before <= LOG_BYTES and logged.tracebacks == tracebacks, logged.n - before
        assert "Traceback" not in str(reply) and len(str(reply.get("error") or reply.get("why") or "")) <= 300

    try:
        one()
    finally:
        lg.removeHandler(logged)
