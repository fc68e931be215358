"""Issue 28 on the real test cluster: a user's hostile job name and job-dir files (findings 2, 3, 4) and
socket floods (findings 5 to 8) leave the node daemon and the controller service running, each within
its unit's memory limit, and every job delivered to the controller, which writes each one's AdminComment.

The node daemon is the real one (replay backend) and sends its summaries to the real controller
service; both run as their packaged units run them (``tests/cluster/unitlimits.py``): the unit's
``ExecStart``, in a memory cgroup of its own set to the unit's ``MemoryMax`` (read from
``packaging/gpuperf-daemon.service`` and ``gpuperf-collector.service``), systemd's default file limit
(soft 1,024, hard 524,288; the daemon raises its soft limit to the hard one as it starts). Where
no memory cgroup can be made they run without one (their RSS is still held to the limits) and
``test_the_units_memory_limits_held_throughout`` skips, saying why. The jobs run as the cluster's
ordinary user. Figures: ``<cluster dir>/security_files_figures.json`` (hostile files, rendered by
benchmarks/security_files.py) and ``<cluster dir>/security_cluster_figures.json`` (the floods,
benchmarks/security_cluster.py -> benchmarks/results/security_cluster.md).
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import pytest

from cluster import host  # tests/ is on sys.path (its conftest.py)
from cluster.unitlimits import (SYSTEMD_NOFILE, Cgroup, Watch, proc_nofile, proc_status, start, stop, unit_argv,
                                unit_memory_max)

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from floods import collector_flood, held_connections, metrics_loris, user_socket_flood  # noqa: E402
from test_abuse_slurm import _vmhwm_kib  # noqa: E402
from test_daemon_slurm import _configure  # noqa: E402
from test_report_slurm import _admin_comment, _queue_state  # noqa: E402

pytestmark = pytest.mark.slurm

PREFIX = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf")
UNITS = {"daemon": "gpuperf-daemon.service", "controller": "gpuperf-collector.service"}
LIMIT = {k: unit_memory_max(u) for k, u in UNITS.items()}     # bytes: 256M and 512M as packaged
RSS_BOUND_KIB = 150 * 1024         # the abuse suite's bound for every root process
CTL_GROWTH_BOUND_MIB = 64          # issue 28: an unauthenticated flood costs the controller less than this


@dataclass
class Services:
    """The cluster's daemon and controller service as their units run them, and what they cost."""

    c: Any
    procs: dict = field(default_factory=dict)       # "daemon" / "controller" -> Popen
    cgroups: dict = field(default_factory=dict)     # the same keys -> Cgroup (empty: none could be made)
    no_cgroup: str | None = None                    # why not
    figures: dict = field(default_factory=dict)     # security_files_figures.json
    floods: dict = field(default_factory=dict)      # security_cluster_figures.json
    cg_peak: dict = field(default_factory=dict)     # the highest cgroup peak seen, bytes (peaks are reset per phase)
    pids: dict = field(default_factory=dict)        # as started: the same process must answer throughout

    @property
    def daemon(self):
        return self.procs["daemon"]

    def note_peaks(self) -> None:
        for k, cg in self.cgroups.items():
            self.cg_peak[k] = max(self.cg_peak.get(k, 0), cg.peak())


def _start_services(c, s: Services) -> None:
    from gpuperf.files import config
    from gpuperf.daemon import client

    stdio = open(c.dir / "log" / "services-stdio.log", "ab")
    ctl = start(unit_argv(UNITS["controller"], PREFIX), s.cgroups.get("controller"), env=c.env,
                stdout=stdio, stderr=stdio)
    s.procs["controller"] = ctl
    port = c.gpuperf_config()["controller"]["port"]
    host.wait_for(lambda: ctl.poll() is not None or _connects(port), 20, "the controller's collector")
    assert ctl.poll() is None, f"controller exited {ctl.returncode}: see {stdio.name}"
    d = start(unit_argv(UNITS["daemon"], PREFIX), s.cgroups.get("daemon"), env=c.env, stdout=stdio, stderr=stdio)
    s.procs["daemon"] = d
    cfg = config.load(str(c.gpuperf_config_path))

    def healthy() -> bool:   # its first health checks done: until then it turns prologs away
        assert d.poll() is None, f"daemon exited {d.returncode}: see {stdio.name}"
        try:
            return bool(client.call(cfg, "health", timeout_s=0.5)["ok"])
        except client.DaemonUnavailable:
            return False

    host.wait_for(healthy, 30, "the daemon's health")
    stdio.close()


def _connects(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def hostile(slurm_cluster):
    c = slurm_cluster
    cfg = _configure(c)
    cfg["controller"]["merge_wait_s"] = 15.0     # the daemon delivers after the epilog: wait for it
    # no cgroup here: the job's CPUs come from `scontrol show job -d`, the path a job name can reach
    cfg.setdefault("affinity", {})["cgroup_root"] = str(c.dir / "no-cgroup")
    cfg["daemon"].update(metrics_port=c.layout.metrics_port, metrics_address="127.0.0.1")   # for the slow loris
    c.write_gpuperf_config(cfg)
    s = Services(c, no_cgroup=Cgroup.unavailable())
    try:
        if s.no_cgroup is None:
            for k in UNITS:
                s.cgroups[k] = Cgroup(f"gpuperf-test-{c.layout.name}-{os.getpid()}-{k}", LIMIT[k])
        _start_services(c, s)
        s.pids = {k: p.pid for k, p in s.procs.items()}
        s.figures["daemon_vmhwm_kib_start"] = _vmhwm_kib(s.daemon.pid)
        yield s
    finally:
        if "daemon" in s.procs:
            s.figures["daemon_vmhwm_kib_end"] = _vmhwm_kib(s.daemon.pid) if s.daemon.poll() is None else None
        for k in ("daemon", "controller"):
            if k in s.procs:
                stop(s.procs[k])
        left = {k: cg.pids() for k, cg in s.cgroups.items() if cg.pids()}
        for pids in left.values():        # the services' own children (none expected): ours to end
            for pid in pids:
                os.kill(pid, 9)
        kept = [str(cg.path) for cg in s.cgroups.values() if not cg.remove()]
        s.floods["teardown"] = {"processes_left_in_cgroups": left, "cgroups_left": kept,
                                "cgroups_removed": bool(s.cgroups) and not kept}
        (c.dir / "security_files_figures.json").write_text(json.dumps(s.figures, indent=1, sort_keys=True))
        (c.dir / "security_cluster_figures.json").write_text(json.dumps(s.floods, indent=1, sort_keys=True))
        c.reset_gpuperf_config()
        assert not left and not kept, f"left behind: processes {left}, cgroups {kept}"


def _case(h, name: str, script: str, *args: str, wait_s: float = 120) -> tuple[int, dict, dict]:
    """Run the user's job; check the daemon lives within its memory and the job is delivered; (job, summary, prolog)."""
    c, daemon, figures = h.c, h.daemon, h.figures
    t0 = time.monotonic()
    job = c.sbatch(f"#!/bin/bash\nJ={c.run_dir}/jobs/$SLURM_JOB_ID\n{script}\n", "--gres=gpu:1", *args, user=c.user)
    assert c.wait(job, timeout=wait_s) == "COMPLETED", c.job_output(job)
    prolog = c.wait_record(job, "prolog")
    epilog = c.wait_record(job, "epilog", timeout=60)
    summary_path = c.run_dir / "jobs" / str(job) / "node_summary.json"
    host.wait_for(summary_path.exists, 60, f"job {job}'s node summary")
    assert daemon.poll() is None, "the node daemon died"
    hwm = _vmhwm_kib(daemon.pid)
    assert hwm < RSS_BOUND_KIB < LIMIT["daemon"] >> 10, hwm
    assert not any("drain" in s or "down" in s for s in c.node_states().values())
    assert _queue_state(c, job, timeout=90) == "done"
    comment = _admin_comment(c, job)
    assert comment.startswith("gpuperf:v1 "), comment           # delivered: the controller wrote it
    figures[name] = {"job": job, "daemon_vmhwm_kib": hwm, "job_to_admincomment_s": round(time.monotonic() - t0, 1),
                     "prolog_s": prolog.get("elapsed_s"), "prolog_maxrss_kib": prolog.get("maxrss_kib"),
                     "epilog_s": epilog.get("elapsed_s"), "epilog_maxrss_kib": epilog.get("maxrss_kib"),
                     "admincomment_chars": len(comment)}
    return job, json.loads(summary_path.read_text()), prolog


def test_a_job_name_holding_scontrols_fields_costs_nothing_and_sets_no_cpus(hostile):
    c = hostile.c
    node = c.node_names[0]
    # on the job's first line: Slurm's own detail line still decides (the job holds 1 CPU here)
    _, _, prolog = _case(hostile, "job-name-one-line", "srun -n1 true", f"--job-name=x Nodes={node} CPU_IDs=0-100000000 Mem=0 GRES=")
    aff = prolog["data"]["affinity"]
    assert aff["cpus_source"] == "scontrol" and aff["job_cpus"] in ("0", "0-1"), aff
    # a name and a comment with newlines and detail lines of their own: ambiguous, none believed
    fake = f"x\n     Nodes={node} CPU_IDs=0-15 Mem=0 GRES="
    _, _, prolog = _case(hostile, "job-name-newlines", "srun -n1 true", f"--job-name={fake}", f"--comment={fake}")
    assert prolog["data"]["affinity"]["cpus_source"] == "all", prolog["data"]["affinity"]


def test_a_cpus_record_of_a_hundred_million_cpus_fails_only_its_jobs_summary(hostile):
    c = hostile.c
    job, s, _ = _case(hostile, "applied-cpus-bomb", 'srun -n1 true\n'
                      'echo "job=$SLURM_JOB_ID step=0 rank=0 status=ok gpus=0 numa=0 cpus=0-100000000" > $J/applied/0.0')
    q = s["quality"]
    assert q["partial"] and any("applied/0.0: cpus: CPU 100000000 above" in r for r in q["ignored"]), q
    # the next job of the node: delivered as ever
    _, s2, _ = _case(hostile, "next-job", "srun -n1 true")
    assert not s2["quality"].get("ignored")


def test_4096_step_records_of_64_kib_cost_the_daemon_its_budget(hostile):
    c = hostile.c
    flood = ('srun -n1 true\nhead -c 65000 /dev/zero | tr "\\0" x > $J/env/.x\n'
             'for i in $(seq 0 4095); do printf \'{"step":"%d","exported":[["A","\' $i > $J/env/step-$i.json; '
             'cat $J/env/.x >> $J/env/step-$i.json; printf \'"]]}\' >> $J/env/step-$i.json; done\nrm $J/env/.x\n'
             'du -sh $J/env')
    job, s, _ = _case(hostile, "env-flood-4096x64k", flood, wait_s=300)
    assert "M" in c.job_output(job)                              # ~256 MB were written
    assert any("byte budget of env/" in r for r in s["quality"]["ignored"]), s["quality"]
    os.system(f"rm -rf {c.run_dir}/jobs/{job}/env")


# ---- socket floods while hostile and ordinary jobs run (findings 5 to 8) ------------------------------------
# Smaller than benchmarks/socket_floods.py's, each still past what breaks an unbounded process: the bytes offered
# beyond the target's memory limit, connections beyond the soft file limit it starts with (1,024) and its caps.

ORDINARY = "sleep 4\nsrun -n1 true"
HOSTILE_JOBS = {   # phase -> (what, script, sbatch args): the hostile job submitted with the phase's floods
    "user-parts": ("job name holding scontrol's fields", "srun -n1 true", ("--job-name=x Nodes={node} CPU_IDs=0-100000000 Mem=0 GRES=",)),
    "user-conns": ("applied/0.0 claiming CPUs 0-100000000", 'srun -n1 true\n'
                   'echo "job=$SLURM_JOB_ID step=0 rank=0 status=ok gpus=0 numa=0 cpus=0-100000000" > $J/applied/0.0', ()),
    "ctl-flood": ("512 env/step-N.json of 64 KiB (8x the env/ budget)", 'srun -n1 true\nhead -c 65000 /dev/zero | tr "\\0" x > $J/env/.x\n'
                  'for i in $(seq 0 511); do printf \'{"step":"%d","exported":[["A","\' $i > $J/env/step-$i.json; '
                  'cat $J/env/.x >> $J/env/step-$i.json; printf \'"]]}\' >> $J/env/step-$i.json; done\nrm $J/env/.x', ()),
    "metrics-loris": ("job name and comment with newlines and detail lines", "srun -n1 true",
                      ("--job-name=x\n     Nodes={node} CPU_IDs=0-15 Mem=0 GRES=", "--comment=x\n     Nodes={node} CPU_IDs=0-15 Mem=0 GRES=")),
}


def _as_uid(uid: int, gid: int, fn: Callable[[], dict]) -> dict:
    """``fn()`` in a child running as ``uid`` (a local user's flood); its dict."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # child: never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data or b"{}")


def _floods(s: Services) -> dict[str, tuple[str, Callable[[], dict]]]:
    c = s.c
    pw = pwd.getpwnam(c.user)
    usock = str(c.dir / "run" / "daemon-user" / "user.sock")
    port = c.gpuperf_config()["controller"]["port"]
    from gpuperf.controller import transport

    return {
        # a job's user: 2 x 192 MiB of ZMTP frames all flagged MORE, 2 parts claiming 1 GiB with 192 MiB streamed
        "user-parts": ("daemon", lambda: _as_uid(pw.pw_uid, pw.pw_gid, lambda: user_socket_flood(
            usock, more_conns=2, more_bytes=192 << 20, huge_conns=2, huge_claim=1 << 30, huge_bytes=192 << 20))),
        # 1,100 idle connections (past the starting soft file limit; 64 served) from 25 users, held 3 s
        "user-conns": ("daemon", lambda: held_connections(usock, range(62000, 62025), 44, 3.0)),
        # an unauthenticated peer: 300 idle connections from 10 addresses (past the 256 cap) held 1 s, then (so that
        # they reach the part reader, not the cap) 2 x 192 MiB ZMTP MORE, 2 kind parts and 2 credential parts (after
        # a valid kind) claiming 1 GiB each, 192 MiB streamed behind each
        "ctl-flood": ("controller", lambda: collector_flood(
            "127.0.0.1", port, idle=300, idle_hosts=10, more_conns=2, more_bytes=192 << 20, huge_conns=2,
            huge_claim=1 << 30, huge_bytes=192 << 20, huge_after_kind=2, kind=transport.KIND, idle_hold_s=1.0)),
        # 1,100 slow-loris connections to /metrics (past the starting soft file limit; 8 served), a byte a second, 5 s
        "metrics-loris": ("daemon", lambda: metrics_loris("127.0.0.1", c.layout.metrics_port, seconds=5.0,
                                                          total=1100, at_once=1100)),
    }


def _proc_row(s: Services, k: str, rss0: int, w: Watch) -> dict:
    p, cg = s.procs[k], s.cgroups.get(k)
    return {"alive": p.poll() is None, "same_pid": p.pid == s.pids[k], "exit": p.returncode,
            "rss_before_mib": round(rss0 / 1024, 1), "rss_peak_mib": round(w.rss_kib / 1024, 1),
            "rss_growth_mib": round((w.rss_kib - rss0) / 1024, 1),
            "vmhwm_mib": round(proc_status(p.pid, "VmHWM") / 1024, 1),
            "cgroup_peak_mib": round(cg.peak() / 2**20, 1) if cg else None,
            "oom_kills": cg.oom_kills() if cg else None, "limit_mib": LIMIT[k] >> 20,
            "peak_fds": w.fds, "peak_threads": w.threads}


def _phase(s: Services, name: str, target: str, flood: Callable[[], dict]) -> dict:
    c = s.c
    node = c.node_names[0]
    what, script, args = HOSTILE_JOBS[name]
    jobs = {"ordinary": [c.sbatch(ORDINARY + "\n", "--gres=gpu:1", user=c.user) for _ in range(2)]}
    jobs["hostile"] = [c.sbatch(f"#!/bin/bash\nJ={c.run_dir}/jobs/$SLURM_JOB_ID\n{script}\n", "--gres=gpu:1",
                                *(a.format(node=node) for a in args), user=c.user)]
    c.wait(jobs["ordinary"][0], states={"RUNNING"}, timeout=60)
    s.note_peaks()
    for cg in s.cgroups.values():
        cg.reset_peak()
    rss0 = {k: proc_status(p.pid, "VmRSS") for k, p in s.procs.items()}
    watches = {k: Watch(p.pid) for k, p in s.procs.items()}
    t0 = time.time()
    out = flood()
    took = time.time() - t0
    time.sleep(0.5)                      # what the flood left, seen once more
    for w in watches.values():
        w.stop()
    row = {"phase": name, "target": target, "flood_s": round(took, 1), "t0": t0, "t1": time.time(), **out,
           "hostile_job": what, "jobs": jobs,
           "procs": {k: _proc_row(s, k, rss0[k], watches[k]) for k in s.procs}}
    s.note_peaks()
    return row


def _window(c, job: int) -> tuple[float, float]:
    f = c.sacct(job, ["Start", "End"])
    return tuple(datetime.fromisoformat(f[k]).timestamp() for k in ("Start", "End"))   # type: ignore[return-value]


def test_socket_floods_under_the_units_memory_limits_while_hostile_and_ordinary_jobs_run(hostile):
    s, c = hostile, hostile.c
    s.floods.update(limits_mib={k: v >> 20 for k, v in LIMIT.items()}, units=UNITS, no_cgroup=s.no_cgroup,
                    cgroup_v2=next(iter(s.cgroups.values())).v2 if s.cgroups else None,
                    nofile_started=SYSTEMD_NOFILE, nofile_now={k: proc_nofile(p.pid) for k, p in s.procs.items()})
    s.note_peaks()   # the hostile name and file tests before this one ran under the same limits
    s.floods["before_floods"] = {k: {"vmhwm_mib": round(proc_status(p.pid, "VmHWM") / 1024, 1),
                                     "cgroup_peak_mib": round(s.cg_peak[k] / 2**20, 1) if k in s.cg_peak else None}
                                 for k, p in s.procs.items()}
    t_start = time.time()
    rows = []
    for name, (target, flood) in _floods(s).items():
        row = _phase(s, name, target, flood)
        rows.append(row)
        for k, pr in row["procs"].items():   # both alive, the same processes, within their limits, after every phase
            assert pr["alive"] and pr["same_pid"], (name, k, pr)
            assert pr["oom_kills"] in (None, 0), (name, k, pr)
            assert 0 < pr["vmhwm_mib"] < pr["limit_mib"] and pr["rss_peak_mib"] < pr["limit_mib"], (name, k, pr)
            assert pr["cgroup_peak_mib"] is None or pr["cgroup_peak_mib"] < pr["limit_mib"], (name, k, pr)
    s.floods["phases"] = rows
    parts = next(r for r in rows if r["phase"] == "user-parts")     # the user's floods reached the daemon's reader
    assert parts["connections"] == 4 and parts["answered"] == 2 and "exceeds" in parts["answer"], parts
    ctl = next(r for r in rows if r["phase"] == "ctl-flood")
    assert ctl["claimed_mib"] > LIMIT["controller"] >> 20 and ctl["offered_mib"] > CTL_GROWTH_BOUND_MIB
    assert ctl["idle_connections"] == 300 and ctl["answered"] == 4, ctl    # each claim refused with a reply
    assert ctl["procs"]["controller"]["rss_growth_mib"] < CTL_GROWTH_BOUND_MIB, ctl
    assert next(r for r in rows if r["phase"] == "metrics-loris")["scrape_after"] == "ok"
    # every job delivered: the controller wrote each one's AdminComment
    delivered = {}
    for row in rows:
        for kind, ids in row["jobs"].items():
            for job in ids:
                assert c.wait(job, timeout=120) == "COMPLETED", c.job_output(job)
                assert _queue_state(c, job, timeout=90) == "done", job
                comment = _admin_comment(c, job)
                assert comment.startswith("gpuperf:v1 "), (job, comment)
                start_t, end_t = _window(c, job)
                delivered[job] = {"kind": kind, "phase": row["phase"], "admincomment_chars": len(comment),
                                  "ran_during_flood": start_t <= row["t1"] and end_t >= row["t0"]}
    s.floods["jobs"] = delivered
    s.floods["floods_and_deliveries_s"] = round(time.time() - t_start, 1)
    assert all(p.poll() is None for p in s.procs.values())
    assert sum(j["ran_during_flood"] for j in delivered.values()) >= len(rows), delivered   # jobs ran meanwhile


def test_the_units_memory_limits_held_throughout(hostile):
    """The cgroups themselves: no OOM kill and every peak below the unit's MemoryMax over the whole module."""
    s = hostile
    if s.no_cgroup:
        pytest.skip(f"no memory cgroup here ({s.no_cgroup}): the services ran without their units' limits")
    s.note_peaks()
    for k, cg in s.cgroups.items():
        assert s.procs[k].poll() is None and s.procs[k].pid == s.pids[k], k
        assert cg.oom_kills() == 0, (k, cg.oom_kills())
        assert 0 < s.cg_peak[k] < LIMIT[k], (k, s.cg_peak[k], LIMIT[k])
    s.floods["module_cgroup_peak_mib"] = {k: round(v / 2**20, 1) for k, v in s.cg_peak.items()}
    s.floods["module_oom_kills"] = {k: cg.oom_kills() for k, cg in s.cgroups.items()}
