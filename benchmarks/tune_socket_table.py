"""``gpuperf tune`` on the socket path at every size, and its table checked against the acceptance rule (issue 29).

Runs ``gpuperf tune --transport socket --timing queued`` on 2 GPUs from 8 KiB to 256 MiB (every power of two;
the collectives queued behind a GPU sleep, as ``benchmarks/nccl_env.py`` times them), then writes
``OUT/tune-socket.md``: per candidate and size the paired ratio candidate/baseline with its 95% interval and
what it says, and the verdict. The table replaces ``benchmarks/results/h200x2/tune-socket.*`` (5 sizes,
collectives launched one by one, 2x2 sockets accepted although 8 KiB and 128 KiB may lose).

The rule check: every verdict is decided again from the measured sets by ``gpuperf.env.tuning.decide`` (the
diagnosis issue's acceptance rule: a setting only where no measured size is a proven loss or may lose more
than its tolerance) and must agree with the file; an accepted setting with any size that loses or may lose
is a failure. ``--from-json`` checks and tabulates a recorded run without measuring (exit 1 on a failure).

    PYTHONPATH=. python3 benchmarks/tune_socket_table.py --out OUT [--rounds 3 --budget 240]
    PYTHONPATH=. python3 benchmarks/tune_socket_table.py --from-json benchmarks/results/h200x2/tune-socket.json --out OUT
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuperf.env import interval as iv, ncclbench as nb, tuning  # noqa: E402

MIN_SIZE, MAX_SIZE = 8 << 10, 256 << 20


def tune_argv(out: Path, rounds: int, budget: float, repeats: int) -> list[str]:
    """The ``gpuperf tune`` command this runner measures with."""
    return [sys.executable, "-m", "gpuperf", "tune", "--out", str(out), "--transport", "socket",
            "--timing", "queued", "--min-size", str(MIN_SIZE), "--max-size", str(MAX_SIZE), "--nproc", "2",
            "--rounds", str(rounds), "--repeats", str(repeats), "--budget", str(budget)]


def check(rec: dict) -> tuple[list[dict], list[str]]:
    """Each candidate's verdict decided again under the acceptance rule: (rows, failures)."""
    sets = {n: nb.SetResult.from_dict(d) for n, d in rec["sets"].items()}
    colls = tuple(rec.get("collectives") or ("allreduce",))
    rows, bad = [], []
    for v in rec["verdicts"]:
        again = tuning.decide(sets["baseline"], sets[v["name"]], rec["sizes"], colls=colls)
        costly = [c for c in again.checks if c.loses or c.risks]
        if v["accepted"] != again.accepted:
            bad.append(f"{v['name']}: the file says {'accepted' if v['accepted'] else 'rejected'}, the rule says "
                       f"{'accepted' if again.accepted else 'rejected'} ({again.reason})")
        if v["accepted"] and costly:
            bad.append(f"{v['name']}: accepted although " + ", ".join(c.cost() for c in costly))
        rows.append({"name": v["name"], "accepted_in_file": v["accepted"], "accepted_by_rule": again.accepted,
                     "reason": again.reason, "checks": again.checks})
    return rows, bad


def table(rec: dict, rows: list[dict], bad: list[str]) -> str:
    """The markdown table of a tune run: one column per candidate, one row per size."""
    ver = rec.get("versions") or {}
    gpus = ver.get("gpus") or []
    head = [f"# gpuperf tune on the socket path: {len(gpus)} x {', '.join(sorted(set(gpus))) or '?'}, "
            f"torch {ver.get('torch')}, NCCL {ver.get('nccl')}",
            "", f"Timing: {rec.get('timing', 'launched')}; transport: {rec.get('transport')}; baseline: "
            + " ".join(f"{k}={v}" for k, v in sorted((rec.get('baseline_env') or {}).items())),
            f"Paired rounds per size: {max((c.ratio.n for r in rows for c in r['checks']), default=0)}; "
            "cells: candidate/baseline bus bandwidth, geometric mean [95% interval], class "
            "(win/loss/same within +-5% below 1 MiB, +-2% from 1 MiB/unsettled; '!' a loss not ruled out).", ""]
    cols = " | ".join(r["name"] for r in rows)
    lines = [f"| size | {cols} |", "|---|" + "---|" * len(rows)]
    keys = [(c.coll, c.size) for c in rows[0]["checks"]] if rows else []
    for i, (coll, size) in enumerate(keys):
        cells = []
        for r in rows:
            c = r["checks"][i]
            cells.append(f"{iv.fmt(c.ratio)} {c.verdict}{' !' if c.risks and not c.loses else ''}")
        lines.append(f"| {coll} {nb.human(size)} | " + " | ".join(cells) + " |")
    verdicts = ["", "| candidate | in the file | under the acceptance rule | why |", "|---|---|---|---|"]
    verdicts += [f"| {r['name']} | {'accepted' if r['accepted_in_file'] else 'rejected'} | "
                 f"{'accepted' if r['accepted_by_rule'] else 'rejected'} | {r['reason']} |" for r in rows]
    check_line = ["", "Rule check: " + ("ok (every verdict is the acceptance rule's; no accepted setting loses or may "
                                        "lose at any measured size)" if not bad else "FAILED: " + "; ".join(bad))]
    return "\n".join(head + lines + verdicts + check_line) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line entry."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for tune-socket.toml/.json/.md")
    ap.add_argument("--from-json", help="a recorded gpuperf tune JSON: check and tabulate it, measure nothing")
    ap.add_argument("--rounds", type=int, default=3, help="fresh launches per setting")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per size per launch")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for all rounds")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.from_json:
        src = Path(a.from_json)
        if not src.is_file():
            ap.error(f"--from-json: no file {src}")
    else:
        cmd = tune_argv(out / "tune-socket.toml", a.rounds, a.budget, a.repeats)
        print("$ " + " ".join(cmd[1:]), flush=True)
        rc = subprocess.run(cmd, cwd=REPO).returncode
        if rc != 0:
            print(f"tune_socket_table: gpuperf tune exited {rc}", file=sys.stderr)
            return rc
        src = out / "tune-socket.json"
    try:
        rec = json.loads(src.read_text())
        rows, bad = check(rec)
    except (OSError, ValueError, KeyError) as e:
        print(f"tune_socket_table: {src} is not a gpuperf tune record: {e}", file=sys.stderr)
        return 2
    text = table(rec, rows, bad)
    (out / "tune-socket.md").write_text(text)
    print(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
