"""The active probe, run in an admin-named CUDA-capable Python (``fleet.probe_python``) with PyTorch:
per GPU a bf16 GEMM (TFLOP/s), a device-memory copy (GB/s, read + write), and a copy to each peer the
GPU can reach directly (GB/s). JSON on stdout; never imports gpuperf (that Python may not have it).

    python probe_script.py [--gpus 0,1] [--reps 5] [--gemm-n 8192] [--copy-mib 1024] [--p2p-mib 256]

Each figure is the median of ``reps`` timed bursts (wall clock around a synchronised burst; the
burst is long enough that launch and sync overheads stay under 1%), taken after the same load has run
for a settling time; ``*_runs`` lists every burst so the spread shows. Exit 0 with ``{"error": ...}`` when no CUDA is available: the caller reports it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def _sync(torch, devs: tuple[int, ...]) -> None:
    for d in devs:
        torch.cuda.synchronize(d)


def _timed(torch, fn, iters: int, devs: tuple[int, ...]) -> float:
    """Seconds for ``iters`` calls of ``fn``, every device in ``devs`` synchronised before and after."""
    _sync(torch, devs)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync(torch, devs)
    return time.perf_counter() - t0


def _bursts(torch, fn, devs: tuple[int, ...], reps: int, target_s: float, settle_s: float) -> tuple[list[float], int]:
    """Seconds per call for ``reps`` bursts of about ``target_s`` each, after ``settle_s`` of the same load.

    Calibration runs after two untimed calls and doubles the iterations until a burst is long enough to
    size: the first call of a fresh process includes library start-up and once sized the GEMM bursts to
    3 calls, whose synchronisation cost read 5-9% low against CUDA events (H100, H200). Settling matters for
    GEMMs at the power cap: on H200 the SM clock drops about a second into the load (measured: 685 ->
    609 TFLOP/s), so bursts taken before that are not the GPU's steady figure."""
    _timed(torch, fn, 2, devs)  # cold calls (library load, kernel selection) must not size the bursts
    iters = 1
    while True:
        t = _timed(torch, fn, iters, devs)
        if t >= target_s / 4 or iters >= 1 << 16:
            break
        iters *= 2
    iters = max(3, int(iters * target_s / max(t, 1e-9)))
    end = time.perf_counter() + settle_s
    while time.perf_counter() < end:
        _timed(torch, fn, iters, devs)
    return [_timed(torch, fn, iters, devs) / iters for _ in range(reps)], iters


def probe_gpu(torch, dev: int, args: argparse.Namespace) -> dict:
    """GEMM, memory copy and peer copies of one GPU."""
    t_start = time.perf_counter()
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    out: dict = {"index": dev, "name": props.name, "uuid": str(getattr(props, "uuid", "") or "") or None}
    n = args.gemm_n
    a = torch.randn(n, n, device=f"cuda:{dev}", dtype=torch.bfloat16)
    b = torch.randn(n, n, device=f"cuda:{dev}", dtype=torch.bfloat16)
    c = torch.empty(n, n, device=f"cuda:{dev}", dtype=torch.bfloat16)
    runs, iters = _bursts(torch, lambda: torch.matmul(a, b, out=c), (dev,), args.reps, args.burst_s, args.settle_s)
    flops = 2.0 * n ** 3
    out["gemm_runs"] = [flops / s / 1e12 for s in runs]
    out["gemm_tflops"] = statistics.median(out["gemm_runs"])
    out["gemm"] = {"n": n, "dtype": "bfloat16", "iters": iters, "settle_s": args.settle_s}
    del a, b, c
    nbytes = args.copy_mib * 2 ** 20
    src = torch.empty(nbytes, device=f"cuda:{dev}", dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    runs, iters = _bursts(torch, lambda: dst.copy_(src), (dev,), args.reps, args.burst_s, args.burst_s)
    out["membw_runs"] = [2.0 * nbytes / s / 1e9 for s in runs]   # each copy reads and writes every byte
    out["membw_gbs"] = statistics.median(out["membw_runs"])
    out["membw"] = {"bytes": nbytes, "iters": iters, "settle_s": args.burst_s}
    del src, dst
    out["p2p_gbs"] = {}
    pbytes = args.p2p_mib * 2 ** 20
    for peer in range(torch.cuda.device_count()):
        if peer == dev or not torch.cuda.can_device_access_peer(dev, peer):
            continue
        s = torch.empty(pbytes, device=f"cuda:{dev}", dtype=torch.uint8).fill_(1)
        d = torch.empty(pbytes, device=f"cuda:{peer}", dtype=torch.uint8)
        runs, iters = _bursts(torch, lambda: d.copy_(s, non_blocking=True), (dev, peer), args.reps, args.burst_s / 2,
                              args.burst_s / 2)
        out["p2p_gbs"][str(peer)] = statistics.median(pbytes / r / 1e9 for r in runs)
        out["p2p"] = {"bytes": pbytes, "iters": iters, "settle_s": args.burst_s / 2}
        del s, d
    torch.cuda.empty_cache()
    out["seconds"] = time.perf_counter() - t_start
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="", help="comma-separated indices (default: all)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--burst-s", type=float, default=0.2, help="length of one timed burst")
    ap.add_argument("--settle-s", type=float, default=1.5, help="GEMM load before the timed bursts (power-cap settling)")
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--p2p-mib", type=int, default=256)
    args = ap.parse_args(argv)
    res: dict = {"schema": "gpuperf.probe.v1", "t": time.time(), "gpus": []}
    try:
        import torch
    except ImportError as e:
        res["error"] = f"PyTorch not importable in {sys.executable}: {e}"
        print(json.dumps(res))
        return 0
    if not torch.cuda.is_available():
        res["error"] = f"CUDA not available to {sys.executable} (torch {torch.__version__})"
        print(json.dumps(res))
        return 0
    res["torch"] = torch.__version__
    gpus = [int(g) for g in args.gpus.split(",") if g.strip()] or list(range(torch.cuda.device_count()))
    for g in gpus:
        try:
            res["gpus"].append(probe_gpu(torch, g, args))
        except Exception as e:  # noqa: BLE001 - one GPU's failure is its own result
            res["gpus"].append({"index": g, "error": f"{type(e).__name__}: {e}"})
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
