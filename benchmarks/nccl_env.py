"""Does gpuperf's environment cost NCCL anything? Paired intervals per collective and size, plus an ablation.

Sets (every one with NCCL_NVLS_ENABLE=0), launched as fresh processes in interleaved rounds whose
order alternates (NCCL, CUDA and OpenMP read their variables once per process):
  default     NCCL's defaults (no NCCL/CUDA tuning variables at all)
  gpuperf     what gpuperf injects on this node (``gpuperf env --json`` on the live topology)
  only:NAME   one injected variable alone (the ablation; on --ablation-sizes only)
Per collective and size the per-round ratio set/default gives a geometric mean and a 95% t-interval
(``gpuperf.env.interval``), classed win / loss / same (within +-2% from 1 MiB, +-5% below) / unsettled.
Bar (issue 16): no interval lies below 0.98 at >= 1 MiB, nor below 0.95 at smaller sizes -- read
strictly (every interval's lower bound at or above the bar) and leniently (no interval wholly below it).

Timing (``gpuperf.env.ncclworker``): ``queued`` (collectives queued behind a GPU sleep: NCCL's own
time, the primary reading) and ``launched`` (issued one by one from Python, as the first runs were:
below a few MiB that times the host); each rank pinned to CPUs next to its GPU in every set (--no-pin).

    PYTHONPATH=. python3 benchmarks/nccl_env.py --out $OUT --budget 200      # every GPU, NCCL
    PYTHONPATH=. python3 benchmarks/nccl_env.py --backend gloo --device cpu --nproc 2 --sizes 8KiB,16KiB \\
        --rounds 2 --env-root tests/data/nodes/h100-vm --out /tmp/smoke      # smoke test, no GPU
Writes OUT/nccl_env.md (tables) and OUT/nccl_env.json (every sample) after every round, prints the tables.
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

from gpuperf.affinity.plan import format_cpu_list  # noqa: E402
from gpuperf.env import interval as iv, ncclbench as nb  # noqa: E402

ABLATION_SIZES = "8KiB,128KiB,1MiB,8MiB,64MiB,512MiB"


def parse_size(text: str) -> int:
    """'64KiB' / '1GiB' / '8192' -> bytes."""
    t = text.strip().replace(" ", "")
    for unit, mult in (("GiB", nb.GIB), ("MiB", nb.MIB), ("KiB", nb.KIB)):
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    return int(t)


def _fmt(x: float | None) -> str:
    return "failed" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def compare(results: dict[str, nb.SetResult], name: str, coll: str, size: int, best: bool) -> tuple[iv.Interval, str]:
    """``name`` against ``default`` at one collective (key, timing included) and size: the interval and its class."""
    d, c = results["default"], results[name]
    ratio = iv.ratio_interval(iv.paired_ratios(d.per_round(size, coll, best), c.per_round(size, coll, best)))
    return ratio, iv.classify(ratio, iv.tolerance(size))


class Bar:
    """Issue 16's bar over every interval of one reading: lenient (none wholly below) and strict (none reaching below)."""

    def __init__(self) -> None:
        self.below: list[str] = []      # intervals wholly below the bar: a proven loss
        self.reaching: list[str] = []   # intervals whose lower bound is under the bar (with the width reached)

    def add(self, label: str, ratio: iv.Interval, size: int) -> None:
        """Judge one interval."""
        tol = iv.tolerance(size)
        if iv.below_bar(ratio, tol):
            self.below.append(label)
        if not iv.clears_bar(ratio, tol):
            self.reaching.append(f"{label} {iv.fmt(ratio)}")

    def text(self) -> str:
        """The bar's verdicts as one markdown sentence."""
        strict = "**met**" if not self.reaching else f"**not met** ({len(self.reaching)}): " + "; ".join(self.reaching)
        lenient = "**met**" if not self.below else "**NOT met**: " + ", ".join(self.below)
        return (f"Bar, strict (every interval's lower bound >= 0.98 at >= 1 MiB, >= 0.95 below): {strict}. "
                f"Bar, lenient (no interval wholly below): {lenient}.")


def tables(results: dict[str, nb.SetResult], size_list: list[int], abl_sizes: list[int], colls: tuple[str, ...],
           header: str, best: bool = True, timing: str = "") -> tuple[str, Bar]:
    """Markdown: the gpuperf/default table per collective, then the ablation, for one reading; and its bar.

    ``timing`` selects the worker's second timing (keys ``coll/timing``); empty = its first."""
    lines = [header, ""]
    bar = Bar()
    key = (lambda c: f"{c}/{timing}") if timing else (lambda c: c)
    for coll in colls:
        lines += [f"### {coll}", "", "| size | default GB/s | gpuperf GB/s | gpuperf/default [95% CI] | class | rounds |",
                  "|---|---|---|---|---|---|"]
        for s in size_list:
            ratio, kind = compare(results, "gpuperf", key(coll), s, best)
            bar.add(f"gpuperf {coll} {nb.human(s)}", ratio, s)
            lines.append(f"| {nb.human(s)} | {_fmt(results['default'].median(s, key(coll)))} | "
                         f"{_fmt(results['gpuperf'].median(s, key(coll)))} | {iv.fmt(ratio)} | {kind} | {ratio.n} |")
        lines.append("")
    only = [n for n in results if n.startswith("only:")]
    if only:
        lines += ["### ablation: each injected variable alone / default [95% CI] class", "",
                  "| collective | size | " + " | ".join(n[5:] for n in only) + " |", "|---|---|" + "---|" * len(only)]
        for coll in colls:
            for s in abl_sizes:
                cells = []
                for n in only:
                    ratio, kind = compare(results, n, key(coll), s, best)
                    bar.add(f"{n} {coll} {nb.human(s)}", ratio, s)
                    cells.append(f"{iv.fmt(ratio)} {kind}")
                lines.append(f"| {coll} | {nb.human(s)} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"Per launch: the {'fastest' if best else 'median'} of its timed repeats; GB/s columns: median of "
                 "all repeats. Classes: same = the whole 95% interval within +-2% (>= 1 MiB) or +-5% (smaller); win/loss = the "
                 "whole interval above/below 1; unsettled = wider than that. " + bar.text())
    for n, r in results.items():
        if r.errors:
            lines.append(f"- {n}: {len(r.errors)} failed launch(es): {r.errors[0][:300]}")
    return "\n".join(lines) + "\n", bar


def header_text(host: str, when: str, nproc: int, info: dict, backend: str, device: str, rounds: int, repeats: int,
                sets: dict[str, dict[str, str]], timings: list[str] | None = None, pinned: list | None = None) -> str:
    """What was measured where, for the top of the results file."""
    timings = timings or ["launched"]
    how = ("CUDA-event timing, " + " and ".join(f"`{t}`" for t in timings) + " (first = primary)"
           if device == "cuda" else "wall-clock timing")
    pin = ("each rank pinned to CPUs " + " / ".join(format_cpu_list(c) for c in pinned) + " in every set"
           if pinned else "ranks not pinned")
    return (f"## NCCL bus bandwidth, gpuperf's environment vs NCCL's defaults ({host}, {when})\n\n"
            f"{nproc} x {', '.join(sorted(set(info.get('gpus') or [device])))}, backend {backend}, "
            f"torch {info.get('torch')}, NCCL {info.get('nccl')}; every set with NCCL_NVLS_ENABLE=0; "
            f"{rounds} paired round(s) (order alternating), {repeats} timed repeats per size and timing per launch "
            f"after an untimed one, {how}; {pin}.\n\nSets: " +
            "; ".join(f"`{n}` = {' '.join(f'{k}={v}' for k, v in e.items()) or '(NCCL defaults)'}" for n, e in sets.items()))


def render(results: dict[str, nb.SetResult], size_list: list[int], abl: list[int], colls: tuple[str, ...],
           header: str, timings: list[str] | None = None) -> tuple[str, Bar]:
    """Every reading of one run: the primary timing's fastest repeat per launch (whose bar counts), its median
    repeat, then the second timing's fastest repeat; the markdown and the primary reading's bar."""
    timings = timings or ["launched"]
    md, bar = tables(results, size_list, abl, colls, header, best=True)
    med, _ = tables(results, size_list, abl, colls, f"## The same runs, `{timings[0]}` timing, median repeat per launch",
                    best=False)
    md += "\n" + med
    for t in timings[1:]:
        other, _ = tables(results, size_list, abl, colls, f"## The same launches, `{t}` timing, fastest repeat per launch",
                          best=True, timing=t)
        md += "\n" + other
    return md, bar


def load(path: str) -> tuple[dict, dict[str, nb.SetResult]]:
    """A stored nccl_env.json and its sets as SetResults."""
    d = json.loads(Path(path).read_text())
    results = {}
    for name, s in d["sets"].items():
        r = nb.SetResult(name, s["env"], errors=list(s.get("errors") or []))
        r.rounds = [{c: {int(k): v for k, v in per.items()} for c, per in rd.items()} for rd in s["rounds"]]
        results[name] = r
    return d, results


def main() -> int:
    """Run the comparison, write OUT/nccl_env.{md,json} after every round, print the tables; 1 when the bar is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for nccl_env.md and nccl_env.json")
    ap.add_argument("--nproc", type=int, help="processes (default: every visible GPU)")
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--sizes", help="comma-separated sizes (default: powers of two 8KiB-1GiB)")
    ap.add_argument("--ablation-sizes", default=ABLATION_SIZES, help="sizes for the one-variable sets")
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--colls", default=",".join(nb.COLLECTIVES))
    ap.add_argument("--rounds", type=int, default=8, help="most fresh launches per set (interleaved, paired)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per size per launch")
    ap.add_argument("--timing", default="queued,launched",
                    help="worker timings, first = primary (gpuperf.env.ncclworker); a CPU device has launched only")
    ap.add_argument("--no-pin", action="store_true", help="leave the ranks where the scheduler puts them")
    ap.add_argument("--budget", type=float, help="seconds for all rounds: no round starts that would end past it")
    ap.add_argument("--env-root", help="gpuperf's set for a recorded node (smoke tests) instead of this one")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one launch may take")
    ap.add_argument("--from-json", metavar="PATH", help="re-render the tables of a stored nccl_env.json (no measuring)")
    args = ap.parse_args()
    if args.from_json:
        d, results = load(args.from_json)
        rounds = len(results["default"].rounds)
        header = header_text(d["host"], d["when"], d["nproc"], d.get("versions") or {}, d["backend"], d["device"],
                             rounds, d.get("repeats", 3), {n: r.env for n, r in results.items()},
                             d.get("timings"), d.get("pinned"))
        md, bar = render(results, d["sizes"], d.get("ablation_sizes") or [], tuple(d["collectives"]), header,
                         d.get("timings"))
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "nccl_env.md").write_text(md)
        print(md)
        return 0 if not bar.reaching else 1
    nproc = args.nproc or len(nb.versions().get("gpus") or []) or 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ours, answer = nb.gpuperf_exports(nproc, args.env_root, str(REPO))
    size_list = ([parse_size(x) for x in args.sizes.split(",")] if args.sizes else nb.sizes(8 * nb.KIB, nb.GIB))
    abl = [parse_size(x) for x in args.ablation_sizes.split(",")]
    colls = tuple(c for c in args.colls.split(",") if c)
    sets = {"default": {}, "gpuperf": ours}
    if not args.no_ablation and len(ours) > 1:
        sets.update({f"only:{k}": {k: v} for k, v in ours.items()})
    print(f"gpuperf injects: {ours or '(nothing)'}", flush=True)
    info = nb.versions() if args.device == "cuda" else {"torch": nb.versions().get("torch")}
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    timings = [t for t in args.timing.split(",") if t] if args.device == "cuda" else ["launched"]
    pinned = None if args.no_pin else nb.rank_cpus(nproc, args.env_root)
    print(f"timings {timings}; CPUs per rank: {pinned}", flush=True)

    def write(results: dict[str, nb.SetResult]) -> tuple[str, Bar]:
        rounds = len(results["default"].rounds)
        header = header_text(socket.gethostname(), when, nproc, info, args.backend, args.device, rounds, args.repeats,
                             sets, timings, pinned)
        md, bar = render(results, size_list, abl, colls, header, timings)
        (out / "nccl_env.md").write_text(md)
        (out / "nccl_env.json").write_text(json.dumps({
            "host": socket.gethostname(), "when": when, "nproc": nproc, "backend": args.backend, "device": args.device,
            "versions": info, "sizes": size_list, "ablation_sizes": abl, "collectives": list(colls),
            "bar_met": not bar.below, "bar_met_strict": not bar.reaching, "bar_reaching": bar.reaching,
            "timings": timings, "pinned": pinned, "repeats": args.repeats, "gpuperf_env": answer,
            "sets": {n: r.to_dict() for n, r in results.items()}}))
        return md, bar

    results = nb.measure(sets, nproc, args.backend, args.device, size_list, args.rounds, args.repeats, warmup=3,
                         timeout_s=args.timeout, log=lambda m: print(m, flush=True), colls=colls,
                         set_sizes={n: abl for n in sets if n.startswith("only:")}, budget_s=args.budget,
                         on_round=write, timing=",".join(timings), pin=pinned)
    md, bar = write(results)
    print(md)
    return 0 if not bar.reaching else 1


if __name__ == "__main__":
    sys.exit(main())
