"""One job of many nodes through the controller service's merge: time, peak memory, AdminComment size.

    python benchmarks/controller_bigjob.py --nodes 1024 2048 8192 [--json OUT]

For each N, in a fresh process: N node summaries (8 GPUs each, from a real recording, each node named
apart, as ``controller_load.py`` sends them) are stored as the collector keeps them, slurmctld's notice is
queued, and the service's scheduler ticks (``service.Service.tick``: the real merge, store and AdminComment
path, the write stubbed) until the job's AdminComment waits for its writer. Prints, per N: seconds from the
first tick to the comment, the process's peak RSS (ru_maxrss; the summaries were stored by that process
before: their compressed bytes, not their parsed form, count before the merge), the AdminComment's bytes and what
it left out (``truncated``), the stored summary's bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures as figures_out  # noqa: E402  benchmarks/figures.py, beside this script


def one(n: int) -> dict:
    """Merge one job of ``n`` nodes in this process; its figures."""
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from controller_load import template  # noqa: PLC0415 - the load benchmark's node summary
    from gpuperf.controller import accounting, clusterstore, service
    from gpuperf.controller.queue import JobQueue
    from gpuperf.files import config
    from gpuperf.model import admincomment

    tmp = Path(tempfile.mkdtemp(prefix="gp-bigjob-"))
    cfg = config.parse(f'[general]\nstate_dir = "{tmp}/state"\nrun_dir = "{tmp}/run"\nlog_file = ""\n'
                       '[controller]\nmerge_wait_s = 30.0\n')
    store = clusterstore.ClusterStore(clusterstore.default_path(cfg))
    tmpl = template(0)
    tmpl.pop("series", None)
    end = time.time()
    nodes = [f"gpu{i:05d}" for i in range(n)]
    job_id = 7
    for node in nodes:
        s = dict(tmpl, job_id=job_id, nodes=[node], start=end - 3600.0, end=end)
        s["gpus"] = [dict(g, node=node) for g in tmpl["gpus"]]
        body = zlib.compress(json.dumps(s, separators=(",", ":")).encode(), 6)
        store.put_node_summary(s, 0, blob=body, commit=False)
    JobQueue(store.db).add(job_id, nodes, "alice", 1000, end)
    store.db.commit()
    store.close()
    # the service finds the job waiting with every node in, as after its notice came last
    svc = service.Service(cfg, accounting.StubWriter(0.0), clock=time.time)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    while (svc.queue.state(job_id) or ("merge",))[0] == "merge" and time.monotonic() - t0 < 600:
        svc.tick()
    took = time.monotonic() - t0
    comment = svc.queue.due_writes(time.time() + 1, 1)
    text = comment[0][1] if comment else ""
    blob = svc.store.db.execute("SELECT summary FROM job_summaries WHERE job_id=?", (job_id,)).fetchone()
    out = {"nodes": n, "gpus": 8 * n, "merge_s": round(took, 2), "state": svc.queue.state(job_id)[0],
           "rss_before_mib": round(rss0 / 1024, 1),
           "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "admincomment_bytes": len(text.encode()),
           "truncated": admincomment.decode(text).get("truncated") if text else None,
           "stored_summary_bytes": len(blob[0]) if blob else None}
    svc.store.close()
    subprocess.run(["rm", "-rf", str(tmp)])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024, 2048, 8192])
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)   # the child: one size, figures as JSON
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return 0
    runs = []
    for n in args.nodes:
        p = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
        if p.returncode != 0:
            runs.append({"nodes": n, "error": p.stderr[-2000:]})
            continue
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    figures_out.emit({"provenance": figures_out.provenance(ROOT), "runs": runs,
                      "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
