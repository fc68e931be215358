#!/usr/bin/env bash
# Issue 27 on a lent GPU machine (one H100 or H200, Ubuntu, no network), from the repo root:
#   bash benchmarks/device/gpu_slurm.sh BUNDLE suite|cost|ncu|all [PAIRS]
# BUNDLE: made by tests/gpu/bundle.sh on a Debian machine with network. Logs and figures go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$1; what=${2:-all}; pairs=${3:-8}
O=${OUT:-/tmp/gpu-out}; mkdir -p "$O"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 GPUPERF_TEST_CLUSTER=gpu
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; uname -r; head -2 /etc/os-release
  nproc; echo "root subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"; command -v python3; python3 --version
  command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null; ls -l /dev/nvidia*; } > "$O/machine.txt" 2>&1
t0=$(date +%s)
bash tests/gpu/node.sh "$B" setup > "$O/setup.log" 2>&1 || { tail -30 "$O/setup.log"; exit 1; }
echo "setup $(( $(date +%s) - t0 )) s"
rc=0
if [ "$what" = suite ] || [ "$what" = all ]; then
  GPUPERF_GPU_RESULTS=$O/suite.json timeout 480 bash tests/gpu/node.sh "$B" test 2>&1 | tee "$O/suite.log" | tail -40
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = cost ] || [ "$what" = all ]; then
  timeout 500 bash tests/gpu/node.sh "$B" run python3 benchmarks/gpu_job_cost.py --pairs "$pairs" --ncu --json "$O/cost.json" \
    > "$O/cost.log" 2>&1; echo "cost rc=$?"; tail -5 "$O/cost.log"
fi
if [ "$what" = ncu ]; then
  timeout 300 bash tests/gpu/node.sh "$B" run python3 benchmarks/gpu_job_cost.py --ncu-only --seconds 6 --json "$O/ncu.json" \
    > "$O/ncu.log" 2>&1; echo "ncu rc=$?"; tail -5 "$O/ncu.log"
fi
tar czf "$O/cluster-logs.tgz" -C /tmp gpuperf-slurm-gpu/log gpuperf-slurm-gpu/out gpuperf-slurm-gpu/slurm.conf \
  gpuperf-slurm-gpu/gpuperf.toml gpuperf-slurm-gpu/run/jobs 2>/dev/null
echo "all $(( $(date +%s) - t0 )) s"
exit $rc
