"""One long kernel with a grid of a single 128-thread block (CUDA kernel via CuPy): ~0.25 s of dependent FMAs
per launch on one SM while the other SMs idle; launches are back to back, so there are no launch gaps."""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "underfilled", "dtype": "fp32", "kind": "small_grid", "framework": "cupy", "rate": "tflops",
         "exact": True, "contradicts": ["cuda_graphs", "dataloader", "tf32", "fp8", "bf16", "attention"],
         "what": "a kernel too small to fill the GPU: graphs cannot help, more blocks would"}

SRC = r"""
extern "C" __global__ void spin(float* out, long long iters) {
    float acc = threadIdx.x;
    for (long long i = 0; i < iters; ++i) acc = fmaf(acc, 0.9999f, 0.0001f);
    out[threadIdx.x] = acc;
}
"""
a = cli(__doc__, iters=(int, 200_000_000, "FMAs per thread per launch"))
kern = cp.RawKernel(SRC, "spin")
out = cp.zeros(128, dtype=cp.float32)
timed("zoo_cupy_tiny_grid", a.seconds, lambda: kern((1,), (128,), (out, cp.int64(a.iters))), cupy_sync,
      flops=2 * 128 * a.iters, batch=1, warm=1)
