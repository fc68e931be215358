"""Per-GPU performance fingerprints on the controller (SQLite), updated in O(1) per job.

A GPU is keyed by node, index and board UUID, so a swapped board starts fresh. Each row holds
exponentially decayed sums (``DECAY`` per job: the fingerprint follows the last few dozen jobs, so
evidence clears once a GPU is fixed) from which its figures are derived (``derive``). Each model keeps a
log-bucket sketch of its GPUs' current figures per metric: a job moves each of its GPUs' values from
one bucket to another, so the model's median and spread (``model_stats``) never need a fleet scan.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from gpuperf.files import statefiles
from gpuperf.model.gpuerrors import COUNTERS as ERROR_COUNTERS

DECAY = 0.97                 # weight of the history at each new job (half-life ~23 jobs)
SKETCH_GAMMA = 1.005         # relative bucket width: medians within 0.25%
_ZERO = -(10**6)             # bucket of values <= 0 (no throttle at all is the common case)
MIN_BUSY_S = 120.0           # decayed seconds under load before load figures count
MIN_COMM_S = 30.0            # decayed seconds in communication phases before a link rate counts
MIN_JOBS = 3                 # jobs before the load figures of a GPU count
MIN_FREE_S = 30.0            # decayed seconds under load below the power cap before the clock counts
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
THROTTLE_REASONS = SLOWDOWN_REASONS + ("sw_power_cap",)
PROBE_FIELDS = ("probe_tflops", "probe_membw_gbs", "probe_p2p_gbs")
# the sums a row keeps (all decayed alike)
SUMS = (("jobs", "busy_s", "clock_ws", "clock_w", "free_ws", "free_w", "power_ws", "power_w", "temp_ws", "temp_w")
        + tuple(f"thr_{r}" for r in THROTTLE_REASONS)
        + ("nvlink_bytes", "nvlink_s", "pcie_bytes", "pcie_s")
        + tuple(f"err_{c}" for c in ERROR_COUNTERS))
METRICS = ("clock_mhz", "clock_all_mhz", "power_w", "temp_c", "slowdown_pct", "nvlink_gbs", "pcie_gbs",
           "nvlink_errors", "ecc_corrected") + PROBE_FIELDS

_NO_FIGURES: dict[str, float | None] = dict.fromkeys(METRICS)   # a GPU's figures before its first job (read only)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS gpus (
  node TEXT NOT NULL, idx INTEGER NOT NULL, uuid TEXT NOT NULL, model TEXT NOT NULL,
  first_t REAL, last_t REAL, jobs_total INTEGER NOT NULL DEFAULT 0,
  {", ".join(f"{c} REAL NOT NULL DEFAULT 0" for c in SUMS)},
  {", ".join(f"{c} REAL" for c in PROBE_FIELDS)}, probe_t REAL,
  xids INTEGER NOT NULL DEFAULT 0, xid_last TEXT,
  PRIMARY KEY (node, idx, uuid));
CREATE INDEX IF NOT EXISTS gpus_node ON gpus (node);
CREATE TABLE IF NOT EXISTS sketch (
  model TEXT NOT NULL, metric TEXT NOT NULL, bucket INTEGER NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY (model, metric, bucket));
"""


@functools.lru_cache(maxsize=64)
def _update_sql(cols: tuple[str, ...]) -> str:
    """The UPDATE of one GPU's row for these columns (the same few sets of columns recur every job)."""
    return f"UPDATE gpus SET {', '.join(f'{k}=?' for k in cols)} WHERE node=? AND idx=? AND uuid=?"


def default_path(cfg: Any) -> str:
    """``fleet.store``, or ``<state_dir>/fleet.sqlite`` (beside the cluster store)."""
    return cfg.fleet.store or os.path.join(cfg.general.state_dir, "fleet.sqlite")


def bucket(v: float) -> int:
    """The sketch bucket of a value (values <= 0 share one)."""
    return _ZERO if v <= 0 else math.ceil(math.log(v) / math.log(SKETCH_GAMMA))


def bucket_value(k: int) -> float:
    """A bucket's representative value (its geometric middle)."""
    return 0.0 if k == _ZERO else SKETCH_GAMMA ** (k - 0.5)


def derive(row: dict[str, Any]) -> dict[str, float | None]:
    """A GPU's figures from its sums; None where there is not enough evidence yet."""
    out: dict[str, float | None] = {m: None for m in METRICS}
    busy = row.get("busy_s") or 0.0
    if busy >= MIN_BUSY_S and (row.get("jobs_total") or 0) >= MIN_JOBS:
        for m, (s, w) in {"clock_all_mhz": ("clock_ws", "clock_w"), "power_w": ("power_ws", "power_w"),
                          "temp_c": ("temp_ws", "temp_w")}.items():
            if (row.get(w) or 0.0) > 0:
                out[m] = row[s] / row[w]
        if (row.get("free_w") or 0.0) >= MIN_FREE_S:
            out["clock_mhz"] = row["free_ws"] / row["free_w"]
        out["slowdown_pct"] = 100.0 * sum(row.get(f"thr_{r}") or 0.0 for r in SLOWDOWN_REASONS) / busy
    for link in ("nvlink", "pcie"):
        sec = row.get(f"{link}_s") or 0.0
        if sec >= MIN_COMM_S:
            out[f"{link}_gbs"] = row[f"{link}_bytes"] / sec / 1e9
    if (row.get("jobs_total") or 0) >= MIN_JOBS:
        # decayed error growth over the recent jobs (a counter NVML never gave stays 0: no evidence either way)
        out["nvlink_errors"] = row.get("err_nvlink_errors") or 0.0
        out["ecc_corrected"] = row.get("err_ecc_corrected") or 0.0
    for f in PROBE_FIELDS:
        out[f] = row.get(f)
    return out


def job_sums(g: dict[str, Any]) -> dict[str, float]:
    """One GPU's contribution from a node summary's ``fleet`` entry (``gpuperf/model/load.py``)."""
    ld = g.get("load") or {}
    busy = float(ld.get("busy_s") or 0.0)
    add = {c: 0.0 for c in SUMS}
    add["jobs"] = 1.0
    add["busy_s"] = busy
    for m, (s, w) in {"sm_clock_mhz": ("clock_ws", "clock_w"), "power_w": ("power_ws", "power_w"),
                      "temp_c": ("temp_ws", "temp_w")}.items():
        v = ld.get(m)
        if isinstance(v, (int, float)) and busy > 0:
            add[s], add[w] = float(v) * busy, busy
    free_s, free = float(ld.get("free_clock_s") or 0.0), ld.get("sm_clock_free_mhz")
    if isinstance(free, (int, float)) and free_s > 0:
        add["free_ws"], add["free_w"] = float(free) * free_s, free_s
    for r in THROTTLE_REASONS:
        add[f"thr_{r}"] = float((ld.get("throttle_s") or {}).get(r) or 0.0)
    for link in ("nvlink", "pcie"):
        sec, bps = ld.get(f"{link}_comm_s") or 0.0, ld.get(f"{link}_comm_bps")
        if sec and bps:
            add[f"{link}_s"], add[f"{link}_bytes"] = float(sec), float(bps) * float(sec)
    for c, v in (g.get("errors") or {}).items():
        if c in ERROR_COUNTERS and isinstance(v, (int, float)) and v > 0:
            add[f"err_{c}"] = float(v)
    return add


class FleetStore:
    """The fingerprints and the per-model sketches."""

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = str(path)
        if readonly:
            self.db = statefiles.connect_readonly(self.path)
        else:
            # which boards ran which jobs: admins only (0600 before SQLite writes; directory 0700)
            statefiles.private_db(self.path)
            # transactions are explicit (BEGIN IMMEDIATE), so autocommit mode
            self.db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            # 16 MiB of page cache: a 2,000-node fleet's rows stay in memory (SQLite's default holds 2 MiB)
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "cache_size=-16384"):
                self.db.execute(f"PRAGMA {pragma}")
            self.db.executescript(_SCHEMA)
            have = {r[1] for r in self.db.execute("PRAGMA table_info(gpus)")}
            for c in SUMS:   # a store from before a sum was kept: the column starts at 0
                if c not in have:
                    self.db.execute(f"ALTER TABLE gpus ADD COLUMN {c} REAL NOT NULL DEFAULT 0")
        self.db.row_factory = sqlite3.Row
        self._moves: Counter[tuple[str, str, int]] = Counter()

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    # updates ---------------------------------------------------------------------------
    def ingest(self, summary: dict[str, Any], now: float | None = None) -> int:
        """Fold one node summary's ``fleet`` figures into its GPUs' fingerprints; GPUs updated."""
        return self.ingest_many([summary], now)

    def ingest_many(self, summaries: list[dict[str, Any]], now: float | None = None,
                    updated: dict[str, list[dict[str, Any]]] | None = None) -> int:
        """Fold node summaries in order, in one transaction (the controller's batch of a tick); GPUs updated.

        ``updated``: filled with node -> the rows (as ``gpus`` gives them) of the GPUs folded, latest last."""
        todo = []
        for summary in summaries:
            node = str((summary.get("nodes") or [""])[0])
            entries = [g for g in summary.get("fleet") or [] if isinstance(g, dict) and "gpu" in g]
            if node and entries:
                todo.append((node, entries, float(now if now is not None else (summary.get("end") or time.time()))))
        if not todo:
            return 0
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for node, entries, t in todo:
                # the node's rows in one query, not one per GPU
                cur = self.db.cursor()
                cur.row_factory = None  # plain tuples: sqlite3.Row -> dict costs more than the query
                cur.execute("SELECT * FROM gpus WHERE node=?", (node,))
                cols = [d[0] for d in cur.description]
                have = {(r["idx"], r["uuid"]): r for r in (dict(zip(cols, t)) for t in cur)}
                for g in entries:
                    pr = g.get("probe") if isinstance(g.get("probe"), dict) else None
                    codes = [int(x) for x in g.get("xids") or [] if isinstance(x, (int, float))]
                    idx, uuid = int(g["gpu"]), g.get("uuid") or ""
                    row = self._update(node, idx, uuid, g.get("name") or "unknown", t,
                                       job_sums(g), codes, probe=pr,
                                       xid_count=max(int(g.get("xid_count") or 0), len(codes)),
                                       old=have.get((idx, uuid), False))
                    if updated is not None:
                        updated.setdefault(node, []).append(row)
            self._flush_moves()
            self.db.execute("COMMIT")
        except BaseException:
            self._moves.clear()
            self.db.execute("ROLLBACK")
            raise
        return sum(len(e) for _, e, _ in todo)

    def put_probe(self, node: str, idx: int, uuid: str | None, model: str | None, figures: dict[str, Any],
                  t: float | None = None) -> None:
        """Record one GPU's latest active-probe figures (``probe_*``)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self._update(node, idx, uuid or "", model or "unknown", t or time.time(), None, [],
                         probe={**figures, "t": t or time.time()})
            self._flush_moves()
            self.db.execute("COMMIT")
        except BaseException:
            self._moves.clear()
            self.db.execute("ROLLBACK")
            raise

    def _update(self, node: str, idx: int, uuid: str, model: str, t: float, add: dict[str, float] | None,
                xids: list[int], probe: dict[str, Any] | None = None, xid_count: int = 0,
                old: dict[str, Any] | None | bool = None) -> dict[str, Any]:
        """Fold one GPU's contribution; its row as it is now, with its figures under ``fig``.

        ``old``: the row as the caller read it, ``False`` when it read none (None: read it here)."""
        if old is None:
            cur = self.db.execute("SELECT * FROM gpus WHERE node=? AND idx=? AND uuid=?", (node, idx, uuid)).fetchone()
            old = dict(cur) if cur is not None else None
        elif old is False:
            old = None
        if old is None:
            self._retire(node, idx, uuid)
            self.db.execute("INSERT INTO gpus (node, idx, uuid, model, first_t, last_t) VALUES (?,?,?,?,?,?)",
                            (node, idx, uuid, model, t, t))
            row: dict[str, Any] = ({c: 0.0 for c in SUMS} | {f: None for f in PROBE_FIELDS}
                                   | {"node": node, "idx": idx, "uuid": uuid, "model": model, "first_t": t,
                                      "jobs_total": 0, "probe_t": None, "xids": 0, "xid_last": None})
        else:
            row = old   # the caller's own copy of the row, read for this fold: updated in place
        before = derive(row) if old is not None else _NO_FIGURES
        sets: dict[str, Any] = {"last_t": t}
        if add is not None:
            for c in SUMS:
                row[c] = row[c] * DECAY + add[c]
                sets[c] = row[c]
            row["jobs_total"] = sets["jobs_total"] = int(row["jobs_total"]) + 1
        pt = float(probe.get("t") or t) if probe is not None else None
        if probe is not None and (row.get("probe_t") is None or pt > row["probe_t"]):  # each probe run counts once
            vals = {f: (float(probe[f]) if isinstance(probe.get(f), (int, float)) else None) for f in PROBE_FIELDS}
            row.update(vals)
            sets.update(vals)
            sets["probe_t"] = row["probe_t"] = pt
        if xids or xid_count:
            sets["xids"] = int(row.get("xids") or 0) + max(xid_count, len(xids))
            last = json.loads(row.get("xid_last") or "[]") + xids   # the last few codes, for the evidence
            sets["xid_last"] = json.dumps(last[-5:])
        self.db.execute(_update_sql(tuple(sets)), (*sets.values(), node, idx, uuid))
        after = derive(row)
        for m in METRICS:
            b, a = before[m], after[m]
            if b != a:   # most figures of a GPU stay put (probe, links, errors): no bucket to look up
                self._move(model, m, b, a)
        row.update(sets)
        row["fig"] = after
        return row

    def _retire(self, node: str, idx: int, uuid: str) -> None:
        """A new board in this slot: the old board's fingerprint leaves the fleet (and its model's sketch)."""
        for r in self.db.execute("SELECT * FROM gpus WHERE node=? AND idx=? AND uuid<>?", (node, idx, uuid)).fetchall():
            d = dict(r)
            for m, v in derive(d).items():
                self._move(d["model"], m, v, None)
            self.db.execute("DELETE FROM gpus WHERE node=? AND idx=? AND uuid=?", (node, idx, d["uuid"]))

    def _move(self, model: str, metric: str, old: float | None, new: float | None) -> None:
        """Count a value's move between sketch buckets (written by ``_flush_moves``, once per transaction)."""
        ob = bucket(old) if old is not None else None
        nb = bucket(new) if new is not None else None
        if ob == nb:
            return
        if ob is not None:
            self._moves[(model, metric, ob)] -= 1
        if nb is not None:
            self._moves[(model, metric, nb)] += 1

    def _flush_moves(self) -> None:
        """The transaction's net bucket moves, one statement per bucket that changed."""
        down = [(-n, m, k, b) for (m, k, b), n in self._moves.items() if n < 0]
        up = [(m, k, b, n) for (m, k, b), n in self._moves.items() if n > 0]
        self._moves.clear()
        self.db.executemany("UPDATE sketch SET n=n-? WHERE model=? AND metric=? AND bucket=?", down)
        self.db.executemany("INSERT INTO sketch VALUES (?,?,?,?) ON CONFLICT (model, metric, bucket) "
                            "DO UPDATE SET n=n+excluded.n", up)

    # reads -----------------------------------------------------------------------------
    def gpus(self, node: str | None = None) -> list[dict[str, Any]]:
        """Every fingerprint (of one node), with its derived figures under ``fig``."""
        q, args = ("SELECT * FROM gpus WHERE node=?", (node,)) if node else ("SELECT * FROM gpus", ())
        out = []
        for r in self.db.execute(q, args):
            d = dict(r)
            d["fig"] = derive(d)
            out.append(d)
        return out

    def model_stats(self, models: Iterable[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
        """model -> metric -> {n, median, p25, p75} from the sketches (no scan of the GPUs)."""
        q = "SELECT model, metric, bucket, n FROM sketch WHERE n > 0 ORDER BY model, metric, bucket"
        hist: dict[tuple[str, str], list[tuple[int, int]]] = {}
        want = set(models) if models is not None else None
        for model, metric, b, n in self.db.execute(q):
            if want is None or model in want:
                hist.setdefault((model, metric), []).append((b, n))
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (model, metric), h in hist.items():
            total = sum(n for _, n in h)
            out.setdefault(model, {})[metric] = {"n": total, "median": _quantile(h, total, 0.5),
                                                 "p25": _quantile(h, total, 0.25), "p75": _quantile(h, total, 0.75)}
        return out


def _quantile(h: list[tuple[int, int]], total: int, q: float) -> float:
    target = q * total
    acc = 0
    for b, n in h:
        acc += n
        if acc >= target:
            return bucket_value(b)
    return bucket_value(h[-1][0])
