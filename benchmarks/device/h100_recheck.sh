#!/usr/bin/env bash
# Run on the lent H100 (issues 15, 16), ~2 min: the probe vs CUDA events (3 runs, one GPU at a time,
# order alternating), then the collective benchmark's queued timing on one GPU (NCCL, world 1) and its
# CPU path (gloo, pinned ranks) as a check before the 2x H200 run. Logs and JSON under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{
date -u; nvidia-smi -L; nproc; python3 -c "import torch; print(torch.__version__, hasattr(torch.cuda, '_sleep'))"
echo "== fleet_probe"
timeout 150 python3 benchmarks/device/fleet_probe.py --out $OUT/fleet --runs 3; echo "fleet_probe rc=$?"
echo "== nccl_env world 1 (queued + launched)"
timeout 100 python3 benchmarks/nccl_env.py --nproc 1 --sizes 8KiB,1MiB,64MiB --ablation-sizes 8KiB --rounds 2 \
    --repeats 3 --budget 80 --timeout 40 --out $OUT/nccl1; echo "nccl_env rc=$?"
echo "== nccl_env gloo cpu 2 ranks"
timeout 60 python3 benchmarks/nccl_env.py --backend gloo --device cpu --nproc 2 --sizes 8KiB,1MiB --ablation-sizes 8KiB \
    --rounds 2 --repeats 2 --colls allreduce --timeout 30 --out $OUT/gloo; echo "gloo rc=$?"
echo "== summary"
grep -E "^\| (8 KiB|1 MiB|64 MiB) |Bar|pinned" $OUT/nccl1/nccl_env.md | head -20
python3 -c "import json; d=json.load(open('$OUT/nccl1/nccl_env.json')); print({n: s['starved'] for n, s in d['sets'].items()}, d['pinned'])"
python3 -c "import json; d=json.load(open('$OUT/fleet/fleet_probe.json')); [print(r) for r in d['table']]; print(d['cost_per_gpu_s'])"
date -u
} 2>&1 | tee $OUT/run.log
