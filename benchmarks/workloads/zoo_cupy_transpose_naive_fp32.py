"""Naive transpose of a 16384 x 16384 fp32 matrix (CUDA kernel via CuPy): coalesced reads, strided writes.

Counts 8 bytes per element (one read, one write); the strided writes move far more DRAM sectors than that.
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "latency_bound", "dtype": "fp32", "kind": "transpose", "framework": "cupy", "rate": "gbps",
         "exact": False, "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "an uncoalesced transpose: bound by its access pattern, no math pipe busy"}

SRC = r"""
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y;
    if (x < n) out[(size_t)x * n + y] = in[(size_t)y * n + x];
}
"""
a = cli(__doc__, n=(int, 16384, "matrix size"))
kern = cp.RawKernel(SRC, "transpose")
x = cp.random.random((a.n, a.n), dtype=cp.float32)
y = cp.empty_like(x)
grid, block = ((a.n + 255) // 256, a.n), (256,)
timed("zoo_cupy_transpose_naive_fp32", a.seconds, lambda: kern(grid, block, (x, y, cp.int32(a.n))), cupy_sync,
      nbytes=8 * a.n * a.n, batch=5)
