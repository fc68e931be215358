"""packaging/install.sh (the quick start's demo installs gpuperf with it) over a venv it did not make."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.geteuid() != 0, reason="install.sh runs as root (apt, chmod of the prefix)")
def test_install_completes_a_venv_without_pip_as_the_deb_leaves_it(tmp_path):
    # the .deb's /opt/gpuperf/venv has no pip: after `bash tests/run.sh` (which installs the .deb) the demo's
    # install.sh stopped at "venv/bin/pip: No such file or directory"
    prefix = tmp_path / "prefix"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(prefix / "venv")], check=True)
    assert not (prefix / "venv" / "bin" / "pip").exists()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(["bash", str(REPO / "packaging" / "install.sh")], env={**env, "GPUPERF_PREFIX": str(prefix)},
                       capture_output=True, text=True, timeout=600, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    v = subprocess.run([str(prefix / "bin" / "gpuperf"), "--version"], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0 and v.stdout.startswith("gpuperf "), (v.stdout, v.stderr)
