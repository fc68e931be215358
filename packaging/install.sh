#!/usr/bin/env bash
# Install gpuperf into /opt/gpuperf/venv (Debian's python3, readable by job users) as root.
#   bash packaging/install.sh          # runtime
#   bash packaging/install.sh --test   # + test dependencies
# Idempotent: a second run only updates the package.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${GPUPERF_PREFIX:-/opt/gpuperf}
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

. "$here/packaging/apt-need.sh"
apt_need python3 python3-venv gcc libc6-dev
# the venv is always Debian's /usr/bin/python3 (readable by job users), never the first python3 on PATH:
# one built from another interpreter (a root-only pyenv) is built again
if [ -x "$prefix/venv/bin/python" ] && [ "$(readlink -f "$prefix/venv/bin/python")" != "$(readlink -f /usr/bin/python3)" ]; then
  echo "gpuperf: $prefix/venv was built from $(readlink -f "$prefix/venv/bin/python"), not /usr/bin/python3: rebuilding it" >&2
  rm -rf "$prefix/venv"
fi
if [ ! -x "$prefix/venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$prefix/venv"
fi
# a venv the .deb or RPM made has no pip (tests/run.sh installs the .deb before a demo may run): bootstrap it
if [ ! -x "$prefix/venv/bin/pip" ]; then
  "$prefix/venv/bin/python" -m ensurepip --default-pip >/dev/null
fi
# Editable when job users can read the checkout (dev machines), a copy otherwise (/root is 0700).
mode=(); d=$here; readable=1
while [ "$d" != "/" ]; do
  perm=$(stat -c %A "$d"); [ "${perm:9:1}" = "x" ] || [ "${perm:9:1}" = "t" ] || readable=0
  d=$(dirname "$d")
done
# compat: a plain path in a .pth; the default import finder costs every hook ~10 ms at startup
[ "$readable" = 1 ] && mode=(--config-settings editable_mode=compat -e)
"$prefix/venv/bin/pip" install -q --disable-pip-version-check "${mode[@]}" "$here$extras"
# the hooks' stable paths, the same as the packages' (slurm.conf.snippet names them)
mkdir -p "$prefix/bin"
for h in gpuperf gpuperf-prolog gpuperf-epilog gpuperf-taskprolog gpuperf-epilog-slurmctld gpuperf-run gpuperf-mail; do
  ln -sfn "../venv/bin/$h" "$prefix/bin/$h"
done
bash "$here/packaging/build-spank.sh" || echo "gpuperf: SPANK plugin not built; gpuperf-run still pins" >&2
# Prolog, Epilog, TaskProlog: the C client (no interpreter start when the daemon serves), which execs the
# venv's Python hook otherwise; without it, the venv's hooks themselves
if bash "$here/packaging/build-hook.sh"; then
  for h in gpuperf-prolog gpuperf-epilog gpuperf-taskprolog; do ln -sfn gpuperf-hook "$prefix/bin/$h"; done
else
  echo "gpuperf: gpuperf-hook not built; the Prolog, Epilog and TaskProlog run the venv's Python hooks" >&2
fi
chmod -R o+rX "$prefix"
echo "gpuperf installed in $prefix/venv ($("$prefix/venv/bin/gpuperf" --version))"
