#!/usr/bin/env bash
# Run on the lent 1x H100 machine (repo root as cwd, $OUT set): ground-truth recordings for the
# diagnosis (issue 11). Each workload measures its own TFLOP/s or GB/s; record_workloads.py puts that
# into the recording's header ("achieved"). Recordings land in $OUT directly, so a timeout keeps them.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD
S=${DIAG_SECONDS:-20}
how="lent cloud VM, 1x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), torch $(python3 -c 'import torch;print(torch.__version__)')"
{
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv
python3 -c 'import torch, pynvml; print("torch", torch.__version__, "fp8", hasattr(torch, "_scaled_mm"), "nvidia-ml-py", pynvml.__file__)'
python3 benchmarks/record_workloads.py --out "$OUT" --seconds "$S" --lead 2 --tail 2 \
  --workloads gemm_bf16,gemm_fp32,gemm_fp8,reduce_sum,train_step --how "$how"
python3 benchmarks/record_workloads.py --out "$OUT" --seconds $((S * 2)) --lead 2 --tail 2 --workloads phases --how "$how"
ls -la "$OUT"
} 2>&1 | tee "$OUT/h100.log"
