"""Hostile job names and job-dir files against the node daemon (issue 28): run the cluster test, render
its figures as ``benchmarks/results/security_files.md``.

    GPUPERF_PREFIX=/tmp/gp-NAME GPUPERF_TEST_CLUSTER=NAME python3 benchmarks/security_files.py [--no-run]

Runs ``tests/integration/test_hostile_files_slurm.py`` (root, the test cluster NAME, an editable
install at GPUPERF_PREFIX), then turns ``/tmp/gpuperf-slurm-NAME/security_files_figures.json`` into the
table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures import cluster_test_figures  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("job-name-one-line", '`--job-name="x Nodes=<node> CPU_IDs=0-100000000 Mem=0 GRES="`',
     "CPUs from Slurm's own detail line (`cpus_source` scontrol)"),
    ("job-name-newlines", "name and comment each holding `\\n     Nodes=<node> CPU_IDs=0-15 Mem=0 GRES=`",
     "two runs of detail lines: none believed (`cpus_source` all)"),
    ("applied-cpus-bomb", "`applied/0.0` with `cpus=0-100000000` (60 bytes)",
     "partial; `record ignored: applied/0.0: cpus: CPU 100000000 above the highest CPU id 16383`"),
    ("next-job", "the node's next job, honest", "complete"),
    ("env-flood-4096x64k", "4,096 `env/step-N.json` of 65 KB (257 MB)",
     "partial; 64 records read (4 MiB budget of `env/`), the rest refused and counted"),
]


def render(fig: dict, load: str) -> str:
    """The results page from the test's figures."""
    mib = lambda k: f"{k / 1024:.1f}" if k else "?"  # noqa: E731
    rows = [f"| (daemon at start) | {mib(fig.get('daemon_vmhwm_kib_start'))} | | | | |"]
    for key, what, result in CASES:
        f = fig.get(key)
        if f:
            rows.append(f"| {what} | {mib(f['daemon_vmhwm_kib'])} | {f['prolog_s']} | {f['epilog_s']} | "
                        f"{f['job_to_admincomment_s']} | {result} |")
    return (Path(__file__).with_name("security_files.md.in").read_text()
            .replace("@ROWS@", "\n".join(rows)).replace("@LOAD@", load))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-run", action="store_true", help="render the figures of the last run only")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "security_files.md"))
    a = ap.parse_args()
    run = cluster_test_figures(ROOT, "tests/integration/test_hostile_files_slurm.py", "security_files_figures.json",
                               not a.no_run)
    if run["rc"]:
        return run["rc"]
    Path(a.out).write_text(render(run["figures"], f"{time.strftime('%Y-%m-%d')}, {run['load']}"))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
