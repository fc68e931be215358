"""LayerNorm in JAX (XLA-fused) over 4096 features of 65536 fp32 rows (reads and writes 4 bytes per element)."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from _zoo import cli, jax_sync, timed  # noqa: E402

LABEL = {"class": "memory_bound", "dtype": "fp32", "kind": "normalisation", "framework": "jax", "rate": "gbps",
         "exact": True, "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof"],
         "what": "LayerNorm compiled by XLA: DRAM bandwidth"}

a = cli(__doc__, rows=(int, 65536, "rows"), cols=(int, 4096, "features"))


@jax.jit
def layernorm(x):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5)


x = jax.random.normal(jax.random.PRNGKey(0), (a.rows, a.cols), dtype=jnp.float32)
timed("zoo_jax_layernorm_fp32", a.seconds, lambda: layernorm(x), jax_sync, nbytes=8 * a.rows * a.cols, batch=40)
