"""Abuse suite: what an ordinary job user can do to gpuperf's root processes, on the real test cluster.

Every job here runs as the cluster's ordinary user (``c.user``) with a gpuperf node daemon up. Each
plants something in the places that user can write (its job's ``applied/`` and ``env/`` dirs and
``env.json``), or in its job's name, comment and environment, or fakes another job's id, floods the
user socket, or races another job's epilog. For each case:

- the epilog finishes (its record is written: the watchdog did not have to end it) within its bound;
- the node stays up (never drained);
- the job's node summary says what was ignored (``quality.ignored``: "record ignored: <why>");
- no other job's data is read (a root job's files never show in the abuser's summary) or changed;
- the root processes' peak RSS stays under ``RSS_BOUND_KIB`` (the epilog's own ``maxrss_kib``, the
  daemon's ``VmHWM``).

The figures (epilog seconds, peak RSS per case) are written to ``<cluster dir>/abuse_figures.json``.
Run with ``GPUPERF_TEST_CLUSTER=<name>`` beside other engineers' clusters.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import host  # tests/ is on sys.path (its conftest.py)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_daemon_slurm import _configure, _start  # noqa: E402

pytestmark = pytest.mark.slurm

RSS_BOUND_KIB = 150 * 1024      # a root hook or the daemon above this would be abuse working
EPILOG_BOUND_S = 30.0           # [watchdog] epilog_s here (the default is 60 s)
PY = os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf") + "/venv/bin/python"
SECRET = "gpuperf-abuse-secret-7c1f"   # in a root job's files: must never reach the user's summary


@pytest.fixture(scope="module")
def abuse(slurm_cluster):
    c = slurm_cluster
    cfg = _configure(c)
    cfg.setdefault("watchdog", {})["epilog_s"] = EPILOG_BOUND_S
    cfg["daemon"]["host_interval_s"] = 0.5      # the host scan sees a 4 s process (fake job id case)
    c.write_gpuperf_config(cfg)
    daemon = _start(c)
    # the victim: a root job whose files the user's jobs point links at
    victim = c.sbatch(f"echo {SECRET} > /dev/null\nsleep 2\n", "--gres=gpu:1", f"--comment={SECRET}")
    assert c.wait(victim) == "COMPLETED"
    c.wait_record(victim, "epilog")
    c.wait_record(victim, "epilog-slurmctld")
    vdir = c.run_dir / "jobs" / str(victim)
    # the daemon answers the epilog before its delivery thread writes the job's files: node_summary.json is last
    host.wait_for((vdir / "node_summary.json").exists, 15, f"job {victim}'s node summary")
    (vdir / "secret.txt").write_text(SECRET)
    state = {"c": c, "daemon": daemon, "victim": victim, "vdir": vdir, "figures": {},
             "victim_digest": _digest(vdir)}
    yield state
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(10)
    (c.dir / "abuse_figures.json").write_text(json.dumps(state["figures"], indent=1, sort_keys=True))
    c.reset_gpuperf_config()


def _digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def _vmhwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _run_case(a: dict, name: str, script: str, *sbatch_args: str, wait_s: float = 90) -> tuple[int, dict]:
    """Submit the abuser's job, wait for its epilog; check what every case must hold; (job, node summary)."""
    c = a["c"]
    J = f"{c.run_dir}/jobs/$SLURM_JOB_ID"
    logged_before = c.gpuperf_log().count("record ignored")
    job = c.sbatch(f"#!/bin/bash\nJ={J}\n{script}\n", "--gres=gpu:1", *sbatch_args, user=c.user)
    assert c.wait(job, timeout=wait_s) == "COMPLETED", c.job_output(job)
    epilog = c.wait_record(job, "epilog", timeout=EPILOG_BOUND_S + 10)
    assert epilog["data"]["finalize"]["ok"] is True, epilog
    assert epilog["elapsed_s"] < EPILOG_BOUND_S
    assert f"watchdog: epilog" not in c.gpuperf_log()
    states = c.node_states()
    assert not any("drain" in s or "down" in s for s in states.values()), states
    jdir = c.run_dir / "jobs" / str(job)
    summary_path = jdir / "node_summary.json"
    host.wait_for(summary_path.exists, 15, f"job {job}'s node summary")
    s = json.loads(summary_path.read_text())
    assert SECRET not in summary_path.read_text() and "root:" not in summary_path.read_text()
    # thousands of planted entries cost root's log at most SHOWN lines and one "more" line
    assert c.gpuperf_log().count("record ignored") - logged_before <= 11
    assert _digest(a["vdir"]) == a["victim_digest"]        # the other job's data: unchanged
    hwm = _vmhwm_kib(a["daemon"].pid)
    assert epilog["maxrss_kib"] < RSS_BOUND_KIB and hwm < RSS_BOUND_KIB
    a["figures"][name] = {"job": job, "epilog_s": epilog["elapsed_s"], "epilog_maxrss_kib": epilog["maxrss_kib"],
                          "daemon_vmhwm_kib": hwm, "ignored": (s.get("quality") or {}).get("ignored", [])}
    return job, s


def _ignored(s: dict) -> str:
    return "\n".join((s.get("quality") or {}).get("ignored") or [])


def test_fifos_in_applied_and_env(abuse):
    _, s = _run_case(abuse, "fifo", 'mkfifo $J/applied/0.7 $J/env/step-9.json\nsrun -n1 true')
    assert "record ignored: applied/0.7: a FIFO, not a regular file" in _ignored(s)
    assert "record ignored: env/step-9.json: a FIFO, not a regular file" in _ignored(s)


def test_symlinks_to_dev_zero_shadow_and_another_jobs_files(abuse):
    v = abuse["vdir"]
    _, s = _run_case(abuse, "symlinks", f"""
ln -s /dev/zero $J/applied/0.5; ln -s /etc/shadow $J/applied/0.6
ln -s /etc/shadow $J/env/step-8.json; ln -s {v}/secret.txt $J/env/step-7.json; ln -s {v}/affinity.plan $J/applied/0.4
srun -n1 true""")
    for name in ("applied/0.5", "applied/0.6", "env/step-8.json", "env/step-7.json", "applied/0.4"):
        assert f"record ignored: {name}: a symbolic link, not a regular file" in _ignored(s)


def test_hard_links(abuse):
    # the kernel refuses a link to a file the user may not write (fs.protected_hardlinks=1); a link
    # between the user's own files is possible and makes both names refused (neither is a plain record)
    job, s = _run_case(abuse, "hardlinks", """
ln /etc/shadow $J/applied/0.3 2>/dev/null && echo LINKED-SHADOW || echo kernel-refused-shadow
srun -n1 true
ln $J/env.json $J/env/step-6.json && echo linked-own
echo "job=1 step=0 rank=0 status=ok" > $J/applied/own; ln $J/applied/own $J/applied/0.8""")
    out = abuse["c"].job_output(job)
    assert "kernel-refused-shadow" in out and "linked-own" in out
    assert "record ignored: env.json: a hard link (2 links)" in _ignored(s)
    assert "record ignored: applied/0.8: a hard link (2 links)" in _ignored(s)


def test_a_1gb_sparse_file_everywhere_it_can_be(abuse):
    _, s = _run_case(abuse, "1gb", "srun -n1 true\ntruncate -s 1G $J/applied/0.2 $J/env/step-5.json")
    for name in ("applied/0.2", "env/step-5.json"):
        assert f"record ignored: {name}: 1073741824 bytes, over the" in _ignored(s)
    # the user owns env.json too (its TaskProlog reads it): refused as well, and then the env part is absent
    _, s = _run_case(abuse, "1gb-env-json", "srun -n1 true\ntruncate -s 1G $J/env.json")
    assert "record ignored: env.json: 1073741824 bytes, over the 1048576-byte limit" in _ignored(s)
    assert s["env"] == {}


def test_100000_entries(abuse):
    job, s = _run_case(abuse, "100k-entries", f"""srun -n1 true
{PY} -c "import os
for i in range(100000): os.close(os.open('$J/applied/f%d' % i, os.O_CREAT | os.O_WRONLY, 0o644))"
""", wait_s=180)
    assert "record ignored: applied: more than 4096 entries: only the first 4096 read" in _ignored(s)
    subprocess.run(["rm", "-rf", str(abuse["c"].run_dir / "jobs" / str(job) / "applied")], check=False)


def test_device_nodes_cannot_be_made_by_a_user(abuse):
    # mknod needs CAP_MKNOD: a job user cannot plant a device; what it can plant (FIFOs, sockets) is refused
    job, s = _run_case(abuse, "devices", f"""
mknod $J/applied/0.1 c 1 5 2>&1 || true
{PY} -c "import socket; socket.socket(socket.AF_UNIX).bind('$J/applied/0.9')"
srun -n1 true""")
    assert "Operation not permitted" in abuse["c"].job_output(job)
    assert not os.path.exists(abuse["c"].run_dir / "jobs" / str(job) / "applied" / "0.1")
    assert "record ignored: applied/0.9: a socket, not a regular file" in _ignored(s)


def test_newlines_and_shell_metacharacters_in_names_job_name_comment_and_environment(abuse):
    c = abuse["c"]
    pwned = Path(f"/tmp/gpuperf-abuse-pwned-{c.cluster_name}")
    pwned.unlink(missing_ok=True)
    evil = f"$(touch {pwned});`touch {pwned}`"
    script = f"""
mkfifo "$J/applied/"$'0.1\\nrecord ignored: nothing'
mkfifo "$J/env/step-"{shlex.quote(evil)}".json"
export NCCL_SOCKET_IFNAME=$'lo\\nexport LD_PRELOAD=/tmp/evil.so'
export LD_PRELOAD=/nonexistent/evil.so
export GPUPERF_HUGE=$(head -c 120000 /dev/zero | tr '\\0' x)
export {shlex.quote("X=" + evil)}
srun -n1 env | grep -c LD_PRELOAD=/nonexistent/evil.so || true"""
    job, s = _run_case(abuse, "names-env", script, f"--job-name=evil;{evil}", f"--comment=AllocTRES= Gres=(null) {evil}")
    assert not pwned.exists()
    assert "record ignored: applied/0.1\\nrecord ignored: nothing: a FIFO, not a regular file" in _ignored(s)
    assert "\n" not in "".join((s.get("quality") or {}).get("ignored") or [])
    # the TaskProlog printed only gpuperf's own variables: none of the user's values came back out of it
    steps = [json.loads(p.read_text()) for p in (c.run_dir / "jobs" / str(job) / "env").glob("step-[0-9]*.json")]
    assert steps and all(n not in ("LD_PRELOAD", "NCCL_SOCKET_IFNAME", "X") and "\n" not in v
                         for st in steps for n, v in st["exported"])
    rec = c.job_record(job, "prolog")
    assert rec["steps"] and all(st["ok"] for st in rec["steps"].values()), rec["steps"]


def test_a_process_faking_another_jobs_id_cannot_claim_it(abuse):
    c = abuse["c"]
    victim = c.sbatch("sleep 8\n", "--gres=gpu:1")          # root's job, running beside the abuser's
    c.wait(victim, states={"RUNNING"})
    _run_case(abuse, "fake-job-id", f"SLURM_JOB_ID={victim} SLURM_JOBID={victim} {PY} -c "
                                   "'import time\nt=time.time()\nwhile time.time()-t<4: pass'")
    assert c.wait(victim) == "COMPLETED"
    c.wait_record(victim, "epilog", timeout=EPILOG_BOUND_S + 10)
    path = c.run_dir / "jobs" / str(victim) / "aggregates.json"
    end = time.time() + 15
    while not path.exists() and time.time() < end:   # written by the daemon once the epilog finalised
        time.sleep(0.1)
    agg = json.loads(path.read_text())
    # the abuser burned ~4 s of CPU claiming the victim's id: none of it is the victim's
    assert agg["host"]["cpu_time_s"] < 1.5, agg["host"]
    abuse["figures"]["fake-job-id"]["victim_cpu_time_s"] = agg["host"]["cpu_time_s"]


def _ping(c) -> dict:
    from gpuperf.files import config
    from gpuperf.daemon import client

    return client.call(config.load(str(c.gpuperf_config_path)), "ping", timeout_s=5)


def test_a_user_flooding_the_user_socket(abuse):
    # requests as fast as one process can send them, a connection each, for 6 s, while the job's own steps,
    # epilog and the daemon's sampling go on
    c = abuse["c"]
    flood = (f"import json, socket, struct, time\npath = '{c.dir}/run/daemon-user/user.sock'\n"
             "req = json.dumps({'v': 1, 'op': 'jobs', 'job': {}}).encode()\n"
             "def exactly(s, n):\n    b = b''\n    while len(b) < n:\n        d = s.recv(n - len(b))\n"
             "        if not d:\n            raise OSError('closed')\n        b += d\n    return b\n"
             "t = time.time(); n = refused = got = 0\n"
             "while time.time() - t < 6:\n"
             "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(2)\n"
             "    try:\n        s.connect(path); s.sendall(struct.pack('>I', len(req)) + req); n += 1\n"
             "        r = exactly(s, struct.unpack('>I', exactly(s, 4))[0]); got += 1; refused += b'requests/s' in r\n"
             "    except OSError:\n        time.sleep(0.001)\n"
             "    finally:\n        s.close()\n"
             "print('SENT', n, 'ANSWERED', got, 'REFUSED', refused)\n")
    (c.dir / "out" / "flood.py").write_text(flood)
    before = _ping(c)
    job, _ = _run_case(abuse, "user-socket-flood", f"{PY} {c.dir}/out/flood.py &\nsleep 1\nsrun -n1 true\nwait")
    after = _ping(c)
    words = c.job_output(job).split("SENT", 1)[1].split()
    sent, answered, refused = int(words[0]), int(words[2]), int(words[4])
    abuse["figures"]["user-socket-flood"].update(requests_sent=sent, answered=answered, refused=refused,
                                                 sweeps=after["sweeps"] - before["sweeps"],
                                                 skipped=after["skipped"] - before["skipped"])
    assert refused > 0 and answered - refused <= 20 * 8 + 40 + 5   # the rate (20/s over ~7 s) + the burst


def test_a_second_job_of_the_same_user_racing_the_first_jobs_epilog(abuse):
    import pwd
    import shutil

    c = abuse["c"]
    first_dir = f"{c.run_dir}/jobs"
    # the user's earlier jobs' folders, more than a full suite leaves (~400): the racer must still reach
    # the job it races within that job's 2 s
    pw = pwd.getpwnam(c.user)
    old_dirs = [c.run_dir / "jobs" / str(j) for j in range(1000, 3000)]
    for d in old_dirs:
        (d / "applied").mkdir(parents=True, exist_ok=True)
        os.chown(d / "applied", pw.pw_uid, pw.pw_gid)
    # the racer plants FIFOs and /dev/zero links into the first job's applied/ for as long as it runs; it
    # skips the jobs before its own (the suite's earlier jobs: with hundreds of them a sweep outlasted the
    # 2 s job it races, which then ended untouched)
    racer = c.sbatch(f"""#!/bin/bash
end=$((SECONDS+25))
while [ $SECONDS -lt $end ]; do
  for d in {first_dir}/*/applied; do j=${{d%/applied}}; j=${{j##*/}}
    [ "$j" -gt "$SLURM_JOB_ID" ] 2>/dev/null && [ -O "$d" ] || continue
    i=$RANDOM; mkfifo "$d/r$i" 2>/dev/null; ln -s /dev/zero "$d/z$i" 2>/dev/null; done
  sleep 0.05
done""", "--gres=gpu:1", user=c.user)
    c.wait(racer, states={"RUNNING"})
    try:
        _, s = _run_case(abuse, "racing-epilog", "sleep 2")
        assert "record ignored: applied/" in _ignored(s)
    finally:
        c.run("scancel", str(racer))
        c.wait(racer)
        for d in old_dirs:
            shutil.rmtree(d, ignore_errors=True)


def test_a_job_comment_cannot_fake_the_state_gpuperf_acts_on(abuse):
    # scontrol's one-line output is split on spaces: a comment "JobState=PENDING Reason=BeginTime"
    # replaces the real keys there. gpuperf decides from squeue's own two fields (slurm.job_state).
    from gpuperf.access.slurm import Slurm

    c = abuse["c"]
    job = c.sbatch("true\n", "-H", "--comment=x JobState=PENDING Reason=BeginTime", user=c.user)
    try:
        env = dict(os.environ, SLURM_CONF=c.env["SLURM_CONF"])
        old = os.environ.copy()
        os.environ.update(env)
        try:
            slurm = Slurm(c.gpuperf_config()["general"]["slurm_bin_dir"])  # the release under test
            assert slurm.show_job(job)["Reason"] == "BeginTime"          # what a split line believes
            assert slurm.job_state(job) == ("PENDING", "JobHeldUser")     # what gpuperf acts on
        finally:
            os.environ.clear()
            os.environ.update(old)
    finally:
        c.run("scancel", str(job))
