#!/usr/bin/env bash
# Build gpuperf_<version>_<arch>.deb with debhelper (dpkg-buildpackage -us -uc -b) from this checkout.
#   bash packaging/build-deb.sh [--out DIR] [--version V]
# The tree is copied (git's files only, so a clean checkout and a dev one build alike) into a build
# directory with packaging/debian as debian/; the checkout stays untouched. --version writes a
# changelog entry for V on top (the upgrade test builds a "newer" package this way). Installs the
# Build-Depends that are missing. Prints the .deb's path last.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/build/deb
version=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    *) echo "usage: build-deb.sh [--out DIR] [--version V]" >&2; exit 2 ;;
  esac
done
. "$here/packaging/apt-need.sh"
# python3.11 on Debian 12; Debian 13 has python3.13 as python3 (build-venv.sh builds with what is there)
apt_need build-essential dpkg-dev debhelper fakeroot lintian python3 python3-venv python3-pip python3-setuptools python3-wheel \
  gcc libc6-dev libslurm-dev
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/gpuperf-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
src=$work/gpuperf
mkdir -p "$src"
if git -C "$here" rev-parse --git-dir >/dev/null 2>&1; then
  # tracked and untracked-but-not-ignored files: what a commit of this tree would hold
  (cd "$here" && git ls-files -z --cached --others --exclude-standard \
     | tar --null --ignore-failed-read -cf - -T - 2>/dev/null) | tar -xf - -C "$src"
else
  tar -C "$here" --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$src"
fi
cp -a "$src/packaging/debian" "$src/debian"
if [ -n "$version" ]; then
  { printf 'gpuperf (%s) unstable; urgency=medium\n\n  * Build %s.\n\n -- gpuperf developers <gpuperf-dev@example.org>  %s\n\n' \
      "$version" "$version" "$(date -R)"; cat "$src/debian/changelog"; } > "$src/debian/changelog.new"
  mv "$src/debian/changelog.new" "$src/debian/changelog"
fi
(cd "$src" && dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1) || { tail -40 "$work/build.log" >&2; exit 1; }
deb=$(ls "$work"/gpuperf_*.deb)
cp "$deb" "$out/"
echo "$out/$(basename "$deb")"
