"""The gpuperf .deb (built by tests/run.sh from the checkout, path in $GPUPERF_DEB): what it installs and
where, lintian, and install / purge in a sandboxed copy of this machine (tests/sandbox.py)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

try:
    import sandbox
except ImportError:
    from tests import sandbox

DEB = os.environ.get("GPUPERF_DEB", "")
pytestmark = pytest.mark.skipif(not DEB or not Path(DEB).exists(),
                                reason="GPUPERF_DEB not set: tests/run.sh builds the .deb (packaging/build-deb.sh)")

# Every place the package may put something (README, "Deploy on a cluster"); parents of these are fine.
PLACES = (
    "/opt/gpuperf/",                        # venv, hooks (bin/), SPANK plugin (lib/)
    "/etc/gpuperf/config.toml",             # conffile
    "/etc/logrotate.d/gpuperf",
    "/lib/systemd/system/gpuperf-daemon.service",
    "/lib/systemd/system/gpuperf-collector.service",
    "/usr/share/doc/gpuperf/",
    "/usr/share/lintian/overrides/gpuperf",
)
HOOKS = ("gpuperf", "gpuperf-prolog", "gpuperf-epilog", "gpuperf-taskprolog", "gpuperf-epilog-slurmctld", "gpuperf-run", "gpuperf-mail")


def outside_places(paths: list[str]) -> list[str]:
    """Paths that are neither in one of PLACES nor a parent directory of one."""
    bad = []
    for p in paths:
        p = "/" + p.lstrip("./").rstrip("/") if p not in ("/", "/.", "./") else "/"
        if p == "/" or any(p == x.rstrip("/") or (x.endswith("/") and p.startswith(x)) for x in PLACES):
            continue
        if any(x.startswith(p + "/") for x in PLACES):
            continue  # a parent: /etc, /lib/systemd, /usr/share ...
        bad.append(p)
    return bad


def deb_paths(deb: str) -> list[str]:
    """The paths in a .deb's data (``dpkg-deb -c``), symlink targets left out."""
    out = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    return [line.split(None, 5)[5].split(" -> ")[0] for line in out.splitlines()]


def _entries(lines: list[tuple[str, str]]) -> set[str]:
    """Non-directory entries (files, links) as absolute paths; systemd's /usr/lib spelling made /lib."""
    out = set()
    for perms, path in lines:
        if perms.startswith("d"):
            continue
        p = "/" + path.lstrip("./")
        out.add(p.replace("/usr/lib/systemd/system/", "/lib/systemd/system/"))
    return out


def test_rpm_holds_the_same_files_as_the_deb():
    rpm = os.environ.get("GPUPERF_RPM", "")
    if not rpm or not Path(rpm).exists():
        pytest.skip("GPUPERF_RPM not set: tests/run.sh builds the .rpm (packaging/build-rpm.sh)")
    q = subprocess.run(["rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\\n]", rpm],
                       capture_output=True, text=True, check=True).stdout
    rpm_files = _entries([tuple(ln.split(" ", 1)) for ln in q.splitlines() if ln])
    out = subprocess.run(["dpkg-deb", "-c", DEB], capture_output=True, text=True, check=True).stdout
    deb_files = _entries([(ln.split()[0], ln.split(None, 5)[5].split(" -> ")[0]) for ln in out.splitlines()])
    debian_only = {"/usr/share/doc/gpuperf/changelog.Debian.gz", "/usr/share/doc/gpuperf/copyright",
                   "/usr/share/lintian/overrides/gpuperf"}
    assert sorted(rpm_files ^ (deb_files - debian_only)) == []
    assert outside_places(sorted(rpm_files)) == []


def test_outside_places_finds_strays():
    assert outside_places(["./", "./etc/", "./opt/gpuperf/venv/bin/python", "./usr/share/doc/gpuperf/README.md"]) == []
    assert outside_places(["./usr/bin/gpuperf", "./etc/gpuperf/other.toml"]) == ["/usr/bin/gpuperf", "/etc/gpuperf/other.toml"]


def test_deb_holds_nothing_outside_its_places_and_everything_it_promises():
    paths = deb_paths(DEB)
    assert outside_places(paths) == []
    names = {"/" + p.lstrip("./").rstrip("/") for p in paths}
    for h in HOOKS:
        assert f"/opt/gpuperf/bin/{h}" in names, h
        assert f"/opt/gpuperf/venv/bin/{h}" in names, f"/opt/gpuperf/bin/{h} would dangle"
    for f in ("/opt/gpuperf/lib/gpuperf_spank.so", "/opt/gpuperf/bin/gpuperf-hook", "/opt/gpuperf/venv/bin/python", "/etc/gpuperf/config.toml",
              "/etc/logrotate.d/gpuperf", "/lib/systemd/system/gpuperf-daemon.service",
              "/lib/systemd/system/gpuperf-collector.service"):
        assert f in names, f
    assert not [p for p in names if "__pycache__" in p], "compiled by postinst, not shipped"
    conffiles = subprocess.run(["dpkg-deb", "-I", DEB, "conffiles"], capture_output=True, text=True).stdout.split()
    assert conffiles == ["/etc/gpuperf/config.toml", "/etc/logrotate.d/gpuperf"]


def test_installed_package_lists_nothing_outside_its_places():
    q = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "gpuperf"], capture_output=True, text=True)
    if "installed" not in q.stdout.split():
        pytest.skip("gpuperf's .deb is not installed here (tests/run.sh installs it)")
    listed = subprocess.run(["dpkg", "-L", "gpuperf"], capture_output=True, text=True, check=True).stdout.split("\n")
    assert outside_places([p for p in listed if p.strip()]) == []


def test_lintian_reports_no_errors():
    p = subprocess.run(["lintian", "--tag-display-limit", "0", DEB], capture_output=True, text=True, timeout=600)
    errors = [ln for ln in p.stdout.splitlines() if ln.startswith("E:")]
    assert errors == [], p.stdout


@pytest.fixture
def box(tmp_path):
    why = sandbox.why_not()
    if why:
        pytest.skip(why)
    return sandbox.Sandbox(tmp_path)


def test_install_runs_the_hooks_keeps_stores_private_and_purge_keeps_job_stores(box):
    deb = box.put(DEB, "/tmp/gpuperf.deb")
    fresh = "dpkg --purge gpuperf >/dev/null 2>&1; rm -rf /var/lib/gpuperf /etc/gpuperf /var/log/gpuperf"
    p = box.run(f"{fresh}; dpkg -i {deb} && /opt/gpuperf/bin/gpuperf --version")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "gpuperf" in p.stdout
    state = box.path("/var/lib/gpuperf")
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert list(box.path("/opt/gpuperf/venv/lib").rglob("__pycache__")), "postinst compiles the venv"
    # a hook with no Slurm around: gpuperf's own failure never fails a job (exit 0)
    p = box.run("SLURM_JOB_ID=1 GPUPERF_CONFIG=/nonexistent /opt/gpuperf/bin/gpuperf-epilog; echo rc=$?")
    assert "rc=0" in p.stdout, p.stdout + p.stderr
    # purge: package, units, config and logs go; job stores stay unless asked for
    p = box.run("echo x > /var/lib/gpuperf/cluster.sqlite && dpkg --purge gpuperf && ls -a /var/lib/gpuperf "
                "&& ! test -e /opt/gpuperf/venv && ! test -e /etc/gpuperf && ! test -e /lib/systemd/system/gpuperf-daemon.service")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cluster.sqlite" in p.stdout and "job stores kept" in p.stderr
    p = box.run(f"dpkg -i {deb} >/dev/null && GPUPERF_PURGE_STORES=yes dpkg --purge gpuperf && ! test -e /var/lib/gpuperf")
    assert p.returncode == 0, p.stdout + p.stderr
    # a state dir an older install left open to all: closed to others, an admin's group kept
    p = box.run(f"install -d -m 0755 /var/lib/gpuperf && dpkg -i {deb} >/dev/null && stat -c %a /var/lib/gpuperf")
    assert p.stdout.split()[-1] == "750", p.stdout + p.stderr
