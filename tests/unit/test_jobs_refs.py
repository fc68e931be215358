"""`gpuperf jobs` given a job reference it cannot read: an error naming the accepted forms, never a listing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuperf.model.jobref import FORMS


@pytest.mark.parametrize("bad", ["8_x", "1_0x", "8__3", "８_3", "-3", "8_3_1"])
def test_a_malformed_job_reference_is_refused_with_the_forms_accepted(tmp_path, bad):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[general]\nrun_dir = "{tmp_path}/run"\nstate_dir = "{tmp_path}/state"\nlog_file = ""\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    r = subprocess.run([sys.executable, "-m", "gpuperf", "jobs", "--", bad], capture_output=True, text=True,
                       env={**env, "GPUPERF_CONFIG": str(cfg)}, timeout=60, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert "is not a job id" in r.stderr and all(form.split(" ", 1)[0] in r.stderr for form in FORMS), r.stderr
