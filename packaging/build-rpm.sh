#!/usr/bin/env bash
# Build gpuperf-<version>-1.<arch>.rpm from this checkout with rpmbuild and packaging/gpuperf.spec.
#   bash packaging/build-rpm.sh [--out DIR]
# On Debian (CI) rpmbuild comes from the rpm package; the venv is the build host's python3.11, so build on
# Rocky 9 itself for a site's nodes (python3.11 and slurm-devel installed there). Prints the .rpm's path.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/build/rpm
[ "${1:-}" = "--out" ] && out=$2
. "$here/packaging/apt-need.sh"
command -v apt-get >/dev/null && apt_need rpm python3.11 python3-venv python3-pip python3-setuptools python3-wheel gcc libslurm-dev
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$here/gpuperf/__init__.py")
mkdir -p "$out"
out=$(cd "$out" && pwd)
top=$(mktemp -d /tmp/gpuperf-rpm.XXXXXX)
trap 'rm -rf "$top"' EXIT
mkdir -p "$top"/{SOURCES,SPECS,BUILD,RPMS,SRPMS} "$top/src/gpuperf-$version"
(cd "$here" && git ls-files -z --cached --others --exclude-standard \
   | tar --null --ignore-failed-read -cf - -T - 2>/dev/null) | tar -xf - -C "$top/src/gpuperf-$version"
tar -C "$top/src" -czf "$top/SOURCES/gpuperf-$version.tar.gz" "gpuperf-$version"
rpmbuild -bb --define "_topdir $top" --define "gpuperf_version $version" --nodeps \
  "$here/packaging/gpuperf.spec" >"$top/build.log" 2>&1 || { tail -40 "$top/build.log" >&2; exit 1; }
rpm=$(find "$top/RPMS" -name 'gpuperf-*.rpm' | head -1)
cp "$rpm" "$out/"
echo "$out/$(basename "$rpm")"
