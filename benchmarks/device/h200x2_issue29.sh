#!/usr/bin/env bash
# Issue 29 in ONE call on a lent 2-GPU machine (nvidia-h200-x2; any host with >= 2 GPUs), from the snapshot:
#   run(kind=nvidia-h200-x2, carry=[".dev/multi"], timeout_s=600,
#       command="cd .dev/multi && bash benchmarks/device/h200x2_issue29.sh .bundle")
# BUNDLE: tests/gpu/bundle.sh's .debs, wheels and SPANK plugin (the snapshot carries a copy as .bundle).
# STAGES (2nd argument, default tests,zoo,tune,cost), each under its own time limit so the call ends in
# I29_LIMIT_S (570 s):
#   tests  tests/gpu/test_multi_gpu.py on the real Slurm test cluster (2-GPU srun all-reduce job checked
#          against the plan, attribution, two 1-GPU jobs side by side, one GPU of two unused)
#   zoo    the 4 communication workloads recorded (nvml), diagnosed against their labels (comm_zoo_rows.py)
#   tune   gpuperf tune on the socket path, 8 KiB-256 MiB, queued timing; table + acceptance-rule check
#   cost   the all-reduce job with gpuperf on vs off, paired interleaved rounds (gpu_job_cost.py --job allreduce)
# Everything lands in $OUT/issue29.tgz (+ run.log and summary.txt): 3 files back. The short table is last.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:?BUNDLE}; stages=${2:-tests,zoo,tune,cost}
O=${OUT:-/tmp/i29-out}; R=/tmp/i29; rm -rf "$R"; mkdir -p "$O" "$R"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GPUPERF_TEST_CLUSTER=gpu
T0=$(date +%s); LIMIT=${I29_LIMIT_S:-570}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
# seconds a stage may take: what it asks, at most what is left less 25 s for the tar and the table
cap() { local want=$1 l; l=$(( $(left) - 25 )); [ "$l" -lt "$want" ] && want=$l; echo $(( want > 0 ? want : 0 )); }
# a stage starts only with 30 s or more for it (timeout 0 would mean no limit at all)
can() { if [ "$(cap "$2")" -lt 30 ]; then say "skipped $1: $(left) s left"; return 1; fi; }
nrun() { bash tests/gpu/node.sh "$B" run "$@"; }   # the bundle's wheels on PYTHONPATH with the checkout
has() { case ",$stages," in *",$1,"*) return 0;; esac; return 1; }
say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
finish() {
  tar czf "$O/issue29.tgz" -C "$R" . 2>/dev/null
  [ -d /tmp/gpuperf-slurm-gpu ] && tar czf "$O/cluster-logs.tgz" -C /tmp gpuperf-slurm-gpu/log gpuperf-slurm-gpu/slurm.conf \
    gpuperf-slurm-gpu/gpuperf.toml gpuperf-slurm-gpu/run/jobs 2>/dev/null
  python3 benchmarks/issue29_summary.py "$R" | tee "$O/summary.txt"
}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
{
say "stages $stages, limit ${LIMIT}s"
{ date -u; nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=driver_version --format=csv,noheader; uname -r
  nproc; python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} > "$R/machine.txt" 2>&1
if [ "$ngpu" -lt 2 ]; then say "this machine has $ngpu GPU(s): issue 29 needs 2 of one host; nothing run"; stages=none; fi
how="lent nvidia-h200-x2, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$ngpu, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
if [ "$stages" != none ]; then
  say "setup (Slurm from .debs, gpuperf from wheels)"
  bash tests/gpu/node.sh "$B" setup > "$R/setup.log" 2>&1 || { say "setup failed:"; tail -20 "$R/setup.log"; stages=none; }
fi
if has tests && can tests 260; then
  say "tests/gpu/test_multi_gpu.py (limit $(cap 260)s)"
  GPUPERF_GPU_RESULTS=$R/multi.json timeout "$(cap 260)" bash tests/gpu/node.sh "$B" run \
    python3 -m pytest -q -ra -p no:cacheprovider tests/gpu/test_multi_gpu.py > "$R/multi.log" 2>&1
  say "tests rc=$?"; tail -12 "$R/multi.log"
fi
if has zoo && can zoo 130; then
  say "zoo: 4 communication workloads recorded (limit $(cap 130)s)"
  mkdir -p "$R/zoo"
  timeout "$(cap 130)" bash tests/gpu/node.sh "$B" run python3 benchmarks/record_workloads.py --out "$R/zoo" --seconds 6 --lead 1 --tail 1 \
    --interval 0.5 --grace 40 --how "$how" --workloads \
    zoo_comm_allreduce_nvlink_bf16,zoo_comm_allreduce_sockets_fp32,zoo_comm_imbalance_bf16,zoo_comm_p2p_copy > "$R/zoo/record.log" 2>&1
  say "zoo rc=$?"
  nrun python3 benchmarks/comm_zoo_rows.py "$R/zoo" --md "$R/zoo/rows.md" > "$R/zoo/rows.log" 2>&1; tail -8 "$R/zoo/rows.log"
fi
if has tune && can tune 150; then
  b=$(cap 150)
  say "tune on the socket path, 8 KiB-256 MiB, queued (limit ${b}s)"
  timeout "$b" bash tests/gpu/node.sh "$B" run python3 benchmarks/tune_socket_table.py --out "$R/tune" --rounds 3 --repeats 5 \
    --budget $(( b > 40 ? b - 40 : 1 )) > "$R/tune.log" 2>&1
  say "tune rc=$?"; grep -E "^Rule check|^\| (NCCL|candidate)" "$R/tune.log" | head -5
fi
# the cost stage's length: I29_COST_S (stage seconds), I29_COST_SECONDS (each job's all-reduce loop), I29_COST_PAIRS
if has cost && can cost "${I29_COST_S:-300}"; then
  b=$(cap "${I29_COST_S:-300}")
  say "cost: all-reduce job, gpuperf on vs off (limit ${b}s)"
  timeout "$b" bash tests/gpu/node.sh "$B" run python3 benchmarks/gpu_job_cost.py --job allreduce \
    --pairs "${I29_COST_PAIRS:-8}" --seconds "${I29_COST_SECONDS:-5}" \
    --budget $(( b > 90 ? b - 90 : 1 )) --json "$R/cost.json" > "$R/cost.log" 2>&1
  say "cost rc=$?"; tail -3 "$R/cost.log"
fi
say "done"
} 2>&1 | tee "$R/run.log" | tee "$O/run.log"
finish
[ "$ngpu" -ge 2 ] || exit 3   # nothing could run here: say so in the exit status too
