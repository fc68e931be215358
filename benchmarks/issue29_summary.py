"""The short table printed last by ``benchmarks/device/h200x2_issue29.sh``: one line per part of issue 29.

Reads what the stages left in DIR: ``multi.log`` and ``multi.json`` (tests/gpu/test_multi_gpu.py and its
figures), ``cost.json`` (gpu_job_cost.py --job allreduce), ``tune/tune-socket.md`` (tune_socket_table.py),
``zoo/rows.md`` (comm_zoo_rows.py); a part whose files are missing says "not run".

    python3 benchmarks/issue29_summary.py DIR
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _iv(d: dict | None) -> str:
    if not d or d.get("mean") is None:
        return "-"
    return f"{d['mean']:.4f} [{d['lo']:.4f}, {d['hi']:.4f}] n={d.get('n')}"


def lines(d: Path) -> list[tuple[str, str]]:
    """(part, result) rows."""
    rows = []
    log = d / "multi.log"
    if log.exists():
        text = log.read_text(errors="replace")
        m = re.findall(r"(\d+ (?:passed|failed|skipped|error)s?)", text.splitlines()[-1] if text.strip() else "")
        fig = _json(d / "multi.json")
        extra = []
        if "multi_ranks" in fig:
            extra.append(f"busbw {fig['multi_ranks'].get('busbw_gbps')} GB/s, plan "
                         f"{'no-op' if fig['multi_ranks'].get('plan_noop') else 'pins ranks'}")
        if "multi_attribution" in fig:
            extra.append(f"mismatches {fig['multi_attribution'].get('mismatches')}")
        if "multi_side_by_side" in fig:
            extra.append(f"side by side {fig['multi_side_by_side'].get('overlap_s', '?')} s together")
        if "multi_one_busy" in fig:
            extra.append("one-of-two " + str((fig["multi_one_busy"].get("diagnosis") or {}).get("class")))
        rows.append(("1 multi-GPU jobs", (", ".join(m) or "no pytest summary") + ("; " + "; ".join(extra) if extra else "")))
    else:
        rows.append(("1 multi-GPU jobs", "not run"))
    cost = _json(d / "cost.json")
    if cost:
        rows.append(("2 cost, busbw on/off", _iv(cost.get("busbw_gbps_ratio_on_off"))))
        rows.append(("2 cost, wall on/off", _iv(cost.get("wall_ratio_on_off"))))
        for key, what in (("run_wall", "job's wall"), ("node_wall", "node wall")):
            if cost.get(f"{key}_ratio_on_off"):
                rows.append((f"2 cost, {what} on/off", _iv(cost.get(f"{key}_ratio_on_off"))))
    else:
        rows.append(("2 cost (all-reduce job)", "not run"))
    zoo = d / "zoo" / "rows.md"
    rows.append(("3 zoo communication", zoo.read_text().strip().splitlines()[-1] if zoo.exists() else "not run"))
    tune = d / "tune" / "tune-socket.md"
    if tune.exists():
        text = tune.read_text()
        check = next((l for l in text.splitlines() if l.startswith("Rule check:")), "no rule check")
        acc = [l.split("|")[1].strip() for l in text.splitlines() if l.startswith("| NCCL_") and "| accepted |" in l[l.index("|", 2):]]
        rows.append(("4 tune socket 8K-256M", f"{check[:60]}; accepted: {', '.join(acc) or 'none'}"))
    else:
        rows.append(("4 tune socket 8K-256M", "not run"))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: issue29_summary.py DIR", file=sys.stderr)
        return 2
    rows = lines(Path(args[0]))
    w = max(len(p) for p, _ in rows)
    print("\n".join(f"{p:<{w}}  {r}" for p, r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
