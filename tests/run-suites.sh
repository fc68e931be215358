#!/usr/bin/env bash
# The integration suite on the newer Slurm releases a supported distribution ships: 24.11 (Debian 13,
# `trixie`) and 26.05 (Debian unstable, `sid`), each from a root of that suite made (once, cached under
# build/slurm-roots) by the test cluster itself (tests/cluster/suiteroot.py). Run after tests/run.sh,
# which ran the unit tests and the whole suite on 22.05 and installed gpuperf (GPUPERF_PREFIX: its prefix).
#
#   bash tests/run-suites.sh            # both releases, the named subset below
#   GPUPERF_SUITES=sid bash tests/run-suites.sh tests/integration/test_hooks_slurm.py
#
# The subset (CI's 60-minute limit: the whole suite takes about 15 minutes per release on the 2-core CI
# machine): hooks, the SPANK plugin built against the release's headers, the daemon, the controller and
# AdminComment (beside jobstats'), reports, doctor and the abuse tests. Left to 22.05 alone: the package,
# install and upgrade tests (the .deb is one for every release), the Prometheus report, the private-file,
# hostile-file, fleet and multi-rank tests (none reads a release-specific Slurm output).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export GPUPERF_PREFIX=${GPUPERF_PREFIX:-/opt/gpuperf}
py="$here/build/testenv/venv/bin/python"
[ -x "$py" ] || py="$GPUPERF_PREFIX/venv/bin/python"
subset=(tests/integration/test_hooks_slurm.py tests/integration/test_affinity_slurm.py
        tests/integration/test_daemon_slurm.py tests/integration/test_report_slurm.py
        tests/integration/test_coexist_slurm.py tests/integration/test_jobnames_slurm.py
        tests/integration/test_doctor_slurm.py tests/integration/test_abuse_slurm.py
        tests/integration/test_checks_slurm.py tests/integration/test_env_slurm.py)
[ $# -gt 0 ] && subset=("$@")
rc=0
for suite in ${GPUPERF_SUITES:-trixie sid}; do
  t0=$(date +%s)
  name="${GPUPERF_TEST_CLUSTER:-ci}-$suite"
  GPUPERF_SLURM_SUITE=$suite GPUPERF_TEST_CLUSTER=$name "$py" -m pytest -q -ra -p no:cacheprovider "${subset[@]}" || rc=1
  GPUPERF_SLURM_SUITE=$suite bash tests/cluster/cluster.sh down "$name" >/dev/null 2>&1 || true
  GPUPERF_SLURM_SUITE=$suite bash tests/cluster/cluster.sh down "$name-2n" >/dev/null 2>&1 || true
  echo "tests/run-suites.sh: $suite ($(cat "build/slurm-roots/$suite/.gpuperf-root-ready" 2>/dev/null | tr '\t' ' ')) took $(( $(date +%s) - t0 )) s"
done
exit $rc
