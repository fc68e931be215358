#!/usr/bin/env bash
# Run on the lent 2x H200 machine (issues 15, 16), one call of <= ~570 s:
# 1. the probe vs CUDA events (3 runs, one GPU at a time, order alternating) and a hidden background
#    load on GPU 1 during the deep check (benchmarks/device/fleet_probe.py);
# 2. gpuperf's environment vs NCCL's defaults with the ablation, all-reduce/all-gather/reduce-scatter
#    8 KiB-1 GiB, queued and launched timing, ranks pinned, as many paired rounds as the time left allows.
# FLEET=0 skips part 1. Before part 2 a one-round smoke (3 sizes) checks the queued timing on two ranks;
# if it fails, part 2 runs with the launched timing only. Prints a short table last; logs and JSON under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD
T0=$(date +%s); END=$((T0 + ${TOTAL_S:-565}))
{
date -u; nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -4; nproc
python3 -m gpuperf env --explain --gpus 2 --nodes 1 | head -20
if [ "${FLEET:-1}" != 0 ]; then
  echo "== fleet_probe"
  timeout 170 python3 benchmarks/device/fleet_probe.py --out $OUT/fleet --runs 3; echo "fleet_probe rc=$?"
fi
echo "== smoke: queued timing on two ranks"
TIMING=queued,launched
timeout 70 python3 benchmarks/nccl_env.py --out /tmp/smoke --sizes 8KiB,1MiB,64MiB --rounds 1 --no-ablation --repeats 3 \
    --timeout 30 --timing $TIMING > /tmp/smoke.log 2>&1
cp /tmp/smoke.log $OUT/smoke.log 2>/dev/null
grep -E "^round|FAILED|^\| (8 KiB|1 MiB|64 MiB) " /tmp/smoke.log | head -12
python3 -c "import json,sys; d=json.load(open('/tmp/smoke/nccl_env.json')); sys.exit(1 if any(s['errors'] for s in d['sets'].values()) else 0)" \
    || { TIMING=launched; echo "queued timing failed on two ranks: launched only"; grep -m3 FAILED /tmp/smoke.log; }
LEFT=$((END - $(date +%s)))
echo "== nccl_env ($LEFT s left, timing $TIMING)"
timeout $((LEFT - 12)) python3 benchmarks/nccl_env.py --out $OUT/env --budget $((LEFT - 45)) --rounds 60 --repeats 5 \
    --timeout 40 --timing $TIMING; echo "nccl_env rc=$?"
echo "== summary"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
try:
    d = json.load(open(f"{out}/fleet/fleet_probe.json"))
    print(f"fleet probe {d['device']}: cost/GPU {d['cost_per_gpu_s']}; only loaded GPU flagged: {d.get('loaded', {}).get('only_the_loaded_gpu_flagged')}")
    for r in d["table"]:
        print(f"  {r['figure']:<18} probe {r['probe_median']:9.1f} events {r['events_median']:9.1f} max diff {100*r['max_rel_diff']:5.2f}% spread {100*r['spread']:5.2f}%")
except Exception as e:
    print("fleet probe: no result", e)
try:
    d = json.load(open(f"{out}/env/nccl_env.json"))
    print(f"nccl_env: {len(d['sets']['default']['rounds'])} rounds, strict bar met: {d['bar_met_strict']}, lenient: {d['bar_met']}, "
          f"starved: { {n: s['starved'] for n, s in d['sets'].items()} }")
    for x in d["bar_reaching"][:40]:
        print("  reaching below the bar:", x)
except Exception as e:
    print("nccl_env: no result", e)
PY
date -u
} 2>&1 | tee $OUT/run.log
