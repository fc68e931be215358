#!/usr/bin/env bash
# Run gpuperf's whole test suite (unit tests + a real Slurm cluster on loopback) as root on Debian.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/packaging/install.sh" --test
cd "$here"
exec "${GPUPERF_PREFIX:-/opt/gpuperf}/venv/bin/python" -m pytest -q -ra -p no:cacheprovider tests "$@"
