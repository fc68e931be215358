"""Sparse matrix-vector product y = A x with a CSR matrix (cupyx.scipy.sparse, cuSPARSE SpMV), fp32:
16 Mi rows, 32 non-zeros a row at random distinct columns in a window of 8192 around the diagonal (one in
each 256-column bucket of the window, so each row's columns are sorted and unique: the canonical format
cuSPARSE's SpMV asks for; a banded, PDE-like pattern), 512 Mi non-zeros with int32 indices.

Bytes per product, each counted once: values and column indices (8 a non-zero, 4.3 GB), the row pointers,
x read once and y written (4 bytes a row each). x (64 MB) is re-read through L2 around the band.
2 FLOPs a non-zero (not the limit).
Start-up: importing CuPy and building the matrix on the GPU (~2-5 s).
"""

import cupy as cp
import cupyx.scipy.sparse as sparse

from _zoo import cli, cupy_sync, timed

LABEL = {"class": "memory_bound", "dtype": "fp32", "kind": "spmv", "framework": "cupy", "rate": "gbps",
         "exact": True,
         "contradicts": ["tf32", "fp8", "bf16", "attention", "dataloader", "cuda_graphs", "math_roof", "pytorch_only"],
         "what": "a CSR SpMV: streams its values and indices once, bandwidth-bound (x mostly from L2)"}

a = cli(__doc__, rows=(int, 16 * 2**20, "rows = columns"), k=(int, 32, "non-zeros a row"),
        band=(int, 4096, "half-width of the window of columns (2 x band a multiple of k)"))
nnz, width = a.rows * a.k, 2 * a.band // a.k
indptr = cp.arange(0, nnz + 1, a.k, dtype=cp.int32)
base = cp.clip(cp.arange(a.rows, dtype=cp.int32) - a.band, 0, a.rows - 2 * a.band)   # the row's window start
cols = (base[:, None] + cp.arange(a.k, dtype=cp.int32) * width
        + cp.random.randint(0, width, (a.rows, a.k), dtype=cp.int32)).ravel()
del base
mat = sparse.csr_matrix((cp.random.random(nnz, dtype=cp.float32), cols, indptr), shape=(a.rows, a.rows))
vec = cp.random.random(a.rows, dtype=cp.float32)
timed("zoo_app_cupy_spmv_csr_fp32", a.seconds, lambda: mat @ vec, cupy_sync,
      nbytes=8 * nnz + 4 * (a.rows + 1) + 8 * a.rows, flops=2 * nnz, batch=20)
