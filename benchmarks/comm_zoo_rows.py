"""The zoo's communication rows (issue 29): each 2-GPU recording's diagnosis against its workload's LABEL.

For every ``zoo_comm_*-<gpu>.jsonl.gz`` in DIR (made by ``record_workloads.py`` on 2 GPUs) the job is replayed
over the workload's own window on all recorded GPUs and diagnosed; the row says the labelled and the
diagnosed class, the imbalance flag where the label has one, the workload's own rate (its LABEL's ``rate``,
bus bandwidth for the collectives) and the first recommendation. ``benchmarks/zoo_matrix.py`` (issue 30)
adds the same recordings to the confusion matrix.

    PYTHONPATH=. python3 benchmarks/comm_zoo_rows.py DIR [--md OUT.md]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
WORKLOADS = REPO / "benchmarks" / "workloads"


def label_of(workload: str) -> dict:
    """A workload's LABEL, read without importing the script."""
    for node in ast.parse((WORKLOADS / f"{workload}.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "LABEL" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"{workload} has no LABEL")


def row(path: Path, label: dict) -> dict:
    """One recording diagnosed over the workload's window, against its label."""
    from gpuperf import diagnosis
    from gpuperf.report import fromrecording

    s, series = fromrecording.window_job(str(path), gpus=None)
    d = diagnosis.diagnose(s, series=series)
    ach = fromrecording.achieved(str(path))
    ok = d.cls == label["class"] and ("imbalanced" not in label or bool(d.imbalanced) == label["imbalanced"])
    return {"file": path.name, "label": label["class"], "class": d.cls, "imbalanced": bool(d.imbalanced),
            "label_imbalanced": label.get("imbalanced"), "rate": label["rate"], "achieved": ach.get(label["rate"]),
            "gpus": len(s.get("gpus") or {}), "ok": ok, "advice": (d.recommendations or ["-"])[0]}


def workload_of(path: Path) -> str:
    """``zoo_comm_p2p_copy-h200.jsonl.gz`` -> ``zoo_comm_p2p_copy``."""
    return path.name.split(".jsonl")[0].rsplit("-", 1)[0]


def table(rows: list[dict]) -> str:
    """Markdown: one row per recording, then how many are classed as labelled."""
    out = ["| recording | label | diagnosed | imbalanced (label/diagnosed) | rate | first advice |", "|---|---|---|---|---|---|"]
    for r in rows:
        imb = f"{r['label_imbalanced']}/{r['imbalanced']}" if r["label_imbalanced"] is not None else f"-/{r['imbalanced']}"
        out.append(f"| {r['file']} | {r['label']} | {r['class']}{'' if r['ok'] else ' (WRONG)'} | {imb} | "
                   f"{r['rate']}={r['achieved']} | {r['advice'][:90]} |")
    out.append(f"\n{sum(r['ok'] for r in rows)} of {len(rows)} classed as labelled.")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line entry: exit 1 when a recording is classed other than labelled, 2 when there is none."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="directory holding zoo_comm_* recordings")
    ap.add_argument("--md", help="write the table here too")
    a = ap.parse_args(argv)
    files = sorted(Path(a.dir).glob("zoo_comm_*.jsonl*"))
    if not files:
        print(f"comm_zoo_rows: no zoo_comm_* recording in {a.dir}", file=sys.stderr)
        return 2
    rows = [row(f, label_of(workload_of(f))) for f in files]
    text = table(rows)
    if a.md:
        Path(a.md).write_text(text)
    print(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
