#!/usr/bin/env bash
# The GPU acceptance suite on a GPU machine without Debian or a package registry (the lent H100/H200:
# Ubuntu, no network). Slurm comes from Debian 12's .debs unpacked into a prefix (dpkg -x; the test
# cluster's prefix mode, tests/cluster/README.md), gpuperf from wheels into its own venv; nothing
# is written outside the two prefixes but what the test cluster documents (/run/munge, the
# /usr/sbin/slurmstepd link while it runs, cgroup controllers turned on).
#   bash tests/gpu/node.sh BUNDLE setup            # install only (BUNDLE: made here by tests/gpu/bundle.sh)
#   bash tests/gpu/node.sh BUNDLE test [ARGS...]   # + pytest tests/gpu ARGS
#   bash tests/gpu/node.sh BUNDLE run CMD...       # + any command with the same environment
# Env: GPUPERF_PREFIX (default /tmp/gp-gpu), GPUPERF_SLURM_PREFIX (/tmp/gp-slurm), GPUPERF_TORCH_PYTHON
# (default python3: the jobs' and the probe's PyTorch).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$(cd "${1:?BUNDLE}" && pwd); what=${2:-setup}; shift 2 || true
export GPUPERF_PREFIX=${GPUPERF_PREFIX:-/tmp/gp-gpu}
export GPUPERF_SLURM_PREFIX=${GPUPERF_SLURM_PREFIX:-/tmp/gp-slurm}
export GPUPERF_SLURM_DEBS=$bundle/debs
export GPUPERF_TORCH_PYTHON=${GPUPERF_TORCH_PYTHON:-$(command -v python3)}
py=$GPUPERF_TORCH_PYTHON
p=$GPUPERF_PREFIX
if [ ! -x "$p/venv/bin/python" ]; then
  "$py" -m venv --without-pip "$p/venv"      # the image's Python; no ensurepip needed
  vpy=$p/venv/bin/python
  mkdir -p "$p/site" "$p/src" "$p/lib" "$p/bin"
  for w in "$bundle"/whl/*.whl; do "$py" -m zipfile -e "$w" "$p/site"; done
  # a copy, not the checkout: job users read it (the checkout may sit in root's 0700 home)
  cp -r "$here/gpuperf" "$p/src/"
  sp=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf '%s\n%s\n' "$p/src" "$p/site" > "$sp/gpuperf.pth"
  for h in prolog epilog taskprolog; do
    { echo "#!$vpy"; tail -n +2 "$here/packaging/bin/gpuperf-$h"; } > "$p/venv/bin/gpuperf-$h"
  done
  cp "$here/packaging/bin/gpuperf-epilog-slurmctld" "$p/venv/bin/"
  printf '#!%s\nimport sys\nfrom gpuperf.cli import main\nsys.exit(main())\n' "$vpy" > "$p/venv/bin/gpuperf"
  printf '#!%s\nimport sys\nfrom gpuperf.wrappers.run import main\nsys.exit(main())\n' "$vpy" > "$p/venv/bin/gpuperf-run"
  chmod 755 "$p"/venv/bin/gpuperf*
  for h in gpuperf gpuperf-epilog-slurmctld gpuperf-run; do
    ln -sfn "../venv/bin/$h" "$p/bin/$h"
  done
  cp "$bundle/lib/gpuperf_spank.so" "$p/lib/"
  # the hooks as packaged: the C client, which execs ../venv/bin/<hook> when the daemon cannot serve
  # (a bundle made before gpuperf-hook existed: the venv's hooks themselves)
  if [ -x "$bundle/lib/gpuperf-hook" ]; then
    install -m 0755 "$bundle/lib/gpuperf-hook" "$p/bin/gpuperf-hook"
    for h in gpuperf-prolog gpuperf-epilog gpuperf-taskprolog; do ln -sfn gpuperf-hook "$p/bin/$h"; done
  else
    for h in gpuperf-prolog gpuperf-epilog gpuperf-taskprolog; do ln -sfn "../venv/bin/$h" "$p/bin/$h"; done
  fi
  # bytecode now, as pip does: the image sets PYTHONDONTWRITEBYTECODE=1, and hooks that compile
  # gpuperf from source on every run cost a job 60-90 ms more (measured on an H100)
  "$vpy" -m compileall -q "$p/src" "$p/site" >/dev/null || true
  chmod -R a+rX "$p"
  echo "gpuperf installed in $p ($("$p/venv/bin/gpuperf" --version))"
fi
export PYTHONPATH=$here:$p/site
case $what in
  setup) ;;
  test) exec "$py" -m pytest -q -ra -p no:cacheprovider "$here/tests/gpu" "$@" ;;
  run) exec "$@" ;;
  *) echo "node.sh: setup|test|run, not $what" >&2; exit 2 ;;
esac
