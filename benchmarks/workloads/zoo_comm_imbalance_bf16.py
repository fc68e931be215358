"""Data-parallel steps on two GPUs where rank 1 has a third of rank 0's work: each step a bf16 GEMM share, then
an all-reduce of 64 MiB of gradients. Rank 1 finishes early and waits in the all-reduce (imbalance)."""

from _comm import comm_cli, run, timed_comm

LABEL = {"class": "compute_bound", "imbalanced": True, "dtype": "bf16", "kind": "allreduce_imbalance",
         "framework": "torch", "rate": "tflops", "gpus": 2, "exact": False,
         "contradicts": ["cuda_graphs", "dataloader", "attention"],
         "what": "rank 0 runs 3 GEMMs per step, rank 1 one: rank 1's GPU is busy a third of the time and waits "
                 "in NCCL for the rest; the job's work is GEMM"}


def body(ctx, a) -> None:
    """GEMMs (3 on rank 0, 1 on rank 1), then an all-reduce, per step."""
    t = ctx.torch
    dt = t.bfloat16 if ctx.device.type == "cuda" else t.float32
    m = a.n
    x = t.randn(m, m, dtype=dt, device=ctx.device)
    w = t.randn(m, m, dtype=dt, device=ctx.device)
    g = t.ones(int(a.grad_mib * 2**20) // 2, dtype=dt, device=ctx.device)
    reps = 3 * a.gemms if ctx.rank == 0 else a.gemms

    def step():
        for _ in range(reps):
            t.mm(x, w)
        ctx.dist.all_reduce(g)

    # FLOPs of the whole job per step (both ranks' GEMMs), so rank 0's report is the job's rate
    flops = 2.0 * m**3 * (3 * a.gemms + a.gemms * (ctx.world - 1))
    timed_comm(ctx, "zoo_comm_imbalance_bf16", a.seconds, step, coll="allreduce", nbytes=g.numel() * g.element_size(),
               batch=2, flops=flops, duty=f"{a.gemms}:{3 * a.gemms}")


if __name__ == "__main__":
    raise SystemExit(run(body, comm_cli(__doc__, n=(int, 8192, "GEMM side"),
                                        gemms=(int, 4, "rank 1's GEMMs per step (rank 0: 3x)"),
                                        grad_mib=(float, 64.0, "MiB all-reduced per step"))))
