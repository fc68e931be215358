"""The host-state check conftest runs after the whole session: it sees what a test leaves in state dirs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

try:
    import hoststate
except ImportError:
    from tests import hoststate


def test_snapshot_finds_new_gpuperf_paths_and_ignores_others(tmp_path):
    etc, run = tmp_path / "etc", tmp_path / "run"
    (etc / "slurm" / "plugstack.conf.d").mkdir(parents=True)
    (run / "netns").mkdir(parents=True)
    roots = (str(etc), str(run))
    before = hoststate.snapshot(roots)
    (etc / "gpuperf").mkdir()
    (etc / "gpuperf" / "config.toml").write_text("")
    (etc / "slurm" / "plugstack.conf.d" / "gpuperf.conf").write_text("")
    (run / "unrelated").mkdir()
    new = hoststate.new_paths(before, hoststate.snapshot(roots))
    assert new == [str(etc / "gpuperf"), str(etc / "gpuperf" / "config.toml"),
                   str(etc / "slurm" / "plugstack.conf.d" / "gpuperf.conf")]
    assert hoststate.new_paths(hoststate.snapshot(roots), hoststate.snapshot(roots)) == []
    assert "config.toml" in hoststate.report(new)


def test_a_session_that_writes_a_state_dir_fails_after_its_tests_pass(tmp_path):
    """Run pytest on a test that leaves a gpuperf file under a watched root: exit status 1, path named."""
    tests_dir = Path(__file__).resolve().parents[1]
    watched = tmp_path / "var-lib"
    watched.mkdir()
    (tmp_path / "test_leak.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        def test_leaks():
            (Path({str(watched)!r}) / "gpuperf").mkdir()
    """))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tests_dir)!r})
        import hoststate
        hoststate.ROOTS = ({str(watched)!r},)
        snap = hoststate.snapshot
        hoststate.snapshot = lambda roots=None, name="gpuperf": snap(hoststate.ROOTS, name)
        exec(open({str(tests_dir / "conftest.py")!r}).read())
    """))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 passed" in p.stdout and "host-state check" in p.stdout and str(watched / "gpuperf") in p.stdout
