"""Proof that gpuperf's environment does not hurt NCCL: all-reduce bus bandwidth, 8 KiB to 1 GiB.

Environments compared (every one with NCCL_NVLS_ENABLE=0):
  default      NCCL's defaults (no NCCL/CUDA tuning variables at all)
  gpuperf      what gpuperf injects on this node (``gpuperf env --json`` on the live topology)
  tree         NCCL_ALGO=Tree (a popular guide's advice "for NVSwitch")
  ring-simple  NCCL_ALGO=Ring NCCL_PROTO=Simple
Bar: gpuperf / default >= 0.98 at every size >= 1 MiB.

    PYTHONPATH=. python3 benchmarks/nccl_env.py --out $OUT              # all GPUs, NCCL (~4-6 min on 4xH200)
    PYTHONPATH=. python3 benchmarks/nccl_env.py --backend gloo --device cpu --nproc 2 \\
        --max-size 64KiB --rounds 1 --env-root tests/data/nodes/h100-vm --out /tmp/smoke   # smoke test, no GPU
Writes OUT/nccl_env.md (table) and OUT/nccl_env.json (every sample), prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from anywhere without installing gpuperf

from gpuperf.env import ncclbench as nb  # noqa: E402

BAR = 0.98
GUIDE_SETS = {"tree": {"NCCL_ALGO": "Tree"}, "ring-simple": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}}


def parse_size(text: str) -> int:
    """'64KiB' / '1GiB' / '8192' -> bytes."""
    t = text.strip().replace(" ", "")
    for unit, mult in (("GiB", nb.GIB), ("MiB", nb.MIB), ("KiB", nb.KIB)):
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    return int(t)


def _fmt(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def table(results: dict[str, nb.SetResult], size_list: list[int], world: int, header: str) -> tuple[str, bool]:
    """Markdown table of median busbw per set and the gpuperf/default ratio; True when the bar holds."""
    names = list(results)
    lines = [header, "", "| size | " + " | ".join(names) + " | gpuperf/default | spread (default) |",
             "|---|" + "---|" * (len(names) + 2)]
    ok = True
    for s in size_list:
        meds = {n: results[n].median(s) for n in names}
        d, g = meds.get("default"), meds.get("gpuperf")
        ratio = g / d if d and g else None
        mark = ""
        if s >= nb.MIB:
            if ratio is None or ratio < BAR:
                ok, mark = False, " **below bar**"
        cells = " | ".join("failed" if meds[n] is None else _fmt(meds[n]) for n in names)
        rtxt = "n/a" if ratio is None else f"{ratio:.3f}{mark}"
        lines.append(f"| {nb.human(s)} | {cells} | {rtxt} | {results['default'].spread(s) * 100:.1f}% |")
    lines.append("")
    lines.append(f"Bus bandwidth GB/s (median of all repeats of all rounds), {world} processes. "
                 f"Bar: gpuperf/default >= {BAR} at every size >= 1 MiB: **{'met' if ok else 'NOT met'}**.")
    for n in names:
        if results[n].errors:
            lines.append(f"- {n}: {len(results[n].errors)} failed run(s): {results[n].errors[0][:300]}")
    return "\n".join(lines) + "\n", ok


def main() -> int:
    """Run the comparison, write OUT/nccl_env.{md,json}, print the table; exit 1 when the bar is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for nccl_env.md and nccl_env.json")
    ap.add_argument("--nproc", type=int, help="processes (default: every visible GPU)")
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--min-size", default="8KiB")
    ap.add_argument("--max-size", default="1GiB")
    ap.add_argument("--rounds", type=int, default=3, help="fresh launches per environment, interleaved")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per size per launch")
    ap.add_argument("--env-root", help="compute gpuperf's set for a recorded node (smoke tests) instead of this one")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds one launch may take")
    ap.add_argument("--sets", help="comma-separated subset of the sets (default, gpuperf, gpuperf-no-alloc, tree, "
                                   "ring-simple); default: all but gpuperf-no-alloc")
    args = ap.parse_args()
    nproc = args.nproc
    if nproc is None:
        v = nb.versions()
        nproc = len(v.get("gpus") or []) or 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ours, answer = nb.gpuperf_exports(nproc, args.env_root, str(REPO))
    sets = {"default": {}, "gpuperf": ours, **GUIDE_SETS}
    if args.sets:
        # gpuperf-no-alloc isolates the one variable that changes how PyTorch allocates the buffers
        extra = {"gpuperf-no-alloc": {k: v for k, v in ours.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}}
        known = {**sets, **extra}
        wanted = [n.strip() for n in args.sets.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in known]
        if unknown or not {"default", "gpuperf"} <= set(wanted):
            ap.error(f"--sets needs default and gpuperf, from: {', '.join(known)}")
        sets = {n: known[n] for n in wanted}
    print(f"gpuperf injects: {ours or '(nothing)'}", flush=True)
    size_list = nb.sizes(parse_size(args.min_size), parse_size(args.max_size))
    results = nb.measure(sets, nproc, args.backend, args.device, size_list, args.rounds, args.repeats,
                         timeout_s=args.timeout, log=lambda m: print(m, flush=True))
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    info = nb.versions() if args.device == "cuda" else {"torch": nb.versions().get("torch")}
    header = (f"## all-reduce bus bandwidth, {socket.gethostname()}, {when}\n\n"
              f"{nproc} x {', '.join(sorted(set(info.get('gpus') or [args.device])))}, backend {args.backend}, "
              f"torch {info.get('torch')}, NCCL {info.get('nccl')}; every set with NCCL_NVLS_ENABLE=0; "
              f"{args.rounds} round(s) x {args.repeats} repeats.\n\n"
              "Sets: " + "; ".join(f"`{n}` = {' '.join(f'{k}={v}' for k, v in e.items()) or '(NCCL defaults)'}"
                                  for n, e in sets.items()))
    md, ok = table(results, size_list, nproc, header)
    (out / "nccl_env.md").write_text(md)
    ratios = {str(s): (results["gpuperf"].median(s) / results["default"].median(s)
                       if results["gpuperf"].median(s) and results["default"].median(s) else None) for s in size_list}
    (out / "nccl_env.json").write_text(json.dumps({
        "host": socket.gethostname(), "when": when, "nproc": nproc, "backend": args.backend, "device": args.device,
        "versions": info, "sizes": size_list, "bar": BAR, "bar_met": ok, "ratio_gpuperf_default": ratios,
        "gpuperf_env": answer, "sets": {n: r.to_dict() for n, r in results.items()}}, indent=1))
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
