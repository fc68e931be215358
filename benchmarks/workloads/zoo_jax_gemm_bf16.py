"""bf16 GEMM in JAX (XLA, cuBLAS), 8192^3, 2 n^3 FLOPs per product."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from _zoo import cli, jax_sync, timed  # noqa: E402

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "gemm", "framework": "jax", "rate": "tflops",
         "exact": True, "contradicts": ["tf32", "bf16", "attention", "dataloader", "cuda_graphs"],
         "what": "a bf16 matrix product from JAX"}

a = cli(__doc__, n=(int, 8192, "matrix size"))
kx, ky = jax.random.split(jax.random.PRNGKey(0))
x = jax.random.normal(kx, (a.n, a.n), dtype=jnp.bfloat16)
y = jax.random.normal(ky, (a.n, a.n), dtype=jnp.bfloat16)
mm = jax.jit(jnp.dot)
timed("zoo_jax_gemm_bf16", a.seconds, lambda: mm(x, y), jax_sync, flops=2 * a.n**3, batch=40)
