"""A real Prometheus for tests and benchmarks: Debian's package, one private instance on loopback.

``binary()`` installs the package with apt when missing (root, Debian; serialised with the Slurm test
cluster's setup lock) and stops the packaged service if the install started it. ``running()`` starts
one instance in a directory of the caller's, scraping the given targets every ``scrape_s`` with each
target's ``instance`` set to the name a site's scrape of that node would give, and stops it (nothing
left listening) on exit.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

try:
    from cluster import host
except ImportError:  # tests/ became a package
    from tests.cluster import host


def binary() -> str | None:
    """Debian's prometheus binary, installed with apt when missing; None where it cannot be."""
    exe = shutil.which("prometheus")
    if exe or os.geteuid() != 0 or not shutil.which("apt-get"):
        return exe
    pidfile = Path("/run/prometheus.pid")
    had_service = pidfile.exists()
    with host.locked(host.GLOBAL_LOCK):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"]
        if host.sh(cmd, check=False, timeout=900, env=env).returncode != 0:
            host.sh(["apt-get", "update", "-q"], check=False, timeout=600, env=env)
            host.sh(cmd, check=False, timeout=900, env=env)
    # where policy-rc.d lets a package start its service, the install started Prometheus on :9090: stop
    # what this install started (never a service that was running before)
    if not had_service and pidfile.exists() and Path("/etc/init.d/prometheus").exists():
        host.sh(["/etc/init.d/prometheus", "stop"], check=False, timeout=60)
    return shutil.which("prometheus")


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def query(url: str, q: str, at: float | None = None) -> list:
    """An instant query's result list (now, or at epoch ``at``)."""
    params = {"query": q, **({"time": f"{at:.3f}"} if at is not None else {})}
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as r:
        return json.loads(r.read())["data"]["result"]


def wait_scraped_after(url: str, metric: str, t: float, timeout: float = 30) -> None:
    """Until every series of ``metric`` has a sample scraped after epoch ``t`` (a window's last scrape is in)."""
    deadline = time.time() + timeout
    while True:
        stamps = [float(r["value"][1]) for r in query(url, f"timestamp({metric})")]
        if stamps and min(stamps) > t:
            return
        assert time.time() < deadline, f"no scrape of {metric} after {t:.3f} within {timeout} s: {stamps}"
        time.sleep(0.2)


def scrape_health(url: str, metric: str, start: float, end: float) -> str:
    """Why a window may hold no samples, for a failing test's message: each target's last scrape and
    the samples of ``metric`` (any labels) in [start, end]."""
    out = []
    try:
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=10) as r:
            for t in json.loads(r.read())["data"]["activeTargets"]:
                out.append(f"target {t.get('labels', {}).get('instance')}: {t.get('health')} last {t.get('lastScrape')} "
                           f"took {t.get('lastScrapeDuration')} s error {t.get('lastError')!r}")
        span = max(1, int(end - start) + 1)
        for q in (f"count_over_time({metric}[{span}s])", f"count_over_time(up[{span}s])"):
            res = query(url, q, at=end)
            out.append(f"{q} at {end:.3f}: " + ", ".join(f"{x['metric']}={x['value'][1]}" for x in res))
    except (OSError, ValueError, KeyError) as e:
        out.append(f"Prometheus not asked: {e}")
    return "\n".join(out)


@dataclass
class Server:
    """A running instance."""

    url: str
    port: int
    proc: subprocess.Popen

    def stop(self) -> None:
        """Stop it and wait until nothing listens on its port."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@contextmanager
def running(exe: str, workdir: Path, targets: dict[str, str], scrape_s: float = 1.0,
            tsdb: Path | None = None, extra_args: tuple[str, ...] = ()) -> Iterator[Server]:
    """Prometheus scraping ``targets`` (address -> instance label) from ``workdir``; stopped on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    jobs = "".join(
        f"  - job_name: 'gpuperf-{i}'\n    static_configs:\n      - targets: ['{addr}']\n"
        f"    relabel_configs:\n      - target_label: instance\n        replacement: '{inst}'\n"
        for i, (addr, inst) in enumerate(sorted(targets.items())))
    conf = workdir / "prometheus.yml"
    every = f"{int(round(scrape_s * 1000))}ms"  # Prometheus durations take no fractions
    conf.write_text(f"global:\n  scrape_interval: {every}\n  evaluation_interval: {every}\n"
                    f"scrape_configs:{chr(10) + jobs if jobs else ' []' + chr(10)}")
    with open(workdir / "prometheus.log", "w") as log:
        proc = subprocess.Popen([exe, f"--config.file={conf}", f"--storage.tsdb.path={tsdb or workdir / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle", *extra_args],
                                stdout=subprocess.DEVNULL, stderr=log, cwd=workdir)
    srv = Server(f"http://127.0.0.1:{port}", port, proc)
    try:
        end = time.time() + 60
        while not listening(port):
            if proc.poll() is not None or time.time() > end:
                raise RuntimeError(f"prometheus did not start: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield srv
    finally:
        srv.stop()
        assert not listening(port), f"Prometheus still listening on {port}"
