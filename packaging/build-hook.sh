#!/usr/bin/env bash
# Build gpuperf-hook (gpuperf/wrappers/gpuperf_hook.c), the interpreter-free Prolog/Epilog/TaskProlog
# client, and install it as /opt/gpuperf/bin/gpuperf-hook (default; GPUPERF_PREFIX moves it).
#   bash packaging/build-hook.sh            # build + install
#   bash packaging/build-hook.sh --out DIR  # build into DIR only (packages, tests, bundles)
# Needs only gcc and libc6-dev (installed with apt when missing). The gpuperf-prolog, -epilog and
# -taskprolog links to it are made by whoever installs (install.sh, debian/rules, gpuperf.spec).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${GPUPERF_PREFIX:-/opt/gpuperf}
src="$here/gpuperf/wrappers/gpuperf_hook.c"
out="$prefix/bin"
[ "${1:-}" = "--out" ] && out=${2:?--out needs a directory}

if ! command -v gcc >/dev/null || [ ! -e /usr/include/stdio.h ]; then
  . "$here/packaging/apt-need.sh"
  apt_need gcc libc6-dev
fi

mkdir -p "$out"
tmp=$(mktemp "$out/.gpuperf-hook.XXXXXX")
trap 'rm -f "$tmp"' EXIT
gcc -std=gnu11 -O2 -Wall -Wextra -Werror -o "$tmp" "$src"
chmod 0755 "$tmp"
# rename: a slurmd starting a hook right now never runs half a file
mv -f "$tmp" "$out/gpuperf-hook"
trap - EXIT
echo "gpuperf-hook built in $out"
