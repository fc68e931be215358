#!/usr/bin/env bash
# gpuperf's Slurm test cluster on this machine (root; Debian, or GPUPERF_SLURM_PREFIX): up|down|status [NAME]
# [--nodes N] [--real-gpus] [--purge]
# NAME defaults to $GPUPERF_TEST_CLUSTER or "pytest". See tests/cluster/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "${GPUPERF_PREFIX:-/opt/gpuperf}/venv/bin/python" "$here/slurmcluster.py" "$@"
