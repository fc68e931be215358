#!/usr/bin/env bash
# Build gpuperf's SPANK plugin (gpuperf_spank.so) from source against Debian's libslurm-dev headers
# and install it where plugstack.conf points (default /opt/gpuperf/lib/gpuperf_spank.so).
#   bash packaging/build-spank.sh            # build + install
#   bash packaging/build-spank.sh --out DIR  # build into DIR only (tests, benchmarks)
# Idempotent; installs gcc and libslurm-dev with apt when they are missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${GPUPERF_PREFIX:-/opt/gpuperf}
src="$here/gpuperf/wrappers/gpuperf_spank.c"
out="$prefix/lib"
[ "${1:-}" = "--out" ] && out=${2:?--out needs a directory}

. "$here/packaging/apt-need.sh"
# the test cluster on a newer Debian suite's Slurm (tests/cluster/suiteroot.py): that release's headers, from its root
suite_inc=
if [ -n "${GPUPERF_SLURM_SUITE:-}" ]; then
  suite_inc=$here/build/slurm-roots/$GPUPERF_SLURM_SUITE.include
  mkdir -p "$suite_inc"
  ln -sfn "$here/build/slurm-roots/$GPUPERF_SLURM_SUITE/usr/include/slurm" "$suite_inc/slurm"
  apt_need gcc libc6-dev
else
  apt_need gcc libc6-dev libslurm-dev
fi

mkdir -p "$out"
tmp=$(mktemp "$out/.gpuperf_spank.XXXXXX.so")
trap 'rm -f "$tmp"' EXIT
# everything but the SPANK entry points and plugin_* symbols is static in the source
gcc -std=gnu11 -O2 -Wall -Wextra -Werror -fPIC -shared ${suite_inc:+-I"$suite_inc"} \
    -o "$tmp" "$src"
chmod 0755 "$tmp"
# rename: a slurmstepd loading the plugin right now never sees half a file
mv -f "$tmp" "$out/gpuperf_spank.so"
trap - EXIT
echo "gpuperf_spank.so built in $out"
