"""NCCL all-reduce of 64 MiB fp32 over two GPUs of one host forced onto TCP sockets (P2P and SHM off):
what a multi-node job sees when its only path is the host network stack."""

import os

from _comm import SOCKET_PATH

# before torch loads NCCL: NVLink, shared memory and InfiniBand off, sockets over loopback
os.environ.update(SOCKET_PATH, NCCL_SOCKET_IFNAME=os.environ.get("NCCL_SOCKET_IFNAME", "lo"))

from _comm import comm_cli, run, timed_comm  # noqa: E402

LABEL = {"class": "communication_bound", "dtype": "fp32", "kind": "allreduce_sockets", "framework": "torch",
         "rate": "busbw_gbps", "gpus": 2, "exact": True,
         "contradicts": ["cuda_graphs", "tf32", "fp8", "bf16", "math_roof", "attention", "dataloader"],
         "what": "an all-reduce over TCP on loopback: the GPUs wait on the host network stack, NVLink idle"}


def body(ctx, a) -> None:
    """All-reduce one buffer over the socket transport."""
    x = ctx.torch.ones(int(a.mib * 2**20) // 4, device=ctx.device)
    timed_comm(ctx, "zoo_comm_allreduce_sockets_fp32", a.seconds, lambda: ctx.dist.all_reduce(x),
               coll="allreduce", nbytes=x.numel() * 4, batch=4, transport="socket")


if __name__ == "__main__":
    raise SystemExit(run(body, comm_cli(__doc__, mib=(float, 64.0, "MiB per all-reduce"))))
