"""The workload zoo judged per reader (issue 35): the class each place a person reads a job shows, against its label.

    PYTHONPATH=. python benchmarks/zoo_readers.py [--out benchmarks/results/zoo]

Every zoo recording (``tests/data/recordings/zoo/``) runs as a job through the product's path over the same
window as ``zoo_matrix.py`` (the workload process's lifetime): its sweeps into a daemon store, the series the
hand-over reads from it, the node summary the delivery writes (``fromrecording.node_judgement``), then the
controller's merge, store and AdminComment. Each reader is then read as it reads in production: the
AdminComment (its headline and its decoded summary), the owner's report (the node daemon's ``job`` op as the
job's user), the admin's (the controller's store), the HTML page (the class it shows) and the end mail (its
headline). ``zoo_matrix.py``'s own judgement (the node summary from the full-resolution series, not the
daemon's) is the last column. Writes ``readers.md`` (classed as labelled per reader, and every recording
where two readers differ).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import figures as figures_out  # noqa: E402  benchmarks/figures.py, beside this script
import zoo_matrix  # noqa: E402  benchmarks/zoo_matrix.py, beside this script
from gpuperf.controller import clusterstore, merge  # noqa: E402
from gpuperf.daemon import protocol  # noqa: E402
from gpuperf.daemon.ops import Access, Ops  # noqa: E402
from gpuperf.daemon.store import Store  # noqa: E402
from gpuperf.files import config  # noqa: E402
from gpuperf.model import admincomment  # noqa: E402
from gpuperf.report import fromrecording, html, mailtext  # noqa: E402

OWNER = 64123   # the job's user: an ordinary uid
READERS = ("AdminComment headline", "AdminComment summary", "owner's report", "admin's report", "HTML page",
           "end mail", "zoo_matrix.py")


def classes(path: str, window: tuple[float, float], gpus: int) -> dict[str, str | None]:
    """reader -> the class it shows for a job that ran ``path`` over ``window`` on ``gpus`` GPUs."""
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        cfg = config.defaults()
        cfg.data["general"].update(run_dir=str(base / "run"), state_dir=str(base / "state"), log_file="")
        trimmed = fromrecording.trimmed(path, str(base / "w.jsonl"), window)
        store = Store(base / "node.sqlite")
        aggs, sent = fromrecording.node_judgement(trimmed, cfg, store, job_id=7, node="n1", uid=OWNER, user="owner",
                                                  gpus=gpus)
        store.in_transaction(store.put_job, {"job_id": 7, "uid": OWNER, "user": "owner", "gpus": [int(g) for g in aggs["gpus"]],
                                             "node": "n1", "start": aggs["start"]}, aggs["start"])
        store.in_transaction(store.finish_job, 7, aggs["end"], False, aggs["end"])
        with clusterstore.ClusterStore(clusterstore.default_path(cfg)) as st:
            st.put_node_summary(json.loads(json.dumps(sent)))
            merged = merge.merge_job(st.node_summaries(7), ["n1"], {"job_id": 7, "user": "owner", "uid": OWNER},
                                     aggs["end"], thresholds=cfg.report.thresholds)
            raw = admincomment.compressed(merged)
            st.put_job(merged, blob=raw)
            admin = st.job(7)
        text = admincomment.encode(merged, raw=raw)
        ops = Ops(access=Access(slurm_uid=None), jobs=argparse.Namespace(running={}), store=store, handover=None,
                  view=None, health=lambda: None, facts=None, sampler=None, clock=lambda: 0.0, started=0.0,
                  stats={"requests": 0, "bad_requests": 0}, cfg=cfg, log=None)
        owner = ops.handle(protocol.encode(protocol.request("job", {"job_id": 7})), OWNER, "user").get("summary") or {}
        store.close()
    page = html.render(admin or {})
    shown = re.search(r"id='diagnosis-class'>([^<]*)<", page)
    mail = re.match(r"Job 7: ([\w-]+),", mailtext.headline("7", admin or {}))
    _, full = zoo_matrix._diagnosis(path, window, gpus)
    return {"AdminComment headline": admincomment.decode_headline(text).get("class"),
            "AdminComment summary": admincomment.decode(text)["diagnosis"]["class"],
            "owner's report": (owner.get("diagnosis") or {}).get("class"),
            "admin's report": ((admin or {}).get("diagnosis") or {}).get("class"),
            "HTML page": shown.group(1).replace("-", "_") if shown else None,
            "end mail": mail.group(1).replace("-", "_") if mail else None,
            "zoo_matrix.py": full.get("class")}


def rows(folder: str = zoo_matrix.RECORDINGS) -> list[dict[str, Any]]:
    """One row per zoo recording: its label and each reader's class."""
    labs = zoo_matrix.labels()
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl*"))):
        label = labs.get(fromrecording.workload(path) or "")
        if label is None:
            continue
        ach = fromrecording.achieved(path)
        step = fromrecording.load_recording(path).interval_s
        start = float(ach.get("t_proc", ach.get("t_start", 0.0)))
        window = (start - step, zoo_matrix.job_end(ach) + step)   # as zoo_matrix.evaluate's job window
        out.append({"file": os.path.basename(path), "label": label["class"],
                    **classes(path, window, int(label.get("gpus", 1)))})
    return out


def readers_md(got: list[dict[str, Any]], command: str) -> str:
    """The per-reader table and the recordings where readers differ."""
    n = len(got)
    lines = ["# The zoo per reader (issue 35)", "",
             f"Made by `{command}` ({figures_out.provenance(Path(HERE).parent)}).", "",
             "| reader | classed as labelled | of |", "|---|---|---|"]
    for r in READERS:
        ok = sum(row[r] == row["label"] for row in got)
        lines.append(f"| {r} | {ok} ({100.0 * ok / n:.1f}%) | {n} |" if n else f"| {r} | 0 | 0 |")
    product = READERS[:-1]
    differ = [row for row in got if len({row[r] for r in product}) > 1]
    lines += ["", f"Recordings where the product's readers differ: {len(differ)}."]
    for row in differ:
        lines.append(f"- {row['file']}: " + ", ".join(f"{r} {row[r]}" for r in product))
    apart = [row for row in got if row["zoo_matrix.py"] != row["admin's report"]]
    lines += ["", f"Recordings where `zoo_matrix.py` (full-resolution series) and the product (the daemon's series) "
                  f"differ: {len(apart)}."]
    for row in apart:
        product_cls = row["admin's report"]
        lines.append(f"- {row['file']} (label {row['label']}): zoo_matrix.py {row['zoo_matrix.py']}, the product {product_cls}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write readers.md into this folder (default: print it)")
    args = ap.parse_args(argv)
    text = readers_md(rows(), "PYTHONPATH=. python benchmarks/zoo_readers.py" + (f" --out {args.out}" if args.out else ""))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "readers.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
