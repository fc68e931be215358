"""Proof of the active probe on real GPUs (issue 15). Run on the lent machine from the repo root:

    PYTHONPATH=. python3 benchmarks/device/fleet_probe.py --out "$OUT" [--runs 3]

1. The probe as gpuperf runs it (``gpuperf.checks.probe.run``: probe_script.py in a separate Python,
   ``fleet.probe_python`` = this Python), ``--runs`` times, one GPU at a time; right before or after
   it (alternating by run, so neither always meets the cooler GPU) the same operations on that GPU
   (bf16 GEMM of the same size and burst length after the same settling load, device copy of the same
   bytes, peer copy of the same bytes) are timed here directly with CUDA events. Agreement = probe /
   events per GPU and figure; repeat spread = (max-min)/median of the probe's figures over the runs;
   cost per GPU = the probe's own seconds per GPU (CUDA context, allocation and all bursts) and the
   probe process's wall time (interpreter and torch start included).
2. A GPU made slow honestly: a second process runs bf16 matmuls on the last GPU throughout a probe;
   the deep check ``gpu_probe`` (what ``gpuperf check --deep`` runs) must warn about that GPU and no other.
Prints a table last; writes fleet_probe.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpuperf.files import config
from gpuperf.checks.base import CheckEnv
from gpuperf.checks.builtin import gpu_probe
from gpuperf.checks import probe

BACKGROUND = """
import sys, time, torch
d = int(sys.argv[1]); end = time.time() + float(sys.argv[2])
torch.cuda.set_device(d)
a = torch.randn(8192, 8192, device=f"cuda:{d}", dtype=torch.bfloat16); c = torch.empty_like(a)
print("background load on", d, flush=True)
while time.time() < end:
    for _ in range(20):
        torch.matmul(a, a, out=c)
    torch.cuda.synchronize(d)
"""


def events_reference(torch, g: dict, reps: int = 5) -> dict:
    """The probe's operations on GPU g['index'], each timed with CUDA events over the probe's iteration count."""
    dev = int(g["index"])
    torch.cuda.set_device(dev)

    def settle(fn, iters: int, seconds: float) -> None:
        # the same load for the same time as the probe before its timed bursts (power-cap settling)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(iters):
                fn()
            torch.cuda.synchronize(dev)

    def timed(fn, iters: int, stream_dev: int) -> float:
        with torch.cuda.device(stream_dev):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            fn()
            start.record()
            for _ in range(iters):
                fn()
            stop.record()
            stop.synchronize()
        return start.elapsed_time(stop) / 1e3 / iters

    n = g["gemm"]["n"]
    a = torch.randn(n, n, device=f"cuda:{dev}", dtype=torch.bfloat16)
    b = torch.randn(n, n, device=f"cuda:{dev}", dtype=torch.bfloat16)
    c = torch.empty(n, n, device=f"cuda:{dev}", dtype=torch.bfloat16)
    settle(lambda: torch.matmul(a, b, out=c), g["gemm"]["iters"], g["gemm"].get("settle_s", 0.0))
    gemm = statistics.median(2.0 * n ** 3 / timed(lambda: torch.matmul(a, b, out=c), g["gemm"]["iters"], dev) / 1e12
                             for _ in range(reps))
    del a, b, c
    nb = g["membw"]["bytes"]
    src = torch.empty(nb, device=f"cuda:{dev}", dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    settle(lambda: dst.copy_(src), g["membw"]["iters"], g["membw"].get("settle_s", 0.0))
    membw = statistics.median(2.0 * nb / timed(lambda: dst.copy_(src), g["membw"]["iters"], dev) / 1e9 for _ in range(reps))
    del src, dst
    p2p = {}
    pg = g.get("p2p") or {}
    pb, piters = pg.get("bytes", 256 * 2 ** 20), pg.get("iters", 20)
    for peer in g.get("p2p_gbs") or {}:
        s = torch.empty(pb, device=f"cuda:{dev}", dtype=torch.uint8).fill_(1)
        d = torch.empty(pb, device=f"cuda:{int(peer)}", dtype=torch.uint8)
        settle(lambda: d.copy_(s, non_blocking=True), piters, pg.get("settle_s", 0.0))
        # a peer copy runs on the source device's current stream here; time it there
        p2p[peer] = statistics.median(pb / timed(lambda: d.copy_(s, non_blocking=True), piters, dev) / 1e9 for _ in range(reps))
        del s, d
    torch.cuda.empty_cache()
    return {"gemm_tflops": gemm, "membw_gbs": membw, "p2p_gbs": p2p}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    import torch

    cfg = config.defaults()
    cfg.data["general"]["state_dir"] = str(Path(args.out) / "state")
    cfg.data["fleet"].update(probe_python=sys.executable, probe_timeout_s=100.0)
    ngpu = torch.cuda.device_count()
    res: dict = {"device": [torch.cuda.get_device_name(i) for i in range(ngpu)], "torch": torch.__version__,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": []}
    last: dict[int, dict] = {}
    for k in range(args.runs):
        gpus, ref, walls = [], {}, []
        for i in range(ngpu):
            # odd runs time the reference first (with the previous run's burst sizes), even runs the probe first
            if k % 2 and i in last:
                ref[str(i)] = events_reference(torch, last[i])
            t0 = time.perf_counter()
            run = probe.run(cfg, gpus=[i])
            walls.append(time.perf_counter() - t0)
            assert run.status == "ok" and "error" not in run.gpus[0], run.to_dict()
            last[i] = run.gpus[0]
            gpus.append(run.gpus[0])
            if str(i) not in ref:
                ref[str(i)] = events_reference(torch, run.gpus[0])
        wall = sum(walls)
        res["runs"].append({"wall_s": wall, "wall_per_gpu_s": walls, "order": "events first" if k % 2 else "probe first",
                            "probe": gpus, "events": ref})
        print(f"run {k}: {wall:.1f} s wall; " + "; ".join(
            f"GPU {g['index']}: {g['gemm_tflops']:.1f} vs {ref[str(g['index'])]['gemm_tflops']:.1f} TFLOP/s, "
            f"{g['membw_gbs']:.0f} vs {ref[str(g['index'])]['membw_gbs']:.0f} GB/s, p2p {g['p2p_gbs']} vs "
            f"{ref[str(g['index'])]['p2p_gbs']}" for g in gpus), flush=True)
    # 2. hidden background load on the last GPU during a probe (the deep check's path)
    slow = ngpu - 1
    if ngpu < 2:
        return _finish(args, res, ngpu, None, False)
    bg = subprocess.Popen([sys.executable, "-c", BACKGROUND, str(slow), "60"], stdout=subprocess.PIPE, text=True)
    bg.stdout.readline()
    time.sleep(2.0)
    try:
        chk = gpu_probe.check({}, {}, [], cfg, CheckEnv(live=True))
    finally:
        bg.kill()
        bg.wait()
    kept = probe.load(cfg.general.state_dir)
    res["loaded"] = {"slow_gpu": slow, "check": chk.to_dict(), "kept": kept}
    ok_slow = chk.status == "warn" and f"GPU {slow} (" in chk.detail and all(
        f"GPU {i} (" not in chk.detail for i in range(ngpu) if i != slow)
    res["loaded"]["only_the_loaded_gpu_flagged"] = ok_slow
    return _finish(args, res, ngpu, chk, ok_slow)


def _finish(args: argparse.Namespace, res: dict, ngpu: int, chk, ok_slow: bool) -> int:
    slow = ngpu - 1
    # the table
    rows = []
    for key, unit in (("gemm_tflops", "TFLOP/s"), ("membw_gbs", "GB/s")):
        for g in range(ngpu):
            pv = [r["probe"][g][key] for r in res["runs"]]
            ev = [r["events"][str(g)][key] for r in res["runs"]]
            rows.append((f"{key} GPU{g}", statistics.median(pv), statistics.median(ev),
                         max(abs(p / e - 1) for p, e in zip(pv, ev)), (max(pv) - min(pv)) / statistics.median(pv), unit))
    for g in range(ngpu):
        for peer in res["runs"][0]["probe"][g]["p2p_gbs"]:
            pv = [r["probe"][g]["p2p_gbs"][peer] for r in res["runs"]]
            ev = [r["events"][str(g)]["p2p_gbs"][peer] for r in res["runs"]]
            rows.append((f"p2p GPU{g}->{peer}", statistics.median(pv), statistics.median(ev),
                         max(abs(p / e - 1) for p, e in zip(pv, ev)), (max(pv) - min(pv)) / statistics.median(pv), "GB/s"))
    per_gpu = [g["seconds"] for r in res["runs"] for g in r["probe"]]
    res["table"] = [dict(zip(("figure", "probe_median", "events_median", "max_rel_diff", "spread", "unit"), r)) for r in rows]
    res["cost_per_gpu_s"] = {"probe_own_median": statistics.median(per_gpu),
                             "wall_per_gpu_median": statistics.median(w for r in res["runs"] for w in r["wall_per_gpu_s"])}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "fleet_probe.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(f"\n{res['device']} torch {res['torch']}")
    print(f"{'figure':<18} {'probe':>10} {'events':>10} {'max diff':>9} {'spread':>7}")
    for r in rows:
        print(f"{r[0]:<18} {r[1]:>10.1f} {r[2]:>10.1f} {100 * r[3]:>8.2f}% {100 * r[4]:>6.2f}%  {r[5]}")
    print(f"cost per GPU: probe's own {res['cost_per_gpu_s']['probe_own_median']:.2f} s, "
          f"probe process wall incl. interpreter {res['cost_per_gpu_s']['wall_per_gpu_median']:.2f} s")
    for g in range(ngpu):
        print(f"GPU{g} GEMM per run (probe/events): " + ", ".join(
            f"{r['probe'][g]['gemm_tflops']:.0f}/{r['events'][str(g)]['gemm_tflops']:.0f} ({r['order']}, "
            f"{r['probe'][g]['gemm']['iters']} calls)" for r in res["runs"]))
    if chk is not None:
        print(f"background load on GPU {slow}: check {chk.status}: {chk.detail}")
        print(f"only the loaded GPU flagged: {ok_slow}")
    else:
        print("background-load proof needs 2 GPUs: skipped")
    agree = all(r[3] <= 0.05 for r in rows)
    print(f"probe within 5% of CUDA events everywhere: {agree}")
    return 0 if agree and (ok_slow or chk is None) else 1


if __name__ == "__main__":
    sys.exit(main())
