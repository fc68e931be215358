"""A 2-D Jacobi sweep (5-point stencil, fixed boundary) over a 16384 x 16384 fp32 grid (CUDA kernel via CuPy),
two grids swapped each sweep: b[i,j] = (a[i-1,j] + a[i+1,j] + a[i,j-1] + a[i,j+1]) / 4.

Bytes per sweep: each interior point read once and written once (8 bytes a point, 2.1 GB); the neighbours'
re-reads come from L1/L2. 4 FLOPs a point (not the limit).
Start-up: importing CuPy, compiling the kernel, filling two 1 GiB grids (~2-4 s).
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "memory_bound", "dtype": "fp32", "kind": "stencil", "framework": "cupy", "rate": "gbps",
         "exact": True,
         "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "math_roof", "pytorch_only"],
         "what": "a stencil sweep: one streaming pass per sweep, DRAM bandwidth"}

SRC = r"""
extern "C" __global__ void jacobi(const float* __restrict__ a, float* __restrict__ b, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y;
    if (x < 1 || x >= n - 1 || y < 1 || y >= n - 1) return;
    size_t i = (size_t)y * n + x;
    b[i] = 0.25f * (a[i - 1] + a[i + 1] + a[i - n] + a[i + n]);
}
"""
a = cli(__doc__, n=(int, 16384, "grid size"))
kern = cp.RawKernel(SRC, "jacobi")
grids = [cp.random.random((a.n, a.n), dtype=cp.float32)]
grids.append(grids[0].copy())                  # same fixed boundary in both
grid, block = ((a.n + 255) // 256, a.n), (256,)


def sweep():
    kern(grid, block, (grids[0], grids[1], cp.int32(a.n)))
    grids.reverse()


timed("zoo_app_cupy_jacobi_fp32", a.seconds, sweep, cupy_sync, nbytes=8 * (a.n - 2) ** 2,
      flops=4 * (a.n - 2) ** 2, batch=20)
