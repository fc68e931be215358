#!/usr/bin/env bash
# Run on the lent 2x H200 machine (issue 16), in one call of ~420 s: the allocator's value benchmark,
# gpuperf's environment vs NCCL's defaults with an ablation (paired intervals, 3 collectives), the
# emulated network path through gpuperf tune --transport socket, and OMP_NUM_THREADS on 16 CPUs.
# Every part has its own time limit and writes its results before the next starts.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD
W=$(mktemp -d)
{
date -u; nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -5; nproc
python3 -m gpuperf env --explain --gpus 2 --nodes 1
echo "== alloc_fragmentation"
timeout 45 python3 benchmarks/alloc_fragmentation.py --out $W; echo "alloc rc=$?"
cp $W/alloc_fragmentation.json $OUT/ 2>/dev/null
echo "== nccl_env"
timeout 215 python3 benchmarks/nccl_env.py --out $W --budget 185 --rounds 10 --timeout 60; echo "nccl_env rc=$?"
cp $W/nccl_env.md $W/nccl_env.json $OUT/ 2>/dev/null
echo "== tune --transport socket"
timeout 120 python3 -m gpuperf tune --transport socket --nproc 2 --rounds 10 --repeats 3 --budget 95 --timeout 45 \
    --out $W/tune-socket.toml; echo "tune rc=$?"
cp $W/tune-socket.toml $W/tune-socket.json $OUT/ 2>/dev/null
cat $W/tune-socket.toml
echo "== omp_shared_node"
timeout 35 python3 benchmarks/omp_shared_node.py --ranks 4 --iters 120 --rounds 2 --out $W; echo "omp rc=$?"
cp $W/omp_shared_node.json $OUT/ 2>/dev/null
echo "== summary"
cat $W/alloc_fragmentation.md $W/omp_shared_node.md 2>/dev/null
grep -E "^\| (8 KiB|1 MiB|64 MiB|1 GiB) |Bar:" $W/nccl_env.md 2>/dev/null
date -u
} 2>&1 | tee $OUT/run.log
