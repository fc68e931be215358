"""The abuse suite's figures: run ``tests/integration/test_abuse_slurm.py`` on a test cluster of its own and
render ``<cluster dir>/abuse_figures.json`` as ``benchmarks/results/abuse.md``.

    GPUPERF_PREFIX=/tmp/gp-NAME GPUPERF_TEST_CLUSTER=NAME python3 benchmarks/abuse_figures.py [--no-run]

Root, an editable install at GPUPERF_PREFIX (``bash packaging/install.sh --test``), the test cluster NAME.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures import cluster_test_figures, provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAIN = {"job", "epilog_s", "epilog_maxrss_kib", "daemon_vmhwm_kib", "ignored"}


def render(fig: dict, header: str) -> str:
    """The page from the suite's figures, one row per case."""
    rows = []
    for case, f in sorted(fig.items()):
        notes = ", ".join(f"{k}={round(v, 3) if isinstance(v, float) else v}" for k, v in sorted(f.items()) if k not in MAIN)
        rows.append(f"| {case} | {f['epilog_s']:.2f} | {f['epilog_maxrss_kib'] / 1024:.1f} | "
                    f"{f['daemon_vmhwm_kib'] / 1024:.1f} | {len(f.get('ignored') or [])} | {notes} |")
    return f"""<!-- rendered by benchmarks/abuse_figures.py: do not edit the numbers -->
# Abuse suite figures

{header}

`tests/integration/test_abuse_slurm.py` on the real single-node test cluster: jobs as the ordinary user,
the real node daemon up (replay backend), `[watchdog] epilog_s = 30`, no controller service in this suite.
"epilog s" and its peak RSS are the Epilog hook's own (`epilog.json`: it asks the daemon to finalise the job;
the daemon reads the job's files, builds the summary and queues its delivery after answering). The user
socket is the plain framed Unix socket (issue 28): `user-socket-flood` is a job sending framed requests on a
fresh connection each, as fast as one process can, for 6 s (refused: the per-uid rate limit's answers).
Bound asserted for every root process: 150 MiB peak RSS (the epilog's `maxrss_kib`, the daemon's VmHWM);
the epilog within 30 s; the node never drained; a root job's files unchanged and absent from the summary.

| case | epilog s | epilog peak RSS MiB | daemon VmHWM MiB | refusals in the summary | notes |
|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-run", action="store_true", help="render the figures of the last run only")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "abuse.md"))
    a = ap.parse_args()
    run = cluster_test_figures(ROOT, "tests/integration/test_abuse_slurm.py", "abuse_figures.json", not a.no_run)
    if run["rc"]:
        return run["rc"]
    name, prefix, load, when = run["name"], run["prefix"], run["load"], provenance(ROOT)
    header = (f"Command (root, this checkout, an editable install and its own test cluster):\n\n```sh\n"
              f"GPUPERF_PREFIX={prefix} bash packaging/install.sh --test\n"
              f"GPUPERF_PREFIX={prefix} GPUPERF_TEST_CLUSTER={name} python3 benchmarks/abuse_figures.py\n"
              f"# runs tests/integration/test_abuse_slurm.py, renders /tmp/gpuperf-slurm-{name}/abuse_figures.json\n```\n\n"
              f"Run: {when}; "
              f"the 2-core dev VM shared with other engineers' test runs ({load}).")
    Path(a.out).write_text(render(run["figures"], header))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
