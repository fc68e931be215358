"""Run GPU workloads while recording them with the nvml backend: DIR/<workload>-<gpu model>.jsonl.gz.

    PYTHONPATH=. python benchmarks/record_workloads.py --out DIR --seconds 40 --workloads matmul_bf16,membound

The recorder runs in its own process (as the daemon would), starts before the workload and stops a
few seconds after it, so each recording shows the ramp up and down. The commands, the GPU model and the
driver go into each recording's "how"; the workload's own figures (its ``name: key=value`` report lines:
TFLOP/s or GB/s and the timed loop's window) go into the header's "achieved" once it has ended.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
REPO = HERE.parent


def available() -> list[str]:
    """Workload names: the scripts in benchmarks/workloads/."""
    return sorted(p.stem for p in WORKLOADS.glob("*.py") if not p.stem.startswith("_"))


def parse_workloads(text: str) -> list[str]:
    """Comma-separated workload names, each checked against the scripts present."""
    names = [w.strip() for w in text.split(",") if w.strip()]
    known = available()
    bad = [w for w in names if w not in known]
    if not names or bad:
        raise ValueError(f"unknown workload(s) {bad or '(none given)'}; known: {', '.join(known)}")
    return names


def model_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    s = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I).lower()
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "gpu"


def gpu_model() -> tuple[str, str]:
    """(GPU 0's name, driver version) from NVML."""
    sys.path.insert(0, str(REPO))
    from gpuperf.access import nvmlq

    m = nvmlq.nvml()
    name = nvmlq.query(m.nvmlDeviceGetName, m.nvmlDeviceGetHandleByIndex(0)) or "gpu"
    drv = nvmlq.query(m.nvmlSystemGetDriverVersion) or "?"
    dec = (lambda v: v.decode() if isinstance(v, bytes) else v)
    return dec(name), dec(drv)


def commands(workload: str, out: Path, seconds: float, lead_s: float, tail_s: float, interval: float,
             how: str, grace_s: float = 60.0) -> tuple[list[str], list[str]]:
    """(recorder command, workload command) for one workload; the recorder outlives the longest the workload may
    run (``seconds`` + ``grace_s``: a model build or compile before its timed work), stopped early at its end."""
    wl = [sys.executable, str(WORKLOADS / f"{workload}.py"), "--seconds", str(seconds)]
    rec = [sys.executable, "-m", "gpuperf.samplers.record", "--out", str(out),
           "--seconds", str(seconds + lead_s + tail_s + max(30.0, grace_s) + 5), "--interval", str(interval),
           "--workload", workload, "--how", f"{how}; workload: {shlex.join([str(Path(wl[1]).relative_to(REPO)), *wl[2:]])}"]
    return rec, wl


def run_one(workload: str, outdir: Path, model: str, seconds: float, lead_s: float, tail_s: float,
            interval: float, how: str, grace_s: float = 60.0) -> Path:
    """Record one workload; returns the recording's path."""
    out = outdir / f"{workload}-{model}.jsonl.gz"
    rec_cmd, wl_cmd = commands(workload, out, seconds, lead_s, tail_s, interval, how, grace_s)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               NCCL_NVLS_ENABLE="0")
    rec = subprocess.Popen(rec_cmd, env=env, cwd=REPO)
    stdout = ""
    try:
        time.sleep(lead_s)
        t0 = time.monotonic()
        # its own session, so a hung workload (an NCCL init that never ends) goes with all its children
        wl = subprocess.Popen(wl_cmd, env=env, cwd=WORKLOADS, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
        try:
            stdout, _ = wl.communicate(timeout=seconds + grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(wl.pid, signal.SIGKILL)
            stdout, _ = wl.communicate()
        print(stdout, end="", flush=True)
        print(f"{workload}: exit {wl.returncode} after {time.monotonic() - t0:.1f} s", flush=True)
        time.sleep(tail_s)
    finally:
        rec.send_signal(signal.SIGTERM)
        try:
            rec.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rec.kill()
    achieved = parse_reports(stdout)
    if achieved and out.exists():
        add_to_header(out, {"achieved": achieved})
    return out


def _value(text: str) -> object:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def parse_reports(stdout: str) -> dict[str, dict[str, object]]:
    """The workloads' own figures (``name: k=v ...`` lines from _common.report), by report name."""
    out: dict[str, dict[str, object]] = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\w+): ((?:\w+=\S+ ?)+)$", line.strip())
        if m:
            out[m.group(1)] = {k: _value(v) for k, v in (kv.split("=", 1) for kv in m.group(2).split())}
    return out


def add_to_header(path: Path, extra: dict[str, object]) -> None:
    """Merge ``extra`` into the recording's header line (the workload's figures are known only at its end)."""
    import gzip
    import json

    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    head = json.loads(lines[0])
    head.update(extra)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join([json.dumps(head), *lines[1:]]) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Command line entry."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the recordings")
    p.add_argument("--seconds", type=float, default=40.0, help="workload run time each")
    p.add_argument("--workloads", required=True, help=f"comma-separated, of: {', '.join(available())}")
    p.add_argument("--interval", type=float, default=1.0, help="sampling interval")
    p.add_argument("--lead", type=float, default=3.0, help="seconds recorded before each workload")
    p.add_argument("--tail", type=float, default=3.0, help="seconds recorded after each workload")
    p.add_argument("--grace", type=float, default=60.0,
                   help="seconds a workload may run past --seconds (start-up, compile) before it is killed")
    p.add_argument("--how", default="", help="machine description for the header (cloud VM, host, ...)")
    a = p.parse_args(argv)
    try:
        names = parse_workloads(a.workloads)
    except ValueError as e:
        p.error(str(e))
    if a.seconds <= 0 or a.interval <= 0:
        p.error("--seconds and --interval must be > 0")
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    name, driver = gpu_model()
    how = (f"benchmarks/record_workloads.py on {name} x{_gpu_count()} driver {driver}"
           + (f" ({a.how})" if a.how else "") + f"; interval {a.interval} s")
    for w in names:
        print(run_one(w, outdir, model_slug(name), a.seconds, a.lead, a.tail, a.interval, how, a.grace), flush=True)
    return 0


def _gpu_count() -> int:
    from gpuperf.access import nvmlq

    return nvmlq.query(nvmlq.nvml().nvmlDeviceGetCount) or 0


if __name__ == "__main__":
    sys.exit(main())
