#!/usr/bin/env bash
# Run on the lent 4x H200 machine (repo root as cwd, $OUT set): topology recording, all-reduce
# recording, daemon CPU with the nvml backend (GPM) under a matmul load on every GPU.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
log=$OUT/part1.log
{
nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv
python3 -c 'import pynvml, torch; print("nvidia-ml-py", pynvml.__file__, "torch", torch.__version__)'
echo "== topology record"
python3 -m gpuperf topology --record /tmp/h200x4-vm && tar czf $OUT/h200x4-vm.tgz -C /tmp h200x4-vm
python3 -m gpuperf topology --root /tmp/h200x4-vm
echo "== check"
python3 -m gpuperf check
echo "== allreduce recording"
python3 benchmarks/record_workloads.py --out /tmp/rec --seconds 40 --workloads allreduce \
  --how "lent cloud VM, 4x NVIDIA H200 (NV18), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), torch $(python3 -c 'import torch;print(torch.__version__)')"
cp /tmp/rec/* $OUT/ 2>/dev/null; ls -la /tmp/rec
echo "== daemon CPU, nvml backend, matmul load on every GPU"
for g in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$g python3 benchmarks/workloads/matmul_bf16.py --seconds 215 >/tmp/mm$g.log 2>&1 & done
sleep 5
python3 benchmarks/daemon_cpu.py --backend nvml --seconds 180 --json
wait
tail -2 /tmp/mm*.log
} 2>&1 | tee $log
