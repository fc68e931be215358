"""A 16-bin histogram of 256 Mi int32 values with global atomicAdd (CUDA kernel via CuPy): heavy contention.

Counts 4 bytes read per value.
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "latency_bound", "dtype": "int32", "kind": "atomics", "framework": "cupy", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "contended global atomics: SMs wait on the atomic units, neither math nor bandwidth"}

SRC = r"""
extern "C" __global__ void hist(const int* __restrict__ v, unsigned int* bins, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        atomicAdd(&bins[v[i] & 15], 1u);
}
"""
a = cli(__doc__, n=(int, 256 * 2**20, "values"))
kern = cp.RawKernel(SRC, "hist")
v = cp.random.randint(0, 2**30, a.n, dtype=cp.int32)
bins = cp.zeros(16, dtype=cp.uint32)
blocks = cp.cuda.Device().attributes["MultiProcessorCount"] * 8
timed("zoo_cupy_atomics_int32", a.seconds, lambda: kern((blocks,), (256,), (v, bins, cp.int64(a.n))), cupy_sync,
      nbytes=4 * a.n, batch=1)
