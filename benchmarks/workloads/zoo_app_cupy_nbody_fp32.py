"""All-pairs gravitational n-body forces in fp32 (CUDA kernel via CuPy): 131072 bodies, each block stages
256 bodies at a time in shared memory and every thread accumulates its body's acceleration over all others.

FLOPs per interaction, from the kernel's source (FMA = 2): 3 subtractions, r^2 + eps by 3 FMAs (6), the
inverse cube by 3 multiplications, the acceleration by 3 FMAs (6): 18 FP32-pipe FLOPs; the one rsqrtf runs on
the special-function unit and is not counted. n^2 interactions a step (309 GFLOPs); no matrix product anywhere.
Start-up: importing CuPy and compiling the kernel (~2-4 s).
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "compute_bound", "dtype": "fp32", "kind": "nbody", "framework": "cupy", "rate": "tflops",
         "exact": True,
         "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "fewer_bytes",
                         "pytorch_only"],
         "what": "FP32 SIMT math (CUDA cores, no matrix product): TF32/tensor-core advice has no evidence"}

SRC = r"""
extern "C" __global__ void nbody(const float4* __restrict__ p, float* __restrict__ acc, int n) {
    extern __shared__ float4 sh[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 pi = p[i];
    float ax = 0.f, ay = 0.f, az = 0.f;
    for (int tile = 0; tile < n; tile += blockDim.x) {
        sh[threadIdx.x] = p[tile + threadIdx.x];
        __syncthreads();
        #pragma unroll 8
        for (int j = 0; j < blockDim.x; ++j) {
            float4 pj = sh[j];
            float dx = pj.x - pi.x, dy = pj.y - pi.y, dz = pj.z - pi.z;
            float r2 = fmaf(dx, dx, fmaf(dy, dy, fmaf(dz, dz, 1e-3f)));
            float inv = rsqrtf(r2);
            float s = pj.w * inv * inv * inv;
            ax = fmaf(dx, s, ax); ay = fmaf(dy, s, ay); az = fmaf(dz, s, az);
        }
        __syncthreads();
    }
    acc[3 * i] = ax; acc[3 * i + 1] = ay; acc[3 * i + 2] = az;
}
"""
BLOCK = 256
a = cli(__doc__, n=(int, 131072, "bodies (a multiple of 256)"))
if a.n % BLOCK:
    raise SystemExit(f"--n must be a multiple of {BLOCK}")
kern = cp.RawKernel(SRC, "nbody")
bodies = cp.random.random((a.n, 4), dtype=cp.float32)
acc = cp.empty(3 * a.n, dtype=cp.float32)
timed("zoo_app_cupy_nbody_fp32", a.seconds,
      lambda: kern((a.n // BLOCK,), (BLOCK,), (bodies, acc, cp.int32(a.n)), shared_mem=BLOCK * 16), cupy_sync,
      flops=18 * a.n * a.n, batch=5)
