#!/usr/bin/env bash
# Record the real-application zoo (benchmarks/workloads/zoo_app_*.py, issue 35) on a lent 1-GPU machine with the
# nvml backend; run from the repo root with $OUT set. As zoo_record.sh: each workload measures its own rate,
# record_workloads.py puts it into the recording's header, and after each workload the recordings so far are
# tarred into $OUT/zoo-app-<gpu>.tar, so a call stopped at its limit keeps what it made. The workloads with
# the longest start-up (model build, torch.compile) run first; the two multi-phase jobs get ZOO_LONG_SECONDS.
#   ZOO_SECONDS (timed work per workload, 5), ZOO_LONG_SECONDS (the multi-phase jobs' --seconds, 15),
#   ZOO_LIMIT_S (start no workload after this many seconds, 520), ZOO_GRACE_S (seconds a workload may run past
#   its --seconds: start-up, compile; 100), ZOO_ONLY (comma-separated subset)
# Expected on one H100 (estimates, nothing measured before the first run): ~7 minutes for the 19.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S=${ZOO_SECONDS:-5}
LONG=${ZOO_LONG_SECONDS:-15}
LIMIT=${ZOO_LIMIT_S:-520}
GRACE=${ZOO_GRACE_S:-100}
ORDER="zoo_app_llama_prefill_bf16 zoo_app_compile_transformer_bf16 zoo_app_llama_decode_bf16
zoo_app_phases_gemm_add_bf16 zoo_app_train_eval_ckpt_bf16 zoo_app_adam_fused_fp32 zoo_app_decode_attn_kv32k_bf16
zoo_app_depthwise_conv_bf16 zoo_app_jax_fused_elementwise_fp32 zoo_app_cupy_nbody_fp32 zoo_app_cupy_jacobi_fp32
zoo_app_cupy_pointer_chase zoo_app_cupy_cholesky_fp64 zoo_app_cupy_spmv_csr_fp32 zoo_app_vit_b16_fp16
zoo_app_resnet50_train_amp_fp16 zoo_app_bert_train_bf16 zoo_app_dataloader_resnet18_fp16 zoo_app_two_procs_gemm_bf16"
[ -n "${ZOO_ONLY:-}" ] && ORDER=${ZOO_ONLY//,/ }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
slug=$(echo "$gpu" | sed -E 's/^NVIDIA //I' | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/-/g; s/^-|-$//g')
vers=$(python3 -m pip list 2>/dev/null | grep -iE '^(torch|torchvision|transformers|timm|cupy-cuda13x|jax|nvidia-ml-py) ' \
  | tr -s ' ' | tr '\n' ',')
how="lent cloud VM, 1x $gpu, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), ${vers%,}"
rec=/tmp/zoo-app-rec
mkdir -p "$rec"
t0=$(date +%s)
{
echo "zoo_app: $how; S=$S long=$LONG limit=$LIMIT grace=$GRACE; shm $(df -h /dev/shm 2>/dev/null | tail -1 | tr -s ' ')"
for w in $ORDER; do
  el=$(( $(date +%s) - t0 ))
  if [ "$el" -ge "$LIMIT" ]; then echo "zoo_app: skipped $w (at ${el}s)"; continue; fi
  case $w in zoo_app_phases_*|zoo_app_train_eval_*) s=$LONG ;; *) s=$S ;; esac
  w0=$(date +%s)
  python3 benchmarks/record_workloads.py --out "$rec" --seconds "$s" --lead 1 --tail 1 --interval 0.5 \
    --grace "$GRACE" --workloads "$w" --how "$how"
  echo "zoo_app: $w took $(( $(date +%s) - w0 ))s (at $(( $(date +%s) - t0 ))s)"
  tar -C "$rec" -cf "$OUT/zoo-app-$slug.tar" .
done
echo "zoo_app: done in $(( $(date +%s) - t0 ))s"; ls -la "$rec"
} 2>&1 | tee "$OUT/zoo-app-$slug.log"
