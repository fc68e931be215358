#!/usr/bin/env bash
# Build gpuperf's venv for a package: DESTDIR/opt/gpuperf/venv, ready to run at /opt/gpuperf/venv.
#   bash packaging/build-venv.sh DESTDIR [WHEEL_DIR]
#   bash packaging/build-venv.sh --python   # prints the interpreter it builds with
# Used by packaging/debian/rules and packaging/gpuperf.spec. Needs Python 3.11+ (python3.11 where there is
# one: Debian 12, Rocky 9; else the system's python3, e.g. Debian 13's 3.13), its venv and pip
# (Debian: python3-venv python3-pip python3-setuptools python3-wheel) and PyPI for the pinned wheels
# of requirements.lock. The venv is built in place under DESTDIR, then every absolute build path in
# it (script shebangs, activate, pyvenv.cfg) is rewritten to /opt/gpuperf/venv; the build fails if
# one remains. No .pyc is shipped: the package's postinst compiles them (hooks start ~10 ms faster).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${GPUPERF_PYTHON:-}" ]; then
  GPUPERF_PYTHON=/usr/bin/python3.11
  [ -x "$GPUPERF_PYTHON" ] || GPUPERF_PYTHON=$(readlink -f /usr/bin/python3)
fi
if [ "${1:-}" = --python ]; then echo "$GPUPERF_PYTHON"; exit 0; fi
dest=${1:?DESTDIR}
dest=$(cd "$dest" 2>/dev/null && pwd || { mkdir -p "$dest" && cd "$dest" && pwd; })
final=/opt/gpuperf/venv
venv=$dest$final
py=$GPUPERF_PYTHON
wheels=${2:-$here/build/wheels}

rm -rf "$venv"
mkdir -p "$(dirname "$venv")" "$wheels"
"$py" -m venv "$venv"
# gpuperf itself: a wheel built with the build host's setuptools (no download for the build system)
rm -f "$wheels"/gpuperf-*.whl
(cd "$here" && "$py" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w "$wheels" .)
"$venv/bin/pip" install -q --disable-pip-version-check --no-compile --only-binary=:all: --no-deps \
    -r "$here/packaging/requirements.lock"
"$venv/bin/pip" install -q --disable-pip-version-check --no-compile --no-deps "$wheels"/gpuperf-*.whl
"$venv/bin/pip" check >/dev/null || { "$venv/bin/pip" check; echo "build-venv: requirements.lock is incomplete" >&2; exit 1; }
# the installer is not part of the runtime: nobody pip-installs into a packaged venv
"$venv/bin/python" -m pip uninstall -q -y pip setuptools >/dev/null 2>&1 || true
rm -f "$venv"/bin/pip* "$venv"/bin/easy_install* "$venv"/bin/Activate.ps1 "$venv"/bin/activate.csh "$venv"/bin/activate.fish
find "$venv" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$venv" -name direct_url.json -delete   # records the build path of the wheel
# relocate: shebangs and the remaining text files that name the build path
grep -rlI --null -F "$venv" "$venv" | xargs -0 -r sed -i "s|$venv|$final|g"
if left=$(grep -rlI -F "$dest" "$venv"); then
  echo "build-venv: build path left in: $left" >&2; exit 1
fi
# pyvenv.cfg's "command" names the build path too (fixed above); the interpreter links are absolute
ls -l "$venv/bin/python"* | grep -q -- "-> $py" || true
echo "gpuperf venv built in $venv ($(du -sh "$venv" | cut -f1))"
