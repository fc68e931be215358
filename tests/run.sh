#!/usr/bin/env bash
# Run gpuperf's whole test suite (unit tests + a real Slurm cluster on loopback) as root on Debian.
#
# Default (GPUPERF_PREFIX unset or /opt/gpuperf, as CI runs it): build the .deb from this checkout
# (packaging/build-deb.sh), install it (gpuperf in /opt/gpuperf, hooks /opt/gpuperf/bin), and point
# the test cluster at the installed hooks; pytest itself runs from a test venv of the checkout
# (build/testenv). GPUPERF_PREFIX=/tmp/gp-NAME: a developer's own editable install, no package.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${GPUPERF_PREFIX:-/opt/gpuperf}
cd "$here"
if [ "$prefix" = /opt/gpuperf ]; then
  t0=$(date +%s)
  deb=$(bash packaging/build-deb.sh --out "$here/build/deb")
  t1=$(date +%s)
  rpm=$(bash packaging/build-rpm.sh --out "$here/build/rpm")
  echo "tests/run.sh: built $(basename "$rpm") in $(( $(date +%s) - t1 )) s"
  t1=$(date +%s)
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends --allow-downgrades "$deb" >/dev/null
  echo "tests/run.sh: built $(basename "$deb") in $((t1 - t0)) s, installed in $(( $(date +%s) - t1 )) s"
  GPUPERF_PREFIX="$here/build/testenv" bash packaging/install.sh --test >/dev/null
  export GPUPERF_PREFIX=/opt/gpuperf GPUPERF_DEB=$deb GPUPERF_RPM=$rpm
  py="$here/build/testenv/venv/bin/python"
else
  bash packaging/install.sh --test
  py="$prefix/venv/bin/python"
fi
# the whole suite unless paths are given (bash tests/run.sh tests/integration/test_x.py -x)
paths=(tests)
for a in "$@"; do case $a in -*) ;; *) paths=(); break ;; esac; done
exec "$py" -m pytest -q -ra -p no:cacheprovider "${paths[@]}" "$@"
