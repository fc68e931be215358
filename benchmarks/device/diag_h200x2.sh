#!/usr/bin/env bash
# Run on the lent 2x H200 machine (repo root as cwd, $OUT set): ground-truth recordings for the
# diagnosis (issue 11): one busy GPU of two, an FP32 GEMM without TF32, a small bf16 GEMM, a training
# step, and last (it may hang) an all-reduce forced over NCCL's socket transport.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD
S=${DIAG_SECONDS:-20}
how="lent cloud VM, $(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), torch $(python3 -c 'import torch;print(torch.__version__)')"
{
nvidia-smi --query-gpu=index,name,power.limit --format=csv; nvidia-smi topo -m
python3 benchmarks/record_workloads.py --out "$OUT" --seconds "$S" --lead 2 --tail 2 \
  --workloads one_busy,gemm_fp32,gemm_bf16_2k,train_step --how "$how"
python3 benchmarks/record_workloads.py --out "$OUT" --seconds "$S" --lead 2 --tail 2 \
  --workloads allreduce_sockets --how "$how; NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo"
ls -la "$OUT"
} 2>&1 | tee "$OUT/h200x2.log"
