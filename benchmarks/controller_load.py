"""The controller service under a simulated cluster's job ends, on loopback.

    python benchmarks/controller_load.py --nodes 20000 --jobs 30000 [--rate 200] [--burst 1000] [--big 0]
        [--latency 0.05] [--fail-s 0] [--points 500] [--json OUT]

A real service process (``tests/unit/controller_stub.py``: the service with the AdminComment write
stubbed at ``--call-latency`` seconds per sacctmgr call plus ``--latency`` seconds per job line, the
shape benchmarks/sacctmgr_batch_cost.py measures on the real test cluster; failing while a flag file exists)
receives what a cluster of ``--nodes`` 8-GPU nodes sends: job ends at ``--rate`` per second (notice files in
the spool and the job's directory with its hook record, as gpuperf-epilog-slurmctld leaves them), plus
``--burst`` job ends at once a third of the way in, and with ``--big N`` one job of N nodes half way; for
each job its nodes' summaries (1 node for 70 % of jobs, 2, 4 or 8 for the rest; each with the bounded
per-GPU series, ``--points`` per metric, and the fleet figures a node sends), munge-authenticated.

The simulated nodes deliver as the daemon does (``gpuperf.daemon.workers.Deliveries``): one attempt per
send with a 2 s reply timeout; a "busy" reply or a timeout puts all of that node's summaries off for a
backoff of 5 s doubling to 300 s (a job that just ended still probes once per 5 s); each node connects
from its own loopback address and names itself inside its summary (its GPUs, hosts, env, affinity). The
senders are ``SENDERS`` threads (at most that many connections at once). ``--fail-s``: the database is
down that long from the start.

Prints: summaries/s taken in during the burst, "busy" replies, timeouts, refusals and summaries never
taken; job end -> first AdminComment p50/p99/max; jobs lost (no AdminComment), partial (first comment
lacks a node), written more than once and with different text; the big job's end -> AdminComment; the
service's CPU (% of one core) and peak RSS; store bytes per 100,000 jobs; the machine's load averages
(it is shared) and the commit the figures ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import heapq
import queue
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from gpuperf.model import series as series_mod  # noqa: E402
from gpuperf.diagnosis import jobsummary as summary, phases  # noqa: E402
from gpuperf.controller import transport  # noqa: E402
from gpuperf.report import fromrecording  # noqa: E402
from report_fixtures import aggregates, context  # noqa: E402
import figures as figures_out  # noqa: E402  benchmarks/figures.py, beside this script

SENDERS = 96
REPLY_TIMEOUT_S = 2.0


def template(points: int) -> dict:
    """An 8-GPU node summary from a real recording (with its fleet figures) and a full series (the largest a node sends)."""
    rec = sorted((ROOT / "tests" / "data" / "recordings").glob("*.jsonl*"))
    if rec:
        aggs, _ = fromrecording.replay_job(str(rec[0]), job_id=1, node="n1", gpus=8)
        s = summary.node_summary(aggs, context(job_id=1, node="n1"))
    else:
        s = summary.node_summary(aggregates(job_id=1, node="n1", ngpus=8), context(job_id=1, node="n1"))
    rng = random.Random(1)
    t = [1_700_000_000.0 + i * 7.2 for i in range(points)]
    top = {"power_w": 700.0, "nvlink_tx_bps": 5e10, "nvlink_rx_bps": 5e10}

    def walk(n: int = points) -> list[float]:
        # GPU metrics move in steps and plateaus, not white noise: stretches of 40-160 points at one level
        # (a step of the job, or idle) with 1 % noise
        v, out = rng.uniform(0.3, 0.9), []
        while len(out) < n:
            v = min(max(v + rng.gauss(0, 0.25), 0.0), 1.0) if rng.random() < 0.8 else 0.0
            out += [min(max(v + rng.gauss(0, 0.01), 0.0), 1.0) for _ in range(rng.randint(40, 160))]
        return out[:n]

    daemon = {str(g): {"t": t, **{f: [x * top.get(f, 100.0) for x in walk()] for f in series_mod.FIELDS}}
              for g in range(8)}
    s["series"] = series_mod.compact(daemon, points)
    # and the coarse series of its phases, as a node sends them since issue 35 (deliver.write: phase_series)
    tp = t[:: max(1, len(t) // phases.SERIES_POINTS)][: phases.SERIES_POINTS] or [1_700_000_000.0]
    top.update(sm_clock_mhz=1980.0, pcie_tx_bps=2e10, pcie_rx_bps=2e10)
    s[summary.PHASE_SERIES] = phases.compact({str(g): {"t": tp, **{f: [x * top.get(f, 100.0) for x in walk(len(tp))]
                                                                      for f in phases.SERIES_FIELDS}} for g in range(8)})
    return s


RETRY_FIRST_S, RETRY_MAX_S, PROBE_EVERY_S = 5.0, 300.0, 5.0   # as gpuperf.daemon.workers (the node's delivery)


def source_address(i: int) -> str:
    """Node ``i``'s own loopback address (the collector bounds connections per address, as per node)."""
    return f"127.{1 + i // 65536}.{i // 256 % 256}.{i % 256}"


def exchange(endpoint: str, source: str, frames: list[bytes], timeout_s: float) -> dict:
    """``transport.exchange`` from a node's own address: the reply, or TransportError."""
    from gpuperf.files import framing

    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection(transport.address(endpoint), timeout=timeout_s, source_address=(source, 0)) as c:
            c.settimeout(max(0.001, deadline - time.monotonic()))
            framing.send_parts(c, *frames)
            data = framing.recv_part(c, transport.REPLY_MAX, deadline)
    except (OSError, framing.FrameError, framing.Closed) as e:
        raise transport.TransportError(f"{endpoint}: {e}") from None
    return json.loads(data)


class Node:
    """One simulated node's delivery state, as ``workers.Deliveries`` keeps it: a failed or "busy" send puts
    every summary the node holds off for one backoff (5 s, doubling to 300 s); a job that just ended is still
    tried at once, at most once per 5 s; a success makes everything waiting due at once."""

    __slots__ = ("index", "fails", "down_until", "tried", "waiting")

    def __init__(self, index: int):
        self.index, self.fails, self.down_until, self.tried, self.waiting = index, 0, 0.0, -PROBE_EVERY_S, []


class Sim:
    """The load generator and what it measured."""

    def __init__(self, args, cfg_path: Path, spool: Path, tmpl: dict, run_dir: Path):
        self.args, self.spool, self.run_dir = args, spool, run_dir
        # the summary as JSON once; each node's copy names that node wherever the template says n1 (its GPUs,
        # hosts, env and affinity), as a real node's summary does
        self.tmpl_json = json.dumps({k: v for k, v in tmpl.items() if k not in ("series", "job_id", "nodes", "start", "end")},
                                    separators=(",", ":"))[:-1]
        # the series frame as a node packs it (transport.pack), opaque to the collector: one copy serves all
        self.series = series_mod.pack(tmpl["series"])
        self.delivered_at: dict[int, float] = {}
        self.endpoint = f"tcp://127.0.0.1:{args.port}"
        self.q: queue.Queue = queue.Queue()
        self.heap: list = []             # (when, seq, node index, job_id, end): sends waiting for a backoff
        self.seq = 0
        self.nodes = [Node(i) for i in range(args.nodes)]
        self.ended: dict[int, float] = {}
        self.timeouts = self.busy = self.refused = self.delivered = 0
        self.lock = threading.Lock()
        self.delivery_s: list[float] = []
        self.pending = 0                 # summaries not yet taken (queued, being sent or waiting a backoff)

    def notice(self, job_id: int, nodes: list[str]) -> None:
        t = self.spool / f".{job_id}.tmp"
        t.write_text(f"job_id={job_id}\nnodelist={','.join(nodes)}\nuser=u{job_id % 50}\nuid={1000 + job_id % 50}\n"
                     "exit_code=0\nend\n")
        os.rename(t, self.spool / f"{job_id}.ended")
        # and, as packaging/bin/gpuperf-epilog-slurmctld does in slurmctld's process, the job's directory
        # with its hook record (the service's merge record goes beside it)
        d = self.run_dir / "jobs" / str(job_id)
        d.mkdir(parents=True, exist_ok=True)
        (d / "epilog-slurmctld.json").write_text(json.dumps({"context": {"hook": "epilog-slurmctld", "job_id": job_id},
                                                             "steps": {"notify": {"ok": True}}}) + "\n")

    def body(self, job_id: int, node: str, end: float) -> bytes:
        text = (self.tmpl_json.replace('"n1"', f'"{node}"')
                + f',"job_id":{job_id},"nodes":["{node}"],"start":{end - 3600.0},"end":{end}}}')
        return zlib.compress(text.encode(), 6)

    def later(self, when: float, node: int, job_id: int, end: float) -> None:
        with self.lock:
            self.seq += 1
            heapq.heappush(self.heap, (when, self.seq, node, job_id, end))

    def due(self) -> None:
        """Moves the sends whose backoff is over to the senders (a thread)."""
        while True:
            now = time.monotonic()
            with self.lock:
                while self.heap and self.heap[0][0] <= now:
                    _, _, node, job_id, end = heapq.heappop(self.heap)
                    self.q.put((node, job_id, end, False))
            time.sleep(0.05)

    def sender(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            i, job_id, end, fresh = item
            n = self.nodes[i]
            now = time.monotonic()
            with self.lock:
                backoff = now < n.down_until
                if backoff and (not fresh or now - n.tried < PROBE_EVERY_S):
                    self.seq += 1
                    heapq.heappush(self.heap, (n.down_until, self.seq, i, job_id, end))
                    continue
                n.tried = now
            node = f"n{i:05d}"
            body = self.body(job_id, node, end)
            t0 = time.monotonic()
            # as transport.send_node_summary with attempts=1 (the daemon's): a fresh credential per attempt
            cred = transport.credential(transport._digest(body, self.series))
            try:
                reply = exchange(self.endpoint, source_address(i), [transport.KIND, cred, body, self.series],
                                 REPLY_TIMEOUT_S)
            except transport.TransportError:
                reply = None
            with self.lock:
                if reply is not None and reply.get("ok"):
                    self.delivered += 1
                    self.pending -= 1
                    self.delivery_s.append(time.monotonic() - t0)
                    self.delivered_at[job_id] = max(self.delivered_at.get(job_id, 0.0), time.time())
                    if n.fails:
                        # what waited for this node is due at once
                        self.heap = [(0.0, s, j, jj, e) if j == i else (w, s, j, jj, e) for w, s, j, jj, e in self.heap]
                        heapq.heapify(self.heap)
                    n.fails, n.down_until = 0, 0.0
                    continue
                if reply is not None and not reply.get("retry"):
                    self.refused += 1       # refused for good: the node gives it up
                    self.pending -= 1
                    continue
                if reply is None:
                    self.timeouts += 1
                else:
                    self.busy += 1
                if not backoff:
                    n.fails += 1
                    n.down_until = now + min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (n.fails - 1))
                self.seq += 1
                heapq.heappush(self.heap, (n.down_until, self.seq, i, job_id, end))

    def job_end(self, job_id: int, nodes: int = 0) -> None:
        n = min(self.args.nodes, nodes or random.choice([1] * 7 + [2, 4, 8]))
        first = random.randrange(self.args.nodes)
        idx = [(first + i) % self.args.nodes for i in range(n)]
        end = time.time()
        self.ended[job_id] = end
        self.notice(job_id, [f"n{i:05d}" for i in idx])
        with self.lock:
            self.pending += n
        for i in idx:
            self.q.put((i, job_id, end, True))


def profile_top(folded: Path, n: int = 30) -> dict[str, float]:
    """gpuperf's functions by share of the samples whose stack holds them (py-spy's folded stacks)."""
    incl: dict[str, int] = {}
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for fn in {f.split(" (")[0] + " (" + f.split("(")[-1].split(":")[0].split("gpuperf/")[-1] + ")"
                   for f in stack.split(";") if "gpuperf/" in f}:
            incl[fn] = incl.get(fn, 0) + int(count)
    top = sorted(incl.items(), key=lambda kv: -kv[1])[:n]
    return {k: round(100.0 * v / max(total, 1), 1) for k, v in top}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--latency", type=float, default=0.05, help="stubbed write: seconds per job line")
    ap.add_argument("--call-latency", type=float, default=0.04,
                    help="stubbed write: seconds per sacctmgr call (process start + connect; measured 40 ms by "
                         "benchmarks/sacctmgr_batch_cost.py)")
    ap.add_argument("--fail-s", type=float, default=0.0)
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--big", type=int, default=0, help="one job of this many nodes ends half way through")
    ap.add_argument("--writers", type=int, default=16)
    ap.add_argument("--no-fleet", action="store_true", help="summaries without fleet figures (the fleet fold's cost apart)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--py-spy", help="path of a py-spy binary: sample the service while it runs (folded stacks "
                                     "beside --json, the top functions in the figures)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    random.seed(14)
    tmp = Path(tempfile.mkdtemp(prefix="gp-ctrl-load-"))
    # run_dir on tmpfs, as /run/gpuperf is on every systemd host (the store stays on disk, as /var/lib)
    run_dir = Path(tempfile.mkdtemp(prefix="gp-ctrl-load-run-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    if not args.port:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = s.getsockname()[1]
    spool = tmp / "state" / "ended"
    spool.mkdir(parents=True)
    cfg_path = tmp / "gpuperf.toml"
    cfg_path.write_text(f'[general]\nstate_dir = "{tmp}/state"\nrun_dir = "{run_dir}"\nlog_file = "{tmp}/gpuperf.log"\n'
                        f'[controller]\nport = {args.port}\nbind = "127.0.0.1"\naddress = "127.0.0.1:{args.port}"\n'
                        f'writers = {args.writers}\nmerge_wait_s = 30.0\nadmin_comment_wait_s = 21600.0\nretry_max_s = 10.0\n')
    flag = tmp / "db-down"
    if args.fail_s > 0:
        flag.touch()
    log = tmp / "writes.log"
    proc = subprocess.Popen([sys.executable, os.environ.get("CTRL_STUB", str(ROOT / "tests" / "unit" / "controller_stub.py")), str(cfg_path),
                             str(args.latency), str(log), str(flag), str(args.call_latency)],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    time.sleep(2.0)
    ps = psutil.Process(proc.pid)
    folded = Path(args.json or str(tmp / "load.json")).with_suffix(".folded")
    spy = subprocess.Popen([args.py_spy, "record", "--pid", str(proc.pid), "-r", "100", "--format", "raw",
                            "--nonblocking", "-o", str(folded)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) if args.py_spy else None
    tmpl = template(args.points)
    if args.no_fleet:
        tmpl.pop("fleet", None)
    sim = Sim(args, cfg_path, spool, tmpl, run_dir)
    threads = [threading.Thread(target=sim.sender, daemon=True) for _ in range(SENDERS)]
    for t in threads + [threading.Thread(target=sim.due, daemon=True)]:
        t.start()
    rss_peak, cpu0, wall0 = 0, ps.cpu_times(), time.monotonic()
    load0 = os.getloadavg()
    burst_at, big_at = args.jobs // 3, args.jobs // 2
    burst_rate = None
    big_job = None
    start = time.monotonic()
    job = 1
    steady = args.jobs - args.burst - (1 if args.big else 0)
    i = 0
    while i < steady:
        target = start + i / args.rate
        now = time.monotonic()
        if now < target:
            time.sleep(target - now)
        if args.fail_s and flag.exists() and now - start >= args.fail_s:
            flag.unlink()
        sim.job_end(job)
        job += 1
        i += 1
        if i == burst_at and args.burst:
            b0, taken0 = time.monotonic(), sim.delivered
            queued0 = sim.pending
            for _ in range(args.burst):
                sim.job_end(job)
                job += 1
            burst_n = sim.pending - queued0
            while sim.delivered - taken0 < burst_n and time.monotonic() - b0 < 120:
                time.sleep(0.01)
            burst_rate = (sim.delivered - taken0) / (time.monotonic() - b0)
            start += time.monotonic() - b0  # the steady rate resumes after the burst
        if i == big_at and args.big:
            big_job = job
            sim.job_end(job, nodes=args.big)
            job += 1
        if i % 50 == 0:
            rss_peak = max(rss_peak, ps.memory_info().rss)
    # every summary taken (nodes retry as long as it takes), then every AdminComment (10 minutes at most)
    deadline = time.monotonic() + 600
    while sim.pending > 0 and time.monotonic() < deadline:
        rss_peak = max(rss_peak, ps.memory_info().rss)
        time.sleep(0.5)
    untaken = sim.pending
    for _ in threads:
        sim.q.put(None)
    for t in threads:
        t.join(60)
    if flag.exists():
        flag.unlink()
    written: dict[int, list[tuple[float, int, int]]] = {}
    deadline = max(deadline, time.monotonic() + 60)   # the comments of what was taken: a minute more at least
    while True:
        written = {}
        for line in log.read_text().splitlines() if log.exists() else []:
            t, j, crc, *partial = line.split()
            written.setdefault(int(j), []).append((float(t), int(crc), int(partial[0]) if partial else 0))
        rss_peak = max(rss_peak, ps.memory_info().rss)
        if len(written) >= len(sim.ended) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    cpu1, wall1 = ps.cpu_times(), time.monotonic()
    cpu_pct = 100.0 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / (wall1 - wall0)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled on SIGINT
        spy.wait(60)
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    cpu_json = Path(str(log) + ".cpu.json")
    parts = json.loads(cpu_json.read_text()) if cpu_json.exists() else {}
    busy = wall1 - wall0
    first = {j: min(w) for j, w in written.items() if j in sim.ended}   # (time, crc, partial) of the first write
    lat = sorted(first[j][0] - sim.ended[j] for j in first if j != big_job)
    store = sum(p.stat().st_size for p in (tmp / "state").glob("cluster.sqlite*"))
    figures = {
        "provenance": figures_out.provenance(ROOT),
        "nodes": args.nodes, "jobs": len(sim.ended), "rate_per_s": args.rate, "burst": args.burst, "big_job_nodes": args.big,
        "write_latency_s": args.latency, "write_call_latency_s": args.call_latency, "db_down_s": args.fail_s, "series_points": args.points,
        "fleet_fold": not args.no_fleet, "writers": args.writers, "senders": SENDERS,
        "summaries": sim.delivered, "burst_ingest_per_s": round(burst_rate or 0, 1),
        "busy_replies": sim.busy, "delivery_timeouts": sim.timeouts, "refused": sim.refused, "untaken": untaken,
        "delivery_p99_s": round(statistics.quantiles(sim.delivery_s, n=100)[98], 3) if len(sim.delivery_s) > 100 else None,
        "lost": len(set(sim.ended) - set(written)),
        "partial": sum(1 for j in first if first[j][2]),
        "written_twice": sum(1 for v in written.values() if len(v) > 1),
        "duplicated_different_text": sum(1 for v in written.values() if len({c for _, c, _ in v}) > 1),
        "end_to_delivered_p50_s": round(statistics.median(sim.delivered_at[j] - sim.ended[j] for j in sim.delivered_at), 2),
        "end_to_comment_p50_s": round(lat[len(lat) // 2], 2) if lat else None,
        "end_to_comment_p99_s": round(lat[int(len(lat) * 0.99) - 1], 2) if lat else None,
        "end_to_comment_max_s": round(lat[-1], 2) if lat else None,
        "big_job_end_to_comment_s": round(first[big_job][0] - sim.ended[big_job], 2) if big_job in first else None,
        "service_cpu_pct_of_core": round(cpu_pct, 1), "service_rss_peak_mib": round(rss_peak / 2**20, 1),
        # the same CPU by part: collector = taking summaries in; merge = summary.merge + diagnosis; fleet = fold
        "cpu_pct_of_core_by_part": {k: round(100.0 * v / busy, 1) for k, v in sorted(parts.items())},
        "store_mib_per_100k_jobs": round(store / max(len(sim.ended), 1) * 1e5 / 2**20, 1),
        "load_avg_1_5_15_start": [round(x, 2) for x in load0], "load_avg_1_5_15_end": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    if spy is not None and folded.exists():
        figures["profile_inclusive_pct_of_samples"] = profile_top(folded)
    figures_out.emit(figures, args.json)
    subprocess.run(["rm", "-rf", str(tmp), str(run_dir)])
    return 0 if figures["lost"] == 0 and figures["duplicated_different_text"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
