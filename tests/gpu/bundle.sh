#!/usr/bin/env bash
# Make the bundle tests/gpu/node.sh installs from on a GPU machine without network (run here, on
# Debian 12 with network): Slurm 22.05 + munge + MariaDB .debs (debs/), gpuperf's dependencies as
# cp312 manylinux x86_64 wheels (whl/, the GPU image's Python is 3.12), the SPANK plugin built
# against Debian's headers and the C hook client gpuperf-hook (lib/). About 26 MB.
#   bash tests/gpu/bundle.sh OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?OUT_DIR}; mkdir -p "$out/debs" "$out/whl" "$out/lib"; out=$(cd "$out" && pwd)
# FACTS.md "Real Slurm on the GPU machines"; + slurmdbd and a MariaDB server for accounting
# (AdminComment), with the libraries an Ubuntu image lacks; MariaDB's client: my_print_defaults only
(cd "$out/debs" && apt-get download -q slurmctld slurmd slurm-client libslurm38 slurm-wlm-basic-plugins munge \
  libmunge2 libhwloc15 libjson-c5 liblua5.1-0 libnuma1 libyaml-0-2 libreadline8 libdbus-1-3 slurmdbd \
  slurm-wlm-mysql-plugin libmariadb3 mariadb-common mariadb-server-core mariadb-client-core libaio1 liburing2 \
  libedit2 libncurses6 2>&1 | grep -v '^Get:' || true)
pins=$(grep -v '^ *#' "$here/packaging/requirements.lock" | grep -v '^ ' | sed 's/ *\\$//' | grep '==')
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux1_x86_64 -d "$out/whl" $pins
GPUPERF_PREFIX=$out bash "$here/packaging/build-spank.sh" --out "$out/lib" >/dev/null
bash "$here/packaging/build-hook.sh" --out "$out/lib" >/dev/null
du -sh "$out"
