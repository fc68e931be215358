"""A chain of elementwise operations in JAX, fused by XLA's jit into one kernel: out = tanh(x) * z +
0.5 exp(-x^2) + 0.25 z^2 over 128 Mi fp32 elements of two inputs.

Bytes per call: both inputs read once and the output written once (12 bytes an element, 1.6 GB); the
intermediates stay on chip (XLA fuses the chain). ~8 FP32 operations and two transcendentals an element
(not counted): far below the math roof.
Start-up: importing JAX and XLA's compile of the chain (~3-6 s).
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from _zoo import cli, jax_sync, timed  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

LABEL = {"class": "memory_bound", "dtype": "fp32", "kind": "elementwise_fused", "framework": "jax", "rate": "gbps",
         "exact": True,
         "contradicts": ["tf32", "attention", "dataloader", "cuda_graphs", "math_roof", "fewer_bytes", "pytorch_only"],
         "what": "an XLA-fused elementwise chain: one DRAM pass, already fused; PyTorch advice names a framework "
                 "it does not use"}

a = cli(__doc__, n=(int, 128 * 2**20, "elements"))


@jax.jit
def chain(x, z):
    return jnp.tanh(x) * z + 0.5 * jnp.exp(-x * x) + 0.25 * z * z


kx, kz = jax.random.split(jax.random.PRNGKey(0))
x = jax.random.normal(kx, (a.n,), dtype=jnp.float32)
z = jax.random.normal(kz, (a.n,), dtype=jnp.float32)
timed("zoo_app_jax_fused_elementwise_fp32", a.seconds, lambda: chain(x, z), jax_sync, nbytes=12 * a.n, batch=50)
