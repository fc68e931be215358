#!/usr/bin/env bash
# Record the workload zoo (benchmarks/workloads/zoo_*.py, issue 30) on a lent 1-GPU machine with the nvml
# backend; run from the repo root with $OUT set. Each workload measures its own rate; record_workloads.py
# puts it into the recording's header. After each workload the recordings so far are tarred into
# $OUT/zoo-<gpu>.tar (a call returns 8 files at most), so a call stopped at its limit keeps what it made.
#   ZOO_SECONDS (timed work per workload, 5), ZOO_LIMIT_S (start no workload after this many seconds, 530),
#   ZOO_ONLY (comma-separated subset)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
S=${ZOO_SECONDS:-5}
LIMIT=${ZOO_LIMIT_S:-530}
ORDER="zoo_gemm_fp64 zoo_h2d_pinned zoo_h2d_pageable zoo_d2h_pinned zoo_d2h_pageable zoo_cupy_transpose_naive_fp32
zoo_sort_int32 zoo_gather_random_fp32 zoo_scatter_add_fp32 zoo_cupy_atomics_int32 zoo_reduce_rows_bf16 zoo_startup_gemm_bf16
zoo_cupy_tiny_grid zoo_launch_tiny_ops zoo_gemm_tf32 zoo_gemm_fp8 zoo_gemm_int8 zoo_gemm_fp32 zoo_gemm_fp16
zoo_layernorm_bf16 zoo_softmax_fp16 zoo_host_numpy_fp32 zoo_gemm_idle_tail_bf16 zoo_cupy_gemm_fp64
zoo_cupy_poly_fp64 zoo_cupy_poly_fp32 zoo_cupy_intmix_int32 zoo_cupy_axpy_fp64 zoo_attn_sdpa_bf16
zoo_attn_naive_fp16 zoo_conv_bf16 zoo_conv_autotune_fp16 zoo_compile_mlp_bf16 zoo_fft_c64 zoo_gemv_bf16
zoo_triad_fp32 zoo_gelu_bf16 zoo_reduce_sum_fp32 zoo_jax_gemm_bf16 zoo_jax_layernorm_fp32 zoo_bmm_bf16
zoo_idle_context zoo_train_mlp_bf16"
[ -n "${ZOO_ONLY:-}" ] && ORDER=${ZOO_ONLY//,/ }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
slug=$(echo "$gpu" | sed -E 's/^NVIDIA //I' | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/-/g; s/^-|-$//g')
vers=$(python3 -m pip list 2>/dev/null | grep -iE '^(torch|cupy-cuda13x|jax|nvidia-ml-py) ' | tr -s ' ' | tr '\n' ',')
how="lent cloud VM, 1x $gpu, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), ${vers%,}"
rec=/tmp/zoo-rec
mkdir -p "$rec"
t0=$(date +%s)
{
echo "zoo: $how; S=$S limit=$LIMIT"
for w in $ORDER; do
  el=$(( $(date +%s) - t0 ))
  if [ "$el" -ge "$LIMIT" ]; then echo "zoo: skipped $w (at ${el}s)"; continue; fi
  python3 benchmarks/record_workloads.py --out "$rec" --seconds "$S" --lead 1 --tail 1 --interval 0.5 \
    --grace 50 --workloads "$w" --how "$how"
  tar -C "$rec" -cf "$OUT/zoo-$slug.tar" .
done
echo "zoo: done in $(( $(date +%s) - t0 ))s"; ls -la "$rec"
} 2>&1 | tee "$OUT/zoo-$slug.log"
