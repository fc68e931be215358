"""Integer hashing (512 rounds of xor-shift-multiply per element) in a CuPy kernel over 64 Mi uint32.

Integer pipe work: 5 integer operations per round, counted as 5 x 512 ops per element; 8 bytes per element.
"""

import cupy as cp

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "compute_bound", "dtype": "int32", "kind": "elementwise", "framework": "cupy", "rate": "tflops",
         "exact": True, "contradicts": ["fp8", "bf16", "tf32", "attention", "dataloader", "cuda_graphs", "fewer_bytes"],
         "what": "integer arithmetic (hashing): integer pipe busy, no floating point at all"}

ROUNDS = 512
a = cli(__doc__, n=(int, 64 * 2**20, "elements"))
mix = cp.ElementwiseKernel("uint32 x", "uint32 y",
                           f"unsigned int h = x; for (int i = 0; i < {ROUNDS}; ++i) {{ h ^= h >> 13; h *= 0x5bd1e995u; "
                           "h ^= h >> 15; } y = h;", "zoo_intmix")
x = cp.arange(a.n, dtype=cp.uint32)
y = cp.empty_like(x)
timed("zoo_cupy_intmix_int32", a.seconds, lambda: mix(x, y), cupy_sync, flops=5 * ROUNDS * a.n, nbytes=8 * a.n,
      batch=10)
