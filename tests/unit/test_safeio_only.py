"""Root reads what a job's user can write only through ``gpuperf.files.safeio``: a grep over the root side.

Every file read (``read_text``, ``glob``, ``open``, ``listdir``, ``jobstate.read_json`` ...) in the code
that runs as root (hooks, daemon, controller, report) must either be in ``safeio`` or be listed here
with the reason its path is not user-writable. A new read fails this test until it is one or the other.
"""

from __future__ import annotations

import re
from pathlib import Path

import gpuperf

ROOT = Path(gpuperf.__file__).parent
ROOT_SIDE = ["prolog", "epilog", "daemon", "report", "controller", "model/summary.py", "files/jobstate.py",
             "hookbase/hook.py", "hookbase/watchdog.py", "commands/report.py", "files/jobdirs.py",
             "env/report.py", "affinity/report.py", "jobrecords"]
READS = re.compile(r"\.read_text\(|\.read_bytes\(|\.glob\(|glob\.glob\(|\.iterdir\(|os\.listdir\(|os\.scandir\(|"
                   r"(?<![\w.])open\(|(?<!os)\.open\(|jobstate\.read_json\(|json\.load\(")

# the line's text (so code moving between modules keeps its entry) -> why its path is not the user's
ALLOWED = {
    'with open(path, encoding="utf-8") as f:': "[affinity] topology_file: a path in root's config",
    "return json.load(f)": "the topology file above / jobstate.read_json (root's files)",
    "for path in sorted(glob.glob(pat)):": "Slurm's cgroup tree (root's cgroupfs)",
    "text = Path(path).read_text().strip()": "a cpuset file of Slurm's cgroup tree",
    "planned = jobstate.read_json(d / REPORT_FILE)": "affinity.json: root's file in the root-owned job dir",
    "parsed = affinity.parse_plan_text((d / PLAN_FILE).read_text())": "affinity.plan: root's, root-owned job dir",
    "return affinity.parse_plan_text(plan_path(run_dir, job_id).read_text()).warnings": "affinity.plan (root's)",
    'affinity = jobstate.read_json(d / "affinity.json")  # not user-writable: root\'s file in root\'s dir': "same",
    "with open(path) as f:": "jobstate.read_json itself: used only on root's files (this test checks the callers)",
    'with open(os.path.join(self.proc_root, str(pid), name), "rb" if binary else "r") as f:':
        "/proc/PID/{stat,cgroup,environ}: kernel files; environ is bounded by the reader (attribution)",
    "peers = [int(x) for x in procs_file.read_text().split()][:MAX_CGROUP_PEERS]": "cgroup.procs (kernel, root's)",
    'with open(os.path.join(directory, "cpuacct.usage")) as f:': "cgroup counter (kernel)",
    'with open(os.path.join(directory, "cpu.stat")) as f:': "cgroup counter (kernel)",
    "names = os.listdir(attr.proc_root)": "/proc",
    'with open(os.path.join(attr.proc_root, name, "stat")) as fh:': "/proc/PID/stat (kernel, bounded)",
    'with open(os.path.join(proc_root, "sys", "kernel", "task_delayacct")) as f:': "sysctl",
    "return sorted(os.listdir(p))": "sysfs net class",
    "return float(p.read_text().strip())": "sysfs counter",
    'self._lockfile = open(d / "daemon.lock", "a+")': "daemon state dir (root's)",
    'with open(os.path.join(self.attr.proc_root, key.split(":", 1)[0], "cgroup")) as f:': "/proc/PID/cgroup (kernel)",
    "names = os.listdir(d)": "pending markers and the outbox: root-only state dir",
    "with os.scandir(jobs_dir) as it:": "<run_dir>/jobs: root's directory; entries are lstat'ed, never opened or followed",
    "data = jobstate.read_json(p)": "pending marker (root-only state dir)",
    's = jobstate.read_json(jobstate.job_dir(run_dir, job_id) / "node_summary.json")   # root\'s file, root\'s dir':
        "node_summary.json: root's file in the root-owned job dir",
    'with open(args.html, "w", encoding="utf-8") as f:': "a write, to the caller's own path",
    "self.open()": "the daemon opening its own store and sockets",
    'with open(os.path.join(self.proc_root, str(pid), "environ"), "rb", buffering=0) as f:':
        "/proc/PID/environ: read in bounded chunks by attribution._environ_entries",
    'with open(os.path.join(proc_root, str(pid), "maps"), "rb", buffering=0) as f:':
        "/proc/PID/maps: written by the kernel, read in bounded chunks (max_bytes) off the loop thread within "
        "the Deadline by procread.read_maps",
    'with open(os.path.join(attr.proc_root, key.split(":", 1)[0], "cgroup")) as f:': "/proc/PID/cgroup (kernel)",
    'f = open(d / "daemon.lock", "a+")': "daemon state dir (root's)",
    'with gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8") as f:':
        "a recording named on the caller's own command line (tests, demos)",
    'with open(dest, "w", encoding="utf-8") as f:': "a write, to the caller's own path",
    'self.log = open(log_path, "a", buffering=1) if log_path else None': "a write, to the controller's own log",
    'entries = [e for e in os.scandir(spool) if e.name.endswith(SUFFIX) and not e.name.startswith(".")]':
        "controller.spool_dir: SlurmUser's, made with umask 077 by gpuperf-epilog-slurmctld",
    "out.append((p, parse(p.read_text(), e.stat().st_mtime)))": "a notice in the SlurmUser-only spool dir",
}


def _reads() -> list[tuple[str, int, str]]:
    out = []
    for entry in ROOT_SIDE:
        p = ROOT / entry
        assert p.exists(), f"gpuperf/{entry} is gone: name where that code lives now in ROOT_SIDE"
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            for i, line in enumerate(f.read_text().splitlines(), 1):
                text = line.strip()
                if text.startswith("#") or not READS.search(line) or "subprocess.Popen" in line or "def open(" in line:
                    continue
                out.append((str(f.relative_to(ROOT)), i, text))
    return out


def test_root_reads_user_writable_files_only_through_safeio():
    unknown = [f"{f}:{i}: {t}" for f, i, t in _reads() if t not in ALLOWED]
    assert not unknown, ("read these through gpuperf.files.safeio (the job's user may write them), or list them in "
                         "ALLOWED with the reason their path is not user-writable:\n" + "\n".join(unknown))


def test_the_grep_finds_what_it_should():
    # the two reads that were the bugs: put back, this test would fail on them
    assert READS.search("for f in sorted(d.glob(\"*\")):") and READS.search("f.read_text(errors=\"replace\")")
    assert READS.search("plan = jobstate.read_json(d / envtask.CACHE)")
