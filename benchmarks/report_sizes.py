"""Summary and AdminComment sizes for 1, 8 and 2x8 GPUs, from real recordings folded as the daemon would.

    /opt/gpuperf/venv/bin/python benchmarks/report_sizes.py [RECORDING ...]

Prints one row per shape: summary JSON bytes (compact), AdminComment bytes, and whether detail had
to be dropped to fit sacct's 65,535 bytes. The AdminComment limit in the issue is 4 KiB for one
8-GPU node.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuperf.model import admincomment
from gpuperf.diagnosis import jobsummary as summary
from gpuperf.report import fromrecording

ROOT = Path(__file__).resolve().parents[1]


def _aggregates(paths: list[str], job_id: int, node: str, gpus: int) -> dict:
    """GPU i plays recording i mod len(paths): distinct GPUs, as compressible as a real node's."""
    aggs: dict | None = None
    for i in range(gpus):
        one, _ = fromrecording.replay_job(paths[i % len(paths)], job_id=job_id, node=node, gpus=1)
        if aggs is None:
            aggs = dict(one, gpus={})
        aggs["gpus"][str(i)] = one["gpus"]["0"]
    return aggs


def _node(paths: list[str], job_id: int, node: str, gpus: int) -> dict:
    aggs = _aggregates(paths, job_id, node, gpus)
    ctx = {"job_id": job_id, "node": node, "user": "alice", "uid": 1000,
           "env": {"NCCL_IB_HCA": {"value": "mlx5_0,mlx5_1,mlx5_2,mlx5_3", "reason": "ACTIVE IB ports"},
                   "NCCL_SOCKET_IFNAME": {"value": "eth0", "reason": "default route"},
                   "OMP_NUM_THREADS": {"value": "8", "reason": "cpus per task"}},
           "affinity": {str(r): {"gpu": r, "cpus": list(range(8 * r, 8 * r + 8)), "mem_policy": "bind"} for r in range(gpus)}}
    return summary.node_summary(aggs, ctx)


def main() -> int:
    """Print the sizes."""
    paths = sys.argv[1:] or [str(p) for p in sorted((ROOT / "tests" / "data" / "recordings").glob("*.jsonl*"))]
    if not paths:
        print("no recording in tests/data/recordings; pass some", file=sys.stderr)
        return 2
    shapes = {"1 GPU": [_node(paths, 1, "n1", 1)], "8 GPUs": [_node(paths, 2, "n1", 8)],
              "2x8 GPUs": [_node(paths, 3, "n1", 8), _node(paths[1:] + paths[:1], 3, "n2", 8)]}
    print(f"recordings (GPU i plays recording i mod {len(paths)}): {', '.join(Path(p).name for p in paths)}")
    print(f"{'shape':<10} {'summary B':>10} {'AdminComment B':>15} {'truncated':>10}")
    for name, parts in shapes.items():
        s = parts[0] if len(parts) == 1 else summary.merge(parts, [p["nodes"][0] for p in parts])
        text = admincomment.encode(s)
        dropped = admincomment.decode(text).get("truncated") or []
        print(f"{name:<10} {len(json.dumps(s, separators=(',', ':'))):>10} {len(text.encode()):>15} "
              f"{','.join(dropped) or 'no':>10}")
    print("AdminComment of one 8-GPU node, first 120 characters (sacct -o AdminComment%120):")
    print(admincomment.encode(shapes["8 GPUs"][0])[:120])
    return 0


if __name__ == "__main__":
    sys.exit(main())
