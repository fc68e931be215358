"""Peer-to-peer copies of 256 MiB between two GPUs of one process (GPU 0 -> 1 and 1 -> 0 at once), no compute:
the copy engines and NVLink carry the bytes, the SMs idle."""

import sys
import time

from _common import report, window
from _zoo import T_PROC, cli

LABEL = {"class": "transfer_bound", "dtype": "none", "kind": "transfer_p2p", "framework": "torch",
         "rate": "p2p_gbps", "gpus": 2, "exact": True,
         "contradicts": ["cuda_graphs", "tf32", "fp8", "bf16", "attention", "math_roof", "dataloader", "torch_compile"],
         "what": "device to device copies between peers: NVLink near its rate on the copy engines, SMs idle"}


def main() -> int:
    a = cli(__doc__, mib=(int, 256, "MiB per copy"), device=(str, "cuda", "cuda, or cpu (the loop without a GPU)"))
    import torch

    if a.device == "cuda" and torch.cuda.device_count() < 2:
        print(f"zoo_comm_p2p_copy: needs 2 GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    d0, d1 = ("cuda:0", "cuda:1") if a.device == "cuda" else ("cpu", "cpu")
    n = a.mib * 2**20
    src0, dst1 = torch.ones(n, dtype=torch.uint8, device=d0), torch.empty(n, dtype=torch.uint8, device=d1)
    src1, dst0 = torch.ones(n, dtype=torch.uint8, device=d1), torch.empty(n, dtype=torch.uint8, device=d0)
    peer = a.device == "cuda" and torch.cuda.can_device_access_peer(0, 1)
    s0 = torch.cuda.Stream(0) if a.device == "cuda" else None
    s1 = torch.cuda.Stream(1) if a.device == "cuda" else None

    def step():
        if s0 is None:
            dst1.copy_(src0)
            dst0.copy_(src1)
            return
        with torch.cuda.stream(s0):
            dst1.copy_(src0, non_blocking=True)
        with torch.cuda.stream(s1):
            dst0.copy_(src1, non_blocking=True)

    def sync():
        if s0 is not None:
            s0.synchronize()
            s1.synchronize()

    for _ in range(2):
        step()
    sync()
    t0, w0, k = time.monotonic(), time.time(), 0
    while time.monotonic() - t0 < a.seconds:
        for _ in range(4):
            step()
        sync()
        k += 4
    dt, w1 = time.monotonic() - t0, time.time()
    # each step moves n bytes each way; p2p_gbps counts both directions, per_direction one
    report("zoo_comm_p2p_copy", copies=2 * k, bytes=n, p2p_gbps=round(2 * n * k / dt / 1e9, 2),
           per_direction_gbps=round(n * k / dt / 1e9, 2), peer_access=int(peer), **window(w0, w1),
           t_proc=round(T_PROC, 3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
