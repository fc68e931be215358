"""NCCL all-reduce of 256 MiB bf16 over two GPUs of one host (NVLink where they have it), one process per GPU."""

from _comm import comm_cli, run, timed_comm

LABEL = {"class": "communication_bound", "dtype": "bf16", "kind": "allreduce_nvlink", "framework": "torch",
         "rate": "busbw_gbps", "gpus": 2, "exact": True,
         "contradicts": ["cuda_graphs", "tf32", "fp8", "math_roof", "attention", "dataloader"],
         "what": "a bf16 all-reduce loop on 2 GPUs: NCCL's kernels hold a few SMs while NVLink carries the bytes"}


def body(ctx, a) -> None:
    """All-reduce one buffer over and over."""
    t = ctx.torch
    n = int(a.mib * 2**20) // 2
    x = t.ones(n, dtype=t.bfloat16 if ctx.device.type == "cuda" else t.float32, device=ctx.device)
    nbytes = x.numel() * x.element_size()
    timed_comm(ctx, "zoo_comm_allreduce_nvlink_bf16", a.seconds, lambda: ctx.dist.all_reduce(x),
               coll="allreduce", nbytes=nbytes, transport="default")


if __name__ == "__main__":
    raise SystemExit(run(body, comm_cli(__doc__, mib=(float, 256.0, "MiB per all-reduce"))))
