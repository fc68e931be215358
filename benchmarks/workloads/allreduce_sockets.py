"""All-reduce over 2+ GPUs of one host forced through NCCL's socket transport (no P2P, no shared memory).

What a job sees when NCCL falls back to TCP: the GPUs wait on the host network stack. The host's
interface byte counters (/proc/net/dev) over the run go into the report.
"""

import os
import sys
import time

os.environ.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_NVLS_ENABLE="0", NCCL_IB_DISABLE="1",
                  NCCL_NET="Socket", NCCL_SOCKET_IFNAME=os.environ.get("NCCL_SOCKET_IFNAME", "lo"))

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from _common import args, report, window  # noqa: E402
from allreduce import free_port, worker  # noqa: E402


def net_bytes() -> dict[str, int]:
    """rx+tx bytes per interface."""
    out = {}
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, rest = line.split(":", 1)
            v = rest.split()
            out[name.strip()] = int(v[0]) + int(v[8])
    return out


if __name__ == "__main__":
    a = args(__doc__, mib=(float, 64.0, "all-reduce size, MiB"), gpus=(int, 0, "GPUs to use; 0: all local"))
    world = a.gpus or torch.cuda.device_count()
    if world < 2:
        print(f"allreduce_sockets: needs at least 2 GPUs, found {world}", file=sys.stderr)
        sys.exit(2)
    n0, w0 = net_bytes(), time.time()
    mp.spawn(worker, args=(world, free_port(), a.seconds, a.mib), nprocs=world, join=True)
    n1, w1 = net_bytes(), time.time()
    moved = {k: n1[k] - n0.get(k, 0) for k in n1 if n1[k] - n0.get(k, 0) > 0}
    report("allreduce_sockets", transport="NCCL-NET/Socket", ifname=os.environ["NCCL_SOCKET_IFNAME"],
           net_gbps=round(sum(moved.values()) / (w1 - w0) / 1e9, 3),
           net_bytes=",".join(f"{k}:{v}" for k, v in sorted(moved.items())), **window(w0, w1))
