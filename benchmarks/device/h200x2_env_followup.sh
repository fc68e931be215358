#!/usr/bin/env bash
# Follow-up on the 2x H200 machine (issue 16), ~40 s: OMP_NUM_THREADS with 4 ranks on 32 CPUs (the main
# call's 120-iteration run did not finish its first setting in 35 s), and CUDA's device order vs the PCI
# order on identical GPUs (with and without CUDA_DEVICE_ORDER).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
{
for o in "" PCI_BUS_ID FASTEST_FIRST; do
  CUDA_DEVICE_ORDER=$o timeout 10 python3 -c "import os,torch; print('CUDA_DEVICE_ORDER=' + os.environ.get('CUDA_DEVICE_ORDER', ''), [(getattr(p, 'pci_bus_id', None), str(getattr(p, 'uuid', ''))[:8]) for p in map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))])"
done
nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader
timeout 30 python3 benchmarks/omp_shared_node.py --ranks 4 --iters 30 --rounds 1 --limit 12 --out $OUT; echo "omp rc=$?"
} 2>&1 | tee $OUT/followup.log
