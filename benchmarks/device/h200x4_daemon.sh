#!/usr/bin/env bash
# Run on the lent 4x H200 machine (repo root as cwd, $OUT set, .whl/ carried): daemon CPU per
# GPU-sample with the nvml backend (GPM) over 180 s under a bf16 matmul on every GPU, then the
# prolog's latency with that daemon up (fast path vs full path).
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
{
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)"
echo "== daemon CPU, nvml backend, matmul load on every GPU, 180 s"
for g in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$g python3 benchmarks/workloads/matmul_bf16.py --seconds 225 >/tmp/mm$g.log 2>&1 & done
sleep 8
python3 benchmarks/daemon_cpu.py --backend nvml --seconds 180 --json
wait
tail -n1 /tmp/mm*.log
echo "== prolog latency, daemon up (nvml backend, GPUs idle)"
python3 benchmarks/prolog_daemon_latency.py --backend nvml --n 200 --runs 40
} 2>&1 | tee $OUT/daemon.log
