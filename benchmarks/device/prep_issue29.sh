#!/usr/bin/env bash
# Make the snapshot benchmarks/device/h200x2_issue29.sh runs from (on the development machine):
#   bash benchmarks/device/prep_issue29.sh [DEST (default /work/main/.dev/multi)] [BUNDLE (default /work/main/.dev/gpu/.bundle)]
# DEST: this checkout without .git, build outputs and the node/zoo fixtures the GPU run does not read (the lent
# machine reads its own topology), plus BUNDLE (tests/gpu/bundle.sh's .debs, wheels and SPANK plugin) as
# DEST/.bundle. DEST must be a folder of the session's checkout that .git/info/exclude ignores (carry it).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-/work/main/.dev/multi}; bundle=${2:-/work/main/.dev/gpu/.bundle}
[ -f "$bundle/lib/gpuperf_spank.so" ] && ls "$bundle"/debs/slurmd_*.deb >/dev/null 2>&1 \
  || { echo "prep_issue29: $bundle is not a bundle (bash tests/gpu/bundle.sh $bundle makes one)" >&2; exit 2; }
mkdir -p "$dest"
# untracked files count against the call's 64 MiB: the snapshot must be ignored (and carried) instead
ex="$here/.git/info/exclude"
if [ -d "$here/.git" ] && ! grep -qx '.dev/' "$ex" 2>/dev/null; then mkdir -p "$here/.git/info"; echo '.dev/' >> "$ex"; fi
rsync -a --delete --exclude .git --exclude build --exclude .bundle --exclude '*.egg-info' --exclude __pycache__ \
  --exclude tests/data/nodes --exclude tests/data/recordings/zoo "$here/" "$dest/"
rsync -a --delete "$bundle/" "$dest/.bundle/"
mb=$(( $(du -sb "$dest" | cut -f1) / 1048576 ))
echo "snapshot $dest: ${mb} MiB (the call carries at most 64 MiB with the checkout)"
[ "$mb" -lt 58 ] || { echo "prep_issue29: too large to carry" >&2; exit 1; }
