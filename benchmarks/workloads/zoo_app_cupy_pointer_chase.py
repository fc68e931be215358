"""Pointer chasing (CUDA kernel via CuPy): 262144 threads each follow 512 dependent hops p = next[p] through one
random cycle over 256 Mi int32 entries (1 GiB, far beyond L2): every load waits for the one before it.

Bytes: 4 a hop (the index loaded), a lower bound: each hop pulls a whole 32-byte sector from a random DRAM
row, one load in flight per thread. No arithmetic to speak of.
Start-up: importing CuPy and building the random cycle (a 256 Mi permutation, ~2-4 s).
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "latency_bound", "dtype": "int32", "kind": "pointer_chase", "framework": "cupy", "rate": "gbps",
         "exact": False,
         "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "math_roof", "pytorch_only"],
         "what": "dependent random loads, a 32-byte sector for 4 useful bytes: bound by scattered accesses and their "
                 "latency, neither streaming bandwidth nor math"}

SRC = r"""
extern "C" __global__ void chase(const int* __restrict__ nxt, int* __restrict__ pos, int hops, int threads) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= threads) return;
    int p = pos[t];
    for (int i = 0; i < hops; ++i) p = nxt[p];
    pos[t] = p;
}
"""
a = cli(__doc__, n=(int, 256 * 2**20, "entries"), threads=(int, 2**18, "chasing threads"),
        hops=(int, 512, "hops per thread per launch"))
perm = cp.random.permutation(a.n).astype(cp.int32)
nxt = cp.empty(a.n, dtype=cp.int32)
nxt[perm] = cp.roll(perm, -1)                  # one cycle through every entry
del perm
pos = cp.random.randint(0, a.n, a.threads, dtype=cp.int32)
kern = cp.RawKernel(SRC, "chase")
timed("zoo_app_cupy_pointer_chase", a.seconds,
      lambda: kern(((a.threads + 255) // 256,), (256,), (nxt, pos, cp.int32(a.hops), cp.int32(a.threads))),
      cupy_sync, nbytes=4 * a.threads * a.hops, batch=10)
