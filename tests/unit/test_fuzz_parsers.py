"""Fuzz every parser of a file or text an ordinary user controls (issue 28; docs/SECURITY.md, "Threat
model: files and parsers"): each example must end within the deadline, allocate at most ``PEAK`` bytes
(tracemalloc), and raise nothing but the parser's stated error.

Inputs: kernel log records (a user's text can be quoted in one), ``scontrol show job -d``, ``sacct`` and ``squeue`` output with a
hostile job name and comment, ``applied/`` and ``env/`` records, the config file's TOML, AdminComment
text and payloads, affinity plan text, CPU lists, a process's environment (the profiler markers).
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import tracemalloc
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuperf.access.slurm import SlurmError, parse_job_cpu_ids
from gpuperf.affinity import plan as aff
from gpuperf.affinity import report as aff_report
from gpuperf.checks import xid
from gpuperf.daemon.attribution import PROFILERS, parse_environ_job, parse_environ_profiler
from gpuperf.env import report as env_report
from gpuperf.env.plan import CACHE, TASK_DIR
from gpuperf.files import config, safeio
from gpuperf.model import admincomment

PEAK = 32 << 20          # bytes one example may allocate at its peak
FUZZ = settings(max_examples=200, deadline=1000, suppress_health_check=[HealthCheck.too_slow],
                derandomize=True)

# text with what hostile input is made of: Slurm's field names, newlines, escapes, markup, big numbers
TOKENS = st.sampled_from(["Nodes=", "CPU_IDs=", "Mem=0", "GRES=", " ", "     ", "\n", "\r", "\x00", "\x1b[2J",
                          "[link=x]", "[/x]", "0-100000000", "0-15", "n1", "NVRM: Xid (PCI:0000:9a:00): 79, ",
                          "JobName=", "JOB_GRES=(null)", "=", ",", "-", "9" * 40, "٣", "é", "{", "}", "\"", "[", "]"])
HOSTILE = st.one_of(st.text(max_size=300), st.lists(TOKENS, max_size=60).map("".join))


@contextmanager
def bounded():
    """Fail the example if it allocated more than PEAK at any moment."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK, f"peak {peak} bytes"


@contextmanager
def job_dir():
    d = Path(tempfile.mkdtemp(prefix="gpuperf-fuzz-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --- kernel log -------------------------------------------------------------------------------------

@FUZZ
@given(prio=st.integers(-5, 200), usec=st.integers(-5, 10**15), text=HOSTILE)
def test_kernel_log_records(prio, usec, text):
    with bounded():
        ev = xid.parse_kmsg_record(f"{prio},1,{usec},-;{text}", 1000.0)
    if ev is not None:                       # only the driver's own kernel record counts
        assert prio >> 3 == 0 and text.startswith("NVRM: Xid (PCI:") and 0 <= ev.xid < 10**6


@FUZZ
@given(records=st.lists(st.one_of(HOSTILE, st.binary(max_size=200).map(lambda b: b.decode("latin-1"))), max_size=50))
def test_a_kernel_log_file_of_any_records(records):
    with job_dir() as d, bounded():
        (d / "kmsg").write_text("\n".join(records), encoding="utf-8", errors="replace")
        xid.read_kmsg(str(d / "kmsg"))


# --- Slurm's output with a user's job name and comment ---------------------------------------------------

SHOW_JOB = ("JobId=7 JobName={name}\n   UserId=u(1001) GroupId=u(1001) MCS_label=N/A\n   NodeList=n1\n"
            "   JOB_GRES=gpu:1\n     Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=gpu:1(IDX:0)\n   MinCPUsNode=2\n"
            "   WorkDir={name}\n   Comment={comment}\n   StdOut=/dev/null\n")


@FUZZ
@given(name=HOSTILE, comment=HOSTILE)
def test_scontrol_show_job_with_a_hostile_name_and_comment(name, comment):
    with bounded():
        try:
            got = parse_job_cpu_ids(SHOW_JOB.format(name=name, comment=comment), "n1")
        except SlurmError:
            return                           # ambiguous: none believed
    assert got == "0-1"                      # never an id the user wrote


@FUZZ
@given(text=HOSTILE)
def test_cpu_lists(text):
    with bounded():
        try:
            cpus = aff.parse_cpu_list(text)
        except ValueError:
            return
    assert cpus == sorted(set(cpus)) and all(0 <= c <= aff.MAX_CPU_ID for c in cpus)


@FUZZ
@given(text=HOSTILE)
def test_affinity_plan_text(text):
    with bounded():
        for t in (text, aff.PLAN_HEADER + "\n" + text):
            try:
                aff.parse_plan_text(t)
            except ValueError:
                pass


# --- a job's records (the user writes them) ------------------------------------------------------------

RECORD = st.one_of(HOSTILE.map(str.encode), st.binary(max_size=2000),
                   st.builds(lambda rank, cpus, step: f"job=7 step={step} rank={rank} status=ok gpus=0 cpus={cpus}".encode(),
                             HOSTILE, HOSTILE, HOSTILE))


@FUZZ
@given(records=st.dictionaries(st.text("0123456789.abc", min_size=1, max_size=8), RECORD, max_size=20))
def test_applied_records(records):
    with job_dir() as d:
        (d / "affinity.json").write_text('{"cpus_source": "cgroup"}')
        (d / "applied").mkdir()
        for name, data in records.items():
            if name not in (".", ".."):
                (d / "applied" / name).write_bytes(data)
        ign = safeio.Ignored()
        with bounded():
            rep = aff_report.report(d, ign)
        assert rep is not None
        for k, v in rep.items():
            if k.isdigit():
                assert all(0 <= c <= aff.MAX_CPU_ID for c in v["cpus"])


JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), HOSTILE),
                       lambda kids: st.one_of(st.lists(kids, max_size=5), st.dictionaries(HOSTILE, kids, max_size=5)),
                       max_leaves=30)


@FUZZ
@given(plan=st.one_of(JSONISH, st.fixed_dictionaries({"vars": st.lists(JSONISH, max_size=5)})),
       steps=st.lists(st.one_of(st.binary(max_size=500), JSONISH.map(lambda x: __import__("json").dumps(x).encode()),
                                st.builds(lambda e: __import__("json").dumps({"step": "0", "exported": e}).encode(), JSONISH)),
                      max_size=10))
def test_env_records(plan, steps):
    import json

    with job_dir() as d:
        (d / CACHE).write_text(json.dumps(plan))
        (d / TASK_DIR).mkdir()
        for i, data in enumerate(steps):
            (d / TASK_DIR / f"step-{i}.json").write_bytes(data)
        with bounded():
            env_report.report(d, safeio.Ignored())


@FUZZ
@given(data=st.one_of(st.binary(max_size=3000), HOSTILE.map(str.encode), st.just(b"[" * 100_000)))
def test_json_of_a_users_record(data):
    with bounded():
        try:
            safeio.parse_json(data.decode("utf-8", "replace"))
        except ValueError:
            pass


# --- config ------------------------------------------------------------------------------------------------

SECTIONS = st.sampled_from(sorted(config.SCHEMA))


@FUZZ
@given(text=st.one_of(HOSTILE, st.builds(lambda s, k, v: f"[{s}]\n{k} = {v}\n", SECTIONS,
                                          st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=20),
                                          st.sampled_from(["1", "-1", "1e400", '"x"', "[1,2]", "true", "{a=1}", '"' + "y" * 1000 + '"',
                                                           "1979-05-27", "[" * 50 + "]" * 50]))))
def test_config_toml(text):
    with bounded():
        try:
            config.parse(text)
        except config.ConfigError:
            pass


# --- AdminComment -------------------------------------------------------------------------------------------

def _payload(raw: bytes) -> str:
    return base64.b32encode(zlib.compress(raw)).decode().rstrip("=").lower()


@FUZZ
@given(text=st.one_of(HOSTILE, HOSTILE.map(lambda t: "gpuperf:v1 " + t),
                      st.binary(max_size=500).map(lambda b: "gpuperf:v1 gpus=1 z=" + _payload(b)),
                      JSONISH.map(lambda x: "gpuperf:v1 z=" + _payload(__import__("json").dumps(x).encode()))))
def test_admincomment_text(text):
    with bounded():
        for fn in (admincomment.decode, admincomment.decode_headline):
            try:
                fn(text)
            except admincomment.AdminCommentError:
                pass


# a process's environment: the user's bytes, profiler markers among them
ENV_TOKENS = st.sampled_from([b"\0", b"=", b"NV_TPS_LAUNCH_TOKEN=", b"Interactive Profile", b"Frame Debugger",
                              b"NV_NSIGHT_INJECTION_TRANSPORT_TYPE=", b"NV_COMPUTE_PROFILER_PERFWORKS_DIR=",
                              b"NSYS_PROFILING_SESSION_ID=", b"CUDA_INJECTION64_PATH=", b"SLURM_JOB_ID=", b"9" * 40,
                              b"\xff\xfe", b"uds", b"/x.so", b" "])


@FUZZ
@given(data=st.one_of(st.binary(max_size=600), st.lists(ENV_TOKENS, max_size=80).map(b"".join)))
def test_a_process_environment(data):
    with bounded():
        assert parse_environ_profiler(data) in (None, *PROFILERS)
        job = parse_environ_job(data)
    assert job is None or isinstance(job, int)


def test_an_admincomment_that_inflates_without_end_is_refused():
    bomb = "gpuperf:v1 z=" + _payload(b"[" * (256 << 20))      # 256 MiB from about 250 KiB of text
    with bounded(), pytest.raises(admincomment.AdminCommentError, match="inflates past"):
        admincomment.decode(bomb)
    deep = "gpuperf:v1 z=" + _payload(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(admincomment.AdminCommentError):
        admincomment.decode(deep)


@FUZZ
@given(env=st.one_of(st.binary(max_size=300), JSONISH.map(lambda x: __import__("json").dumps(x).encode())),
       applied=st.lists(RECORD, max_size=5))
def test_a_node_summary_over_any_job_files(env, applied):
    from report_fixtures import aggregates

    from gpuperf.diagnosis.jobsummary import node_summary

    with job_dir() as d:
        (d / CACHE).write_bytes(env)
        (d / "affinity.json").write_text('{"cpus_source": "cgroup"}')
        (d / "applied").mkdir()
        for i, data in enumerate(applied):
            (d / "applied" / f"0.{i}").write_bytes(data)
        with bounded():
            s = node_summary(aggregates(ngpus=1, seconds=60.0), {"job_dir": str(d), "node": "n1", "job_id": 7})
        assert s["job_id"] == 7


class _Canned:
    """Slurm's CLI replaced by the text it printed (the parsers under it are what is fuzzed)."""

    def __init__(self, text: str):
        from gpuperf.access.slurm import Slurm

        self.slurm = Slurm("/nonexistent")
        self.slurm.run = lambda *a, **kw: text          # type: ignore[method-assign]


@FUZZ
@given(text=st.lists(st.one_of(HOSTILE, st.builds(lambda j, c: f"{j}|{c}", st.integers(-5, 10**12), HOSTILE)),
                     max_size=30).map("\n".join))
def test_sacct_and_squeue_output(text):
    s = _Canned(text).slurm
    with bounded():
        got = s.sacct_jobs([1, 2], ("JobID", "AdminComment%65535"))
        assert all(isinstance(k, int) for k in got)
        s.sacct_rows(("JobID", "User", "AdminComment%65535"), "now-1days")
        s.job_state(1)
        s.admin_comment(1)
        s.sacct_job(1)
