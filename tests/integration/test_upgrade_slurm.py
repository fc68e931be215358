"""A job running across a package upgrade still gets its complete report.

Only where tests/run.sh installed the .deb (``$GPUPERF_DEB``, gpuperf installed, the test cluster on
/opt/gpuperf's hooks): build a newer package from the checkout, start a job, install the newer package
while the job runs, restart the daemon as the package's upgrade does with systemd, and read the
job's AdminComment: complete (not partial), samples from before and after the restart.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from test_doctor_slurm import RECORDING, _start_daemon, _stop, _wait_port
from test_report_slurm import _admin_comment, _queue_state

from gpuperf.model import admincomment

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
DEB = os.environ.get("GPUPERF_DEB", "")


def _installed_version() -> str:
    q = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", "gpuperf"], capture_output=True, text=True)
    words = q.stdout.split()
    return words[-1] if q.returncode == 0 and "installed" in words else ""


@pytest.fixture(scope="module")
def newer_deb(tmp_path_factory):
    if not DEB or os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf") != "/opt/gpuperf" or not _installed_version():
        pytest.skip("needs the .deb installed by tests/run.sh (GPUPERF_DEB, gpuperf in /opt/gpuperf)")
    if not RECORDING:
        pytest.skip("no recording in tests/data/recordings for the daemon to replay")
    out = tmp_path_factory.mktemp("newer")
    old = _installed_version()
    p = subprocess.run(["bash", str(ROOT / "packaging" / "build-deb.sh"), "--out", str(out), "--version",
                        f"{old.rsplit('-', 1)[0]}-{int(old.rsplit('-', 1)[-1]) + 1 if '-' in old else 2}"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.split()[-1], old


def test_a_job_running_across_a_package_upgrade_gets_its_complete_report(slurm_cluster, newer_deb):
    deb, old = newer_deb
    c = slurm_cluster
    cfg = c.gpuperf_config()
    cfg.setdefault("daemon", {}).update(backend=f"replay:{RECORDING[0]}?gpus=4&loop=1", interval_s=0.5, metrics_port=0,
                                        checkpoint_s=1.0, user_socket_dir=str(c.dir / "run" / "daemon-user"))
    cfg.setdefault("controller", {}).update(merge_wait_s=10.0)
    c.write_gpuperf_config(cfg)
    daemon = _start_daemon(c)
    collector = subprocess.Popen(["/opt/gpuperf/bin/gpuperf", "daemon", "--controller", "--foreground"], env=c.env,
                                 stderr=subprocess.PIPE, text=True)
    try:
        _wait_port(cfg["controller"]["port"], collector)
        job = c.sbatch("sleep 25\n", "--gres=gpu:2")
        end = time.time() + 30
        while c.job_state(job) != "RUNNING":
            assert time.time() < end, c.job_state(job)
            time.sleep(0.2)
        time.sleep(3)  # samples and a checkpoint before the upgrade
        up = subprocess.run(["dpkg", "-i", deb], capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        new = _installed_version()
        assert new != old, (old, new)
        # what the package's postinst does with systemd (deb-systemd-invoke restart): stop, start the new code
        _stop(daemon)
        daemon = _start_daemon(c)
        assert c.wait(job, timeout=90) == "COMPLETED", c.logs()
        rec = c.wait_record(job, "merge", timeout=60)
        assert not rec["data"]["merge"]["partial"], rec
        # the AdminComment is written after the merge, asynchronously: wait for it before stopping the service
        assert _queue_state(c, job) == "done", c.gpuperf_log()[-3000:]
    finally:
        for p in (daemon, collector):
            if p.poll() is None:
                _stop(p)
        c.reset_gpuperf_config()
    decoded = admincomment.decode(_admin_comment(c, job))
    assert decoded["job"]["gpu_count"] == 2 and decoded["quality"]["samples"] > 0
    assert not decoded["quality"].get("partial"), decoded["quality"]
