"""The real-application zoo as ordinary users' sbatch jobs on real GPUs, each read through every reader (issue 35).

    bash tests/gpu/node.sh BUNDLE run python3 benchmarks/device/zoo_slurm.py --out $OUT/zoo_slurm.json

On a GPU machine (``tests/gpu/README.md``): the test cluster on the machine's real GPUs with gpuperf fully on
(``gpunode.bring_up``: NVML sampling, SPANK, TaskProlog, collector). Each ``zoo_app_*`` workload runs as
``gpuperf-user`` with one GPU (jobs run side by side on a machine of several GPUs), and once it ended its
judgement is read from every place a person reads it: the AdminComment (sacct), the owner's ``gpuperf report
--json`` (sacct or the node daemon: the controller's store is root's), the admin's (the controller's store), the
owner's ``--html`` page. Written: per job, each reader's class, phases and whether its story (diagnosis and
estimates, ``tests/unit/report_fixtures.story``) equals the AdminComment's, and the workload's LABEL; the last
lines printed are the per-reader table. Nothing here is judged against a bar: the committed file is the record.
"""

from __future__ import annotations

import argparse
import html as html_mod
import json
import os
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "gpu"), str(REPO / "tests" / "unit"), str(REPO / "benchmarks"),
                str(REPO)]

from gpunode import bring_up, tear_down, torch_python, wait_admincomment  # noqa: E402
from report_fixtures import story  # noqa: E402
from zoo_matrix import labels  # noqa: E402

from gpuperf.model import admincomment  # noqa: E402

WORKLOADS = REPO / "benchmarks" / "workloads"
LONG = ("zoo_app_phases_", "zoo_app_train_eval_")


def shown(c, job: int, *args: str, user: str | None = None) -> dict | None:
    """What ``gpuperf report JOBID`` shows as ``user``: its --json, or the summary its --html page embeds."""
    if "--html" not in args:
        p = c.run("gpuperf", "report", job, "--json", *args, user=user)
        return json.loads(p.stdout) if p.returncode == 0 else None
    d = c.dir / "out" / f"html-{job}-{user or 'root'}"
    d.mkdir(exist_ok=True)
    d.chmod(0o777)
    if c.run("gpuperf", "report", job, *args, d / "job.html", user=user).returncode != 0:
        return None
    m = re.search(r"<pre>(.*?)</pre>", (d / "job.html").read_text(), re.S)
    return json.loads(html_mod.unescape(m.group(1))) if m else None


def phases(s: dict | None) -> str:
    """'startup 20%, compute_bound 80%' of a summary's diagnosis."""
    ph = ((s or {}).get("diagnosis") or {}).get("phases") or []
    return ", ".join(f"{p.get('class')} {p.get('share_pct', 0):.0f}%" for p in ph)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--long-seconds", type=float, default=15.0)
    ap.add_argument("--only", default="", help="comma-separated workloads (default: every zoo_app_*)")
    ap.add_argument("--limit-s", type=float, default=420.0, help="submit no job after this many seconds")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or sorted(p.stem for p in WORKLOADS.glob("zoo_app_*.py"))
    py = torch_python()
    if py is None:
        print("zoo_slurm: no Python with PyTorch and CUDA", file=sys.stderr)
        return 2
    c, saved, procs = bring_up(os.environ.get("GPUPERF_TEST_CLUSTER", "gpu"), py)
    t0, rows, labelled = time.monotonic(), [], labels()
    # the test cluster's job user has no home: CuPy's and Triton's kernel caches go under it
    env = ("export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 HF_HUB_OFFLINE=1 XLA_PYTHON_CLIENT_PREALLOCATE=false\n"
           "export HOME=/tmp/zoo-home-$SLURM_JOB_ID && mkdir -p $HOME\n")
    try:
        jobs = {}
        for n in names:
            if time.monotonic() - t0 > a.limit_s:
                print(f"zoo_slurm: {n} not submitted (at {time.monotonic() - t0:.0f} s)")
                continue
            s = a.long_seconds if n.startswith(LONG) else a.seconds
            script = env + f"cd {c.workloads}\n{py} {c.workloads}/{n}.py --seconds {s}\n"
            jobs[n] = c.sbatch(script, "--gres=gpu:1", "-c8", "-J", n[8:][:20], user=c.user)
        for n, job in jobs.items():
            state = c.wait(job, timeout=600)
            row = wait_admincomment(c, job, state, timeout=90)
            ac = c.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment%65535").stdout.strip()
            readers = {"AdminComment": admincomment.decode(ac) if admincomment.is_admincomment(ac) else None,
                       "owner --json": shown(c, job, user=c.user), "admin --json": shown(c, job),
                       "owner --html": shown(c, job, "--html", user=c.user)}
            base = readers["AdminComment"]
            lab = labelled.get(n, {})
            rows.append({"workload": n, "job": job, "state": state, "label": lab.get("class"),
                         "headline": row.get("AdminComment", "")[:300],
                         "readers": {k: {"class": ((v or {}).get("diagnosis") or {}).get("class"),
                                         "phases": phases(v),
                                         "same_story": v is not None and base is not None and story(v) == story(base)}
                                     for k, v in readers.items()}})
    finally:
        Path(a.out).write_text(json.dumps({"machine": os.uname().nodename, "rows": rows}, indent=1))
        tear_down(c, saved, procs)
    print(f"{'workload':38} {'label':15} " + " ".join(f"{k:16}" for k in ("AdminComment", "owner --json",
                                                                        "admin --json", "owner --html")) + " same")
    for r in rows:
        cls = [r["readers"][k]["class"] or "-" for k in ("AdminComment", "owner --json", "admin --json", "owner --html")]
        same = all(r["readers"][k]["same_story"] for k in r["readers"])
        print(f"{r['workload'][8:]:38} {r['label'] or '-':15} " + " ".join(f"{x:16}" for x in cls) + f" {same}")
    ok = {k: sum(r["readers"][k]["class"] == r["label"] for r in rows) for k in rows[0]["readers"]} if rows else {}
    print(f"classed as labelled, of {len(rows)}: {ok}; every reader the same story: "
          f"{sum(all(r['readers'][k]['same_story'] for k in r['readers']) for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
