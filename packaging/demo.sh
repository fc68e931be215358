#!/usr/bin/env bash
# Quick start: install gpuperf and run the demo (a real single-node Slurm cluster with gpuperf wired
# in, sample jobs, their reports). Fresh Debian 12, as root. Takes a few minutes.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/packaging/install.sh"
exec /opt/gpuperf/venv/bin/python "$here/packaging/demo.py" "$@"
