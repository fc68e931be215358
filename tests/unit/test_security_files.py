"""Issue 28, files and parsers: each finding an ordinary user could exploit, held by a test that fails
on the code before its fix (see docs/SECURITY.md, "Threat model: files and parsers")."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gpuperf.access.slurm import Slurm, SlurmError
from gpuperf.affinity import plan as aff
from gpuperf.checks import xid
from gpuperf.files import config
from gpuperf.hookbase.jobctx import JobContext
from gpuperf.prolog import affinityplan
from gpuperf.topology import load_node

NODES = Path(__file__).resolve().parents[1] / "data" / "nodes"

T0 = 1000.0


# --- #1: XIDs only from the driver's own kernel records -----------------------------------------------

def test_a_segfaulting_program_named_like_an_xid_is_not_an_xid():
    # the kernel's segfault line quotes the program's comm (cut at 15 chars) and its file's name
    name = "NVRM: Xid (PCI:0000:9a:00): 79, pid=1, GPU has fallen off the bus."
    seg = (f"6,812,5000000,-;NVRM: Xid (PCI[4242]: segfault at 0 ip 0000 sp 0000 error 4 in {name}"
           "[55d0+1000] likely on CPU 3 (core 3, socket 0)")
    assert xid.parse_kmsg_record(seg, T0) is None
    # the same text quoted anywhere but at the message's start
    assert xid.parse_kmsg_record(f"4,813,5000000,-;python[77]: {name}", T0) is None
    # facility user (a syslog daemon or root's logger writing user text into the kernel log)
    assert xid.parse_kmsg_record(f"11,814,5000000,-;{name}", T0) is None   # 11 = user.err
    assert xid.parse_kmsg_record(f"14,815,5000000,-;{name}", T0) is None   # 14 = user.info
    # the driver's own record still counts
    assert xid.parse_kmsg_record(f"4,816,5000000,-;{name}", T0) == xid.XidEvent("0000:9a:00", 79, 1005.0)


def test_a_user_record_in_the_kernel_log_file_drains_nothing(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("12,1,10,-;NVRM: Xid (PCI:0000:9a:00): 79, pid=1, x\n"
                   "6,2,11,-;bash[9]: segfault at 0 ip 0 sp 0 error 4 in NVRM: Xid (PCI:0000:9a:00): 79, x[1+2]\n"
                   "3,3,12,-;NVRM: Xid (PCI:0000:1b:00): 48, pid=7, DBE\n")
    assert [(e.bus, e.xid) for e in xid.read_kmsg(str(log))] == [("0000:1b:00", 48)]


# --- #2: scontrol's output parsed by its structure; CPU lists bounded and within the node ------------

# `scontrol show job -d` of a job submitted as
#   sbatch -J $'x Nodes=n1 CPU_IDs=0-100000000 Mem=0 GRES=\n     Nodes=n1 CPU_IDs=0-15 Mem=0 GRES=' --comment=<same> -c 2
# on the test cluster (Slurm 22.05.8): scontrol prints the name and the comment raw, newlines included
HOSTILE_SHOW_JOB = """JobId=7506000 JobName=x Nodes=n1 CPU_IDs=0-100000000 Mem=0 GRES=
     Nodes=n1 CPU_IDs=0-15 Mem=0 GRES=
   UserId=gpuperf-user(1001) GroupId=gpuperf-user(1001) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=n1
   NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 ReqB:S:C:T=0:0:*:*
   JOB_GRES=(null)
     Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=
   MinCPUsNode=2 MinMemoryNode=0 MinTmpDiskNode=0
   WorkDir=/tmp
   Comment=c Nodes=n1 CPU_IDs=0-13
     Nodes=n1 CPU_IDs=0-14 Mem=0 GRES= 
   StdOut=/dev/null
"""


class _Canned(Slurm):
    """Slurm's CLI replaced by the text it printed (a parser test: the real CLI runs in tests/integration)."""

    def __init__(self, text: str):
        super().__init__("/nonexistent")
        self.text = text

    def run(self, tool: str, *args: str, **kw) -> str:  # noqa: D102
        return self.text


def test_a_job_name_holding_scontrol_fields_sets_no_cpu_ids():
    # the name's fields on the job's first line: never a detail line (old code: '0-100000000' won)
    one_line = HOSTILE_SHOW_JOB.replace("\n     Nodes=n1 CPU_IDs=0-15 Mem=0 GRES=\n", "\n", 1)
    one_line = one_line.replace("\n     Nodes=n1 CPU_IDs=0-14 Mem=0 GRES= \n", "\n", 1)
    assert _Canned(one_line).job_cpu_ids(7506000, "n1") == "0-1"
    # the name's and comment's own detail lines (newlines in them): ambiguous, none believed
    with pytest.raises(SlurmError, match="a user's field holds one"):
        _Canned(HOSTILE_SHOW_JOB).job_cpu_ids(7506000, "n1")
    # an honest multi-node job: one run of detail lines
    honest = "JobId=5 JobName=t\n   JOB_GRES=gpu:2\n     Nodes=n[1-2] CPU_IDs=0-3 Mem=0 GRES=gpu:2(IDX:0-1)\n"
    assert _Canned(honest).job_cpu_ids(5, "n1") == "0-3"


def test_cpu_lists_are_bounded():
    for text in ("0-20000", "0-100000000", "99999999999999999999", "٣", "0-3," * 20000 + "0"):
        with pytest.raises(ValueError):
            aff.parse_cpu_list(text)
    t0 = time.perf_counter()
    assert aff.parse_cpu_list(",".join(["0-16383"] * 4000)) == list(range(16384))
    assert time.perf_counter() - t0 < 1.0


def test_the_jobs_cpuset_is_bounded_by_the_nodes_cpus(tmp_path):
    hgx = load_node(str(NODES / "hgx-h100-2s"), health=False).topology
    cg = tmp_path / "cg" / "cpuset" / "slurm" / f"uid_{os.getuid()}" / "job_77"
    cg.mkdir(parents=True)
    (cg / "cpuset.cpus").write_text("0-3,9000-9003\n")          # CPUs this node does not have
    (tmp_path / "nobin").mkdir()
    cfg = config.parse(f'[general]\nslurm_bin_dir = "{tmp_path / "nobin"}"\n'
                       f'[affinity]\ncgroup_root = "{tmp_path / "cg"}"\n')
    ctx = JobContext(hook="prolog", job_id=77, uid=os.getuid(), user="u", gpus=[0], node="n1")
    assert affinityplan.job_cpus(ctx, cfg, hgx) == ([0, 1, 2, 3], "cgroup")


# --- #3: one job's bad applied/ record fails that job's summary, never the daemon nor other jobs -----

def _aggs(job_id: int) -> dict:
    from report_fixtures import aggregates

    return dict(aggregates(ngpus=1, seconds=60.0), job_id=job_id, node="n1")


def _delivered(tmp_path, jobs: list[int], setup=None, context: dict | None = None
               ) -> tuple[config.Config, dict[int, dict]]:
    """Run the daemon's delivery thread over ``jobs`` replayed from its outbox (as after a restart)."""
    import logging
    import threading

    from gpuperf.daemon import deliver, workers

    cfg = config.defaults()
    cfg.data["general"].update(run_dir=str(tmp_path / "run"), state_dir=str(tmp_path / "state"), log_file="")
    for j in jobs:
        (tmp_path / "run" / "jobs" / str(j)).mkdir(parents=True)
        deliver.write_outbox(cfg.general.state_dir, _aggs(j),
                             {**(context or {}), "job_dir": str(tmp_path / "run" / "jobs" / str(j))})
        if setup:
            setup(j, tmp_path / "run" / "jobs" / str(j))
    d = workers.Deliveries(cfg, logging.getLogger("test"), send=False)
    assert d.restore() == len(jobs)
    d.close()
    t = threading.Thread(target=d._loop, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive()
    out = {}
    for j in jobs:
        p = tmp_path / "run" / "jobs" / str(j) / "node_summary.json"
        out[j] = json.loads(p.read_text()) if p.exists() else None
    return cfg, out


def test_a_hostile_cpus_record_marks_its_jobs_summary_partial_and_every_job_is_delivered(tmp_path):
    def plant(job: int, jdir: Path) -> None:
        (jdir / "affinity.json").write_text('{"cpus_source": "cgroup"}')   # the prolog's (root's) view
        if job == 1:
            (jdir / "applied").mkdir()
            (jdir / "applied" / "0.0").write_text(aff.applied_line(
                {"job": 1, "step": "0", "rank": 0, "status": "ok", "gpus": "0", "cpus": "0-100000000"}))

    t0 = time.perf_counter()
    cfg, got = _delivered(tmp_path, [1, 2], plant)
    assert time.perf_counter() - t0 < 10
    assert got[1] is not None and got[2] is not None
    q = got[1]["quality"]
    assert q["partial"] and any("applied/0.0: cpus: CPU 100000000 above" in r for r in q["ignored"]), q
    assert "1 job record(s) refused" in q["reasons"]
    assert got[1]["affinity"]["n1"]["0"]["cpus"] == []
    assert not got[2]["quality"].get("ignored") and not got[2]["quality"]["partial"]
    assert not list((tmp_path / "state" / "outbox").iterdir())      # nothing left to replay


def test_a_record_claiming_every_cpu_reports_only_the_jobs_allocation_and_says_so(tmp_path):
    def plant(job: int, jdir: Path) -> None:
        # the prolog's plan (root's): job 1 holds CPUs 0-3 of the node, from its cgroup; job 2's plan is a
        # no-op (no GPUs: the prolog never looked at its CPUs), so the node's CPUs bound its records
        alloc = aff.Allocation(gpus=(0,), cpus=(0, 1, 2, 3) if job == 1 else (), cpus_source="cgroup")
        (jdir / "affinity.plan").write_text(aff.plan_text(job, alloc, [] if job == 1 else
                                                          [aff.AffinityPlan(tasks=1, noop="no GPUs")]))
        (jdir / "affinity.json").write_text('{"cpus_source": "cgroup"}')
        (jdir / "applied").mkdir()
        (jdir / "applied" / "0.0").write_text(aff.applied_line(
            {"job": job, "step": "0", "rank": 0, "status": "ok", "gpus": "0", "cpus": "0-16383"}))

    _, got = _delivered(tmp_path, [1, 2], plant, context={"cpus_online": list(range(8))})   # an 8-CPU node
    assert got[1]["affinity"]["n1"]["0"]["cpus"] == [0, 1, 2, 3]
    q = got[1]["quality"]
    assert q["partial"] and any("applied/0.0: cpus: claims CPUs outside the job's allocation 0-3: 4-16383" in r
                                for r in q["ignored"]), q
    assert got[2]["affinity"]["n1"]["0"]["cpus"] == list(range(8)) and got[2]["quality"]["partial"]


def test_a_tasks_cpus_are_cut_to_the_nodes_where_the_plan_names_none(tmp_path):
    from gpuperf.affinity import report as aff_report
    from gpuperf.files import safeio

    (tmp_path / "affinity.plan").write_text(aff.plan_text(5, aff.Allocation(gpus=(), cpus=(), cpus_source="none"),
                                                          [aff.AffinityPlan(tasks=1, noop="no GPUs")]))
    (tmp_path / "applied").mkdir()
    (tmp_path / "applied" / "0.0").write_text(aff.applied_line({"step": "0", "rank": 0, "status": "noop", "cpus": "2-9"}))
    ignored = safeio.Ignored()
    assert aff_report.report(tmp_path, ignored, node_cpus=range(8))["0"]["cpus"] == [2, 3, 4, 5, 6, 7]
    assert any("outside the job's allocation 0-7: 8-9 dropped" in r for r in ignored.reasons)
    # within the job's CPUs: nothing said
    ignored = safeio.Ignored()
    (tmp_path / "applied" / "0.0").write_text(aff.applied_line({"step": "0", "rank": 0, "status": "ok", "cpus": "2-5"}))
    assert aff_report.report(tmp_path, ignored, node_cpus=range(8))["0"]["cpus"] == [2, 3, 4, 5]
    assert ignored.reasons == []
    # a plan naming CPUs the node no longer has online: the node's bound still holds
    (tmp_path / "affinity.plan").write_text(aff.plan_text(5, aff.Allocation(gpus=(0,), cpus=tuple(range(12))), []))
    (tmp_path / "applied" / "0.0").write_text(aff.applied_line({"step": "0", "rank": 0, "status": "ok", "cpus": "0-99"}))
    assert aff_report.report(tmp_path, safeio.Ignored(), node_cpus=range(8))["0"]["cpus"] == list(range(8))


def test_a_delivery_that_raises_is_set_aside_and_the_next_job_is_delivered(tmp_path, monkeypatch):
    from gpuperf.daemon import deliver

    real = deliver.write

    def write(cfg, aggs, context):
        if aggs["job_id"] == 1:
            raise RuntimeError("a bug in one job's summary")
        return real(cfg, aggs, context)

    monkeypatch.setattr(deliver, "write", write)
    _, got = _delivered(tmp_path, [1, 2])
    assert got[1] is None and got[2] is not None
    # kept for an admin, never replayed at the next start (no crash loop)
    assert sorted(p.name for p in (tmp_path / "state" / "outbox").iterdir()) == ["1.bad"]


# --- #4: a byte budget per directory read and per job ----------------------------------------------------

def test_a_flood_of_step_records_costs_the_env_report_its_budget_not_their_size(tmp_path):
    import tracemalloc

    from gpuperf.env import report as envplan
    from gpuperf.env.plan import CACHE, TASK_DIR
    from gpuperf.files import safeio

    (tmp_path / CACHE).write_text(json.dumps({"vars": [{"name": "NCCL_ALGO", "value": "Ring"}]}))
    env = tmp_path / TASK_DIR
    env.mkdir()
    filler = "x" * (envplan.STEP_MAX_BYTES - 200)           # each file under the per-file limit
    for i in range(600):                                    # ~38 MB in all (the flood: 4,096 = 256 MB)
        (env / f"step-{i}.json").write_text(json.dumps({"step": str(i), "exported": [["A", filler]]}))
    ign = safeio.Ignored()
    tracemalloc.start()
    t0 = time.perf_counter()
    rep = envplan.report(tmp_path, ign)
    took, peak = time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rep is not None and 0 < len(rep["steps"]) < 600
    assert peak < 4 * safeio.MAX_DIR_BYTES and took < 5, (peak, took)
    assert any("byte budget of env/" in r for r in ign.reasons) and ign.more > 0, ign.reasons


def test_the_jobs_budget_spans_every_read_of_its_files(tmp_path):
    from gpuperf.files import safeio

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        for i in range(3):
            (tmp_path / d / f"r{i}").write_bytes(b"y" * 1000)
    ign = safeio.Ignored(budget=2500)
    got = safeio.read_dir(tmp_path / "a", ignored=ign) + safeio.read_dir(tmp_path / "b", ignored=ign)
    assert [n for n, _ in got] == ["r0", "r1"] and ign.left == 500
    assert "record ignored: a/r2: 1000 bytes, over the 500 bytes left of the job's budget" in ign.reasons
    (tmp_path / "one").write_bytes(b"z" * 600)
    assert safeio.read_bytes(tmp_path / "one", ignored=ign) is None and ign.left == 500


# --- #10: the terminal report prints a user's strings as text ------------------------------------------

def test_markup_and_terminal_escapes_in_a_users_strings_print_as_text():
    from gpuperf.report import terminal

    osc8 = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
    s = {"job_id": 5, "user": "u[/x]", "nodes": ["n1"], "gpus": [],
         "env": {"n1": {"vars": {"[link=https://x]NCCL_ALGO": {"value": "[/x]"}, "OSC": {"value": osc8},
                                 "CSI": {"value": "\x1b[2J\x1b[31mred"}}}},
         "affinity": {"n1": {"0": {"gpu": "[bold]0", "cpus": "[/]"}}},
         "hosts": {"n1[/x]": {}},
         "quality": {"ignored": ["record ignored: [link=https://x]a[/link]: x"]}}
    for color in (False, True):
        out = terminal.render(s, width=400, color=color)      # old code: MarkupError on "[/x]"
        assert "[link=https://x]NCCL_ALGO=[/x]" in out and "Host n1[/x]" in out and "[bold]0" in out
        assert "\x1b]" not in out and "\x1b[2J" not in out and "\\x1b]8;;https://evil.example/" in out
        assert "record ignored: [link=https://x]a[/link]: x" in out


# --- #9: per-job files root writes are private to root (and the plan to the job's user) ------------------

OTHER_UID = 54321        # no account: root may setuid to it all the same


def readable_as(uid: int, top: Path) -> list[str]:
    """Every file and directory under ``top`` that ``uid`` can read (open, or list), tried as that uid."""
    import subprocess
    import sys

    code = ("import os, sys\nos.setgroups([]); os.setgid(65534); os.setuid(int(sys.argv[1]))\nout = []\n"
            "for d, dirs, files in os.walk(sys.argv[2]):\n"
            "    for n in dirs + files:\n"
            "        p = os.path.join(d, n)\n"
            "        try:\n"
            "            (os.listdir(p) if os.path.isdir(p) and not os.path.islink(p) else os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)))\n"
            "            out.append(p)\n"
            "        except OSError:\n"
            "            pass\n"
            "sys.stdout.write('\\0'.join(['--paths--'] + out))\n")
    # -S: no site (a .pth of a venv in a private checkout prints its complaint to stdout as another uid)
    p = subprocess.run([sys.executable, "-S", "-c", code, str(uid), str(top)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "--paths--" in p.stdout, (p.stdout[-500:], p.stderr[-500:])
    listed = p.stdout.split("--paths--", 1)[1].split("\0")[1:]
    return sorted(os.path.relpath(x, top) for x in listed)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (setuid to another user)")
def test_a_jobs_files_are_unreadable_by_another_user_and_the_plan_readable_by_its_own(tmp_path):
    import tempfile

    from gpuperf.daemon import deliver
    from gpuperf.hookbase.hook import HookState

    base = Path(tempfile.mkdtemp(prefix="gpuperf-private-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)   # world-traversable like /run/gpuperf (pytest's tmp_path is 0700)
        hgx = load_node(str(NODES / "hgx-h100-2s"), health=False).topology
        (base / "topo.json").write_text(json.dumps(hgx))
        cfg = config.parse(f'[general]\nrun_dir = "{base / "run"}"\nstate_dir = "{base / "state"}"\n'
                           f'slurm_bin_dir = "{base}/nobin"\n[affinity]\ntopology_file = "{base / "topo.json"}"\n'
                           f'cgroup_root = "{base}/cg"\n')
        owner = 65534                                                  # the job's user
        ctx = JobContext(hook="prolog", job_id=9, uid=owner, user="nobody", gpus=[0, 1], node="n1")
        affinityplan.step(ctx, cfg, HookState())
        jdir = base / "run" / "jobs" / "9"
        deliver.write(cfg, _aggs(9), {"job_dir": str(jdir), "uid": owner})
        assert {"affinity.plan", "affinity.json", "aggregates.json", "node_summary.json"} <= {p.name for p in jdir.iterdir()}
        assert readable_as(OTHER_UID, jdir) == []                     # old code: every file but applied/'s
        assert readable_as(owner, jdir) == ["affinity.plan", "applied"]
    finally:
        import shutil

        shutil.rmtree(base)


# --- #1, where the daemon runs: a kernel-log XID counts only when NVML's event API saw it ----------------

def test_corroboration_drops_only_what_nvml_could_see_and_did_not():
    seen = xid.NvmlSeen(since=1000.0, polled=2000.0, buses=frozenset({"0000:9a:00", "0000:1b:00"}),
                        events=(("0000:1b:00", 48, 1501.0),))
    ev = lambda bus, x, t: xid.XidEvent(bus, x, t)  # noqa: E731
    kept, dropped = xid.corroborate([
        ev("0000:1b:00", 48, 1500.0),     # NVML saw it (polled a second later)
        ev("0000:9a:00", 79, 1500.0),     # NVML watched, polled since, saw nothing: dropped
        ev("0000:1b:00", 79, 1500.0),     # another XID on a GPU NVML saw something else on: dropped
        ev("0000:9a:00", 79, 900.0),      # before NVML watched: counts
        ev("0000:9a:00", 79, 1990.0),     # NVML has not had its chance yet: counts
        ev("0000:c3:00", 79, 1500.0),     # a GPU NVML does not watch: counts
    ], seen)
    assert [(e.bus, e.xid, e.t) for e in dropped] == [("0000:9a:00", 79, 1500.0), ("0000:1b:00", 79, 1500.0)]
    assert len(kept) == 4


def test_in_the_daemon_a_kernel_xid_nvml_never_saw_drains_nothing(tmp_path):
    from gpuperf import checks
    from gpuperf.daemon import xids
    from gpuperf.topology import Node

    recorded = load_node(str(NODES / "hgx-h100-2s"))
    live = Node(topology=recorded.topology, gpus=recorded.gpus, root=None)
    bus3 = recorded.gpus["gpus"][3]["bus_id"]
    usec = int((time.clock_gettime(time.CLOCK_MONOTONIC) - 60) * 1e6)     # a minute ago
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(f"3,101,{usec},-;NVRM: Xid (PCI:{bus3.rsplit('.', 1)[0]}): 79, pid=77, GPU has fallen off the bus.\n")
    cfg = config.defaults()
    cfg.data["general"]["state_dir"] = str(tmp_path / "state")

    class Source:
        watched = list(range(8))
        pending: list = []

        def poll(self):
            out, self.pending = self.pending, []
            return out

    now = time.time()
    witness = xids.Witness(Source(), clock=lambda: now)
    witness.since = now - 3600                              # the daemon watched for an hour
    got = {r.code: r for r in checks.run_fast(live, cfg, [3], kmsg=str(kmsg), nvml_seen=witness.seen)}
    assert got["xid_fatal"].status == "ok", got["xid_fatal"]     # old code: fail, and the node drained
    assert "corroborated by NVML" in got["xid_fatal"].detail
    # the same XID, seen by NVML's event API when it happened: it counts
    (tmp_path / "state").rename(tmp_path / "state0")
    witness = xids.Witness(Source(), clock=lambda: now - 59)
    witness.since = now - 3600
    witness.source.pending = [(3, 79)]
    witness.poll()
    witness.clock = lambda: now
    witness.poll()
    got = {r.code: r for r in checks.run_fast(live, cfg, [3], kmsg=str(kmsg), nvml_seen=witness.seen)}
    assert got["xid_fatal"].status == "fail" and "XID 79" in got["xid_fatal"].detail


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown)")
def test_the_plan_without_acls_goes_to_the_users_group_and_never_wider(tmp_path, monkeypatch):
    import errno
    import pwd

    from gpuperf.files import acl

    f = tmp_path / "plan"
    f.write_text("x")
    os.chmod(f, 0o600)

    def no_acl(*a, **kw):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "setxattr", no_acl)
    assert acl.grant_read(f, 65534) == "group"
    assert (os.stat(f).st_mode & 0o777, os.stat(f).st_gid) == (0o640, pwd.getpwuid(65534).pw_gid)
    os.chmod(f, 0o600)

    def denied(*a, **kw):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "setxattr", denied)
    assert acl.grant_read(f, 65534).startswith("none") and os.stat(f).st_mode & 0o777 == 0o600
    assert acl.grant_read(f, os.geteuid()) == "owner"
