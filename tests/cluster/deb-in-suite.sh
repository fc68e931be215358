#!/usr/bin/env bash
# The .deb on a newer Debian: built in the suite's root (tests/cluster/suiteroot.py, GPUPERF_SLURM_SUITE) with
# that suite's Python and libslurm-dev, installed there with apt, and `gpuperf doctor` run there (chroot, in a
# mount namespace of its own) against a test cluster of that suite's Slurm, with the package's daemon (replaying
# a recording: no GPU here) and collector started from the package. Run as root after `cluster.sh up NAME`:
#   GPUPERF_SLURM_SUITE=trixie bash tests/cluster/deb-in-suite.sh NAME
# The machine's CA bundle and pip.conf go into the root (pip reaches PyPI through the same proxy as here).
# Exit: doctor's (0: installation fine). Changes the instance's gpuperf.toml and state mode (a test instance).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
suite=${GPUPERF_SLURM_SUITE:?GPUPERF_SLURM_SUITE=trixie|sid}
name=${1:?instance NAME (cluster.sh up NAME)}
R=$here/build/slurm-roots/$suite
I=/tmp/gpuperf-slurm-$name
[ -f "$R/.gpuperf-root-ready" ] && [ -f "$I/slurm.conf" ] || { echo "no root $R or no instance $I" >&2; exit 2; }
rm -rf "$R/tmp/gpsrc" && mkdir -p "$R/tmp/gpsrc" "$R$I" "$R$R" "$R$R.bin" "$R/run/munge"
git -C "$here" archive HEAD | tar -x -C "$R/tmp/gpsrc"
cp /etc/ssl/certs/ca-certificates.crt "$R/tmp/host-ca.crt"
[ -f /etc/pip.conf ] && sed 's|^cert = .*|cert = /tmp/host-ca.crt|' /etc/pip.conf > "$R/etc/pip.conf"
E=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive
   PIP_CERT=/tmp/host-ca.crt SSL_CERT_FILE=/tmp/host-ca.crt)
t0=$(date +%s)
deb=$(chroot "$R" "${E[@]}" bash /tmp/gpsrc/packaging/build-deb.sh --out /tmp/gpdeb | tail -1)
t1=$(date +%s)
chroot "$R" "${E[@]}" apt-get install -y -q --allow-downgrades "$deb" >/dev/null
echo "deb-in-suite: built $(basename "$deb") in $suite in $((t1 - t0)) s, installed in $(( $(date +%s) - t1 )) s"
cp "$here/tests/data/recordings/allreduce-h200.jsonl.gz" "$I/rec.jsonl.gz"
python3 - "$I" <<'PY'
import re, sys
i = sys.argv[1]
p = f"{i}/gpuperf.toml"
s = re.sub(r"(?m)^(backend|interval_s|user_socket_dir|spool_dir) = .*\n", "", open(p).read())
s = s.replace("[daemon]\n", f'[daemon]\nbackend = "replay:{i}/rec.jsonl.gz?gpus=4&loop=1"\ninterval_s = 0.5\n'
              f'user_socket_dir = "{i}/run/daemon-user"\n', 1)
s = s.replace("[controller]\n", f'[controller]\nspool_dir = "{i}/spool-ended"\n', 1)
open(p, "w").write(s)
PY
chmod 700 "$I/state"
cp "$I/plugstack.conf" "$I/plugstack.conf.saved"
echo "optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=$I/run" >> "$I/plugstack.conf"
cp /etc/hosts "$R/etc/hosts"
rc=0
unshare -m --propagation private /bin/sh -s "$R" "$I" <<'SH' || rc=$?
set -e
R=$1; I=$2
mount --bind "$R" "$R$R"; mount --bind "$R.bin" "$R$R.bin"   # the root's rewritten programs name these paths
mount -t proc proc "$R/proc"; mount --rbind /sys "$R/sys"; mount --bind /dev "$R/dev"
mount --bind /run/munge "$R/run/munge"; mount --bind "$I" "$R$I"
E="env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 SLURM_CONF=$I/slurm.conf GPUPERF_CONFIG=$I/gpuperf.toml"
chroot "$R" $E /opt/gpuperf/bin/gpuperf daemon > "$I/log/deb-daemon.log" 2>&1 & d=$!
chroot "$R" $E /opt/gpuperf/bin/gpuperf daemon --controller > "$I/log/deb-collector.log" 2>&1 & c=$!
sleep 12
set +e
chroot "$R" $E /opt/gpuperf/bin/gpuperf doctor --role both; rc=$?
kill $d $c 2>/dev/null; wait $d $c 2>/dev/null
exit $rc
SH
mv "$I/plugstack.conf.saved" "$I/plugstack.conf"
chroot "$R" dpkg-query -W gpuperf python3 libslurm-dev
exit $rc
