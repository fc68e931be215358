#!/usr/bin/env bash
# Run on the lent 4x H200 machine: all-reduce bus bandwidth with NCCL defaults, gpuperf's injected
# environment, and forced guide settings; then gpuperf tune --quick.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD
{
python3 -m gpuperf env --explain
echo "== nccl_env"
timeout 330 python3 benchmarks/nccl_env.py --out $OUT
echo "nccl_env rc=$?"
echo "== tune --quick"
timeout 200 python3 -m gpuperf tune --out $OUT/tune-h200.toml --quick
echo "tune rc=$?"
cat $OUT/tune-h200.toml
} 2>&1 | tee $OUT/part2.log
