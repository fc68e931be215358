"""Every guard on a user's files, parsed text and sockets, removed one at a time: the named test must fail.

``M`` lists the mutations: (name, file, the guard's text, what replaces it, the test that must then fail).
``tests/unit/test_mutate_guards.py`` runs them all in the suite; by hand, from the repository root with
the test venv's python: ``python tests/mutate_guards.py [name...]``. Either way the checkout is never
edited: each mutation is applied to a copy of the package in a directory of its own, and the named test
runs from the checkout with that copy first on the path (``python -m pytest`` from the copy, the copy on
``PYTHONPATH``); a small plugin there records which ``gpuperf`` the test imported and how the test ended.
docs/SECURITY.md ("Each guard, and the test that fails without it", and the socket tables) lists the same
guard -> test pairs.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
TIMEOUT_S = 120        # a mutation that makes its test hang fails it too (far above any test's honest time)
U = "tests/unit/"
S, H, G = U + "test_security_files.py::", U + "test_hardening.py::", U + "test_safeio_guards.py::"
US, CB = U + "test_user_socket_bounds.py::", U + "test_collector_bounds.py::"
MB, HB = U + "test_metrics_bounds.py::", U + "test_hook_socket_bounds.py::"
M = [
 ("safeio: O_NOFOLLOW on the file's open", "gpuperf/files/safeio.py", "os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY", "os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY", G + "test_a_link_swapped_in_after_the_lstat_is_not_followed"),
 ("safeio: O_NONBLOCK on the file's open", "gpuperf/files/safeio.py", "os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY", "os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY", G + "test_a_fifo_swapped_in_after_the_lstat_does_not_block_the_open"),
 ("safeio: regular files only (lstat and fstat)", "gpuperf/files/safeio.py", "    if not stat.S_ISREG(st.st_mode):\n", "    if False:\n", H + "test_planted_entries_are_refused_with_their_reason"),
 ("safeio: per-file owner", "gpuperf/files/safeio.py", "    if uid is not None and st.st_uid != uid:\n        return f\"owned", "    if False:\n        return f\"owned", G + "test_a_file_of_another_owner_in_a_directory_that_passes_is_refused"),
 ("safeio: one link only", "gpuperf/files/safeio.py", "    if st.st_nlink != 1:", "    if False:", H + "test_planted_entries_are_refused_with_their_reason"),
 ("safeio: size before reading", "gpuperf/files/safeio.py", "    if st.st_size > max_bytes:", "    if False:", H + "test_a_sparse_1gb_file_is_refused_before_reading"),
 ("safeio: same inode as looked at", "gpuperf/files/safeio.py", "else \"replaced while opened\")", "else None)", G + "test_another_regular_file_swapped_in_after_the_lstat_is_refused"),
 ("safeio: bytes counted while reading", "gpuperf/files/safeio.py", "            if total > limit:", "            if False:", G + "test_a_file_that_grows_after_its_fstat_is_cut_off"),
 ("safeio: O_NOFOLLOW on the directory", "gpuperf/files/safeio.py", "os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)\n    st = os.fstat(fd)", "os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)\n    st = os.fstat(fd)", H + "test_a_link_in_place_of_the_directory_is_not_followed"),
 ("safeio: directory owner", "gpuperf/files/safeio.py", "    if uid is not None and st.st_uid != uid:\n        os.close(fd)", "    if False:\n        os.close(fd)", G + "test_a_directory_of_another_owner_is_refused"),
 ("safeio: max_entries", "gpuperf/files/safeio.py", "                if seen > max_entries:", "                if False:", H + "test_100000_entries_cost_no_more_than_max_entries"),
 ("safeio: directory byte budget", "gpuperf/files/safeio.py", "            room = (max_total - total, f\"{max_total}-byte budget of {label}/\") if max_total - total < ignored.left \\\n                else (ignored.left, \"job's budget\")", "            room = (ignored.left, \"job's budget\")", S + "test_a_flood_of_step_records_costs_the_env_report_its_budget_not_their_size"),
 ("safeio: job byte budget", "gpuperf/files/safeio.py", "            ignored.left -= len(data)\n            out.append", "            out.append", S + "test_the_jobs_budget_spans_every_read_of_its_files"),
 ("safeio: JSON nesting", "gpuperf/files/safeio.py", "        return printable_json(jsonlite.loads(data))\n    except RecursionError:", "        return printable_json(jsonlite.loads(data))\n    except ZeroDivisionError:", H + "test_bad_utf8_and_deep_json_do_not_raise"),
 ("safeio: control bytes escaped", "gpuperf/files/safeio.py", "    return text.translate(_CONTROLS)", "    return text", H + "test_terminal_escapes_in_a_users_records_reach_no_report_raw"),
 ("xid: match at the message start", "gpuperf/checks/xid.py", "m = _XID.match(text)", "m = _XID.search(text)", S + "test_a_segfaulting_program_named_like_an_xid_is_not_an_xid"),
 ("xid: kernel facility only", "gpuperf/checks/xid.py", "    if prio >> 3 != 0 or prio < 0:", "    if False:", S + "test_a_segfaulting_program_named_like_an_xid_is_not_an_xid"),
 ("xid: corroborated by NVML's events in the daemon", "gpuperf/checks/xid.py", "        if could_not_see or any(", "        if True or any(", S + "test_in_the_daemon_a_kernel_xid_nvml_never_saw_drains_nothing"),
 ("cpu list: highest CPU id", "gpuperf/affinity/plan.py", "        if b > max_cpu:", "        if False:", S + "test_cpu_lists_are_bounded"),
 ("cpu list: text length", "gpuperf/affinity/plan.py", "    if len(text) > MAX_CPU_LIST_CHARS:", "    if False:", S + "test_cpu_lists_are_bounded"),
 ("cpu list: ASCII digits only", "gpuperf/affinity/plan.py", "    return s.isascii() and s.isdigit() and len(s) <= 9", "    return s.isdigit() and len(s) <= 9", S + "test_cpu_lists_are_bounded"),
 ("scontrol -d: one run of detail lines", "gpuperf/access/slurm.py", "    if len(runs) > 1:", "    if False:", S + "test_a_job_name_holding_scontrol_fields_sets_no_cpu_ids"),
 ("scontrol -d: detail lines start with blanks", "gpuperf/access/slurm.py", "_DETAIL = re.compile(r\"\\s+Nodes=", "_DETAIL = re.compile(r\".*?\\s*Nodes=", S + "test_a_job_name_holding_scontrol_fields_sets_no_cpu_ids"),
 ("affinity: CPUs within the node's", "gpuperf/prolog/affinityplan.py", "            return _on_node(affinity.parse_cpu_list(text), online), \"cgroup\"", "            return affinity.parse_cpu_list(text), \"cgroup\"", S + "test_the_jobs_cpuset_is_bounded_by_the_nodes_cpus"),
 ("affinity report: a bad cpus= refused and said", "gpuperf/affinity/report.py", "            ignored.add(name, f\"cpus: {str(e)[:80]}\")", "            pass", S + "test_a_hostile_cpus_record_marks_its_jobs_summary_partial_and_every_job_is_delivered"),
 ("affinity report: a task's cpus cut to the job's allocation", "gpuperf/affinity/report.py", "    kept = [c for c in cpus if c in allowed]", "    kept = cpus", S + "test_a_record_claiming_every_cpu_reports_only_the_jobs_allocation_and_says_so"),
 ("affinity report: CPUs outside the allocation said", "gpuperf/affinity/report.py", "    if len(kept) < len(cpus) and ignored is not None:", "    if False:", S + "test_a_record_claiming_every_cpu_reports_only_the_jobs_allocation_and_says_so"),
 ("affinity report: the plan's job CPUs read back", "gpuperf/affinity/plan.py", "                cpus = _ints(kv.get(\"cpus\", \"none\"))", "                cpus = ()", S + "test_a_record_claiming_every_cpu_reports_only_the_jobs_allocation_and_says_so"),
 ("affinity report: the job's CPUs within the node's", "gpuperf/affinity/report.py", "        return job_set & node_set", "        return job_set", S + "test_a_tasks_cpus_are_cut_to_the_nodes_where_the_plan_names_none"),
 ("affinity report: the node's CPUs where the plan names none", "gpuperf/affinity/report.py", "    return job_set or node_set or None", "    return job_set or None", S + "test_a_tasks_cpus_are_cut_to_the_nodes_where_the_plan_names_none"),
 ("summary: the node's CPUs handed to the affinity report", "gpuperf/model/summary.py", "affinity = affinity_report(d, ignored, node_cpus)", "affinity = affinity_report(d, ignored)", S + "test_a_record_claiming_every_cpu_reports_only_the_jobs_allocation_and_says_so"),
 ("delivery: the node's online CPUs from its topology", "gpuperf/daemon/deliver.py", "\"cpus_online\": list((topo.get(\"cpus\") or {}).get(\"online\") or [])", "\"cpus_online\": []", U + "test_diagnosis_patterns.py::test_the_daemon_hands_the_summary_each_gpus_link_and_gpudirect_from_the_node_topology"),
 ("summary: refused records mark it partial", "gpuperf/model/summary.py", "        s[\"quality\"][\"partial\"] = True\n", "", S + "test_a_hostile_cpus_record_marks_its_jobs_summary_partial_and_every_job_is_delivered"),
 ("delivery: one job's exception stays its own", "gpuperf/daemon/workers.py", "            except Exception as e:  # noqa: BLE001 - one job's delivery failing", "            except ZeroDivisionError as e:  # noqa: BLE001 - one job's delivery failing", S + "test_a_delivery_that_raises_is_set_aside_and_the_next_job_is_delivered"),
 ("terminal: strings printable", "gpuperf/report/terminal.py", "    s = printable_json(s)   #", "    s = s   #", S + "test_markup_and_terminal_escapes_in_a_users_strings_print_as_text"),
 ("terminal: cells as Text", "gpuperf/report/terminal.py", "    t.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))", "    t.add_row(*cells)", S + "test_markup_and_terminal_escapes_in_a_users_strings_print_as_text"),
 ("files: write_json 0600", "gpuperf/files/jobstate.py", "mode: int = 0o600) -> None:", "mode: int = 0o644) -> None:", S + "test_a_jobs_files_are_unreadable_by_another_user_and_the_plan_readable_by_its_own"),
 ("files: the plan's ACL for the job's user", "gpuperf/prolog/affinityplan.py", "    how = acl.grant_read(tmp, uid)\n", "    how = \"owner\"\n", S + "test_a_jobs_files_are_unreadable_by_another_user_and_the_plan_readable_by_its_own"),
 # --- sockets (docs/SECURITY.md, "Threat model: sockets") ---
 ("user socket: connection cap", "gpuperf/daemon/usersock.py", "            if len(self.conns) >= MAX_CONNS or self.per_uid(uid) >= MAX_CONNS_PER_UID:", "            if self.per_uid(uid) >= MAX_CONNS_PER_UID:", US + "test_1100_idle_connections_under_the_default_file_limit_neither_abort_nor_hold_descriptors"),
 ("user socket: per-user cap", "gpuperf/daemon/usersock.py", "            if len(self.conns) >= MAX_CONNS or self.per_uid(uid) >= MAX_CONNS_PER_UID:", "            if len(self.conns) >= MAX_CONNS:", US + "test_one_user_holding_connections_leaves_room_for_another"),
 ("user socket: a request's limit from its header", "gpuperf/daemon/usersock.py", "framing.PartReader(protocol.MAX_BYTES))", "framing.PartReader(1 << 40))", US + "test_a_part_longer_than_the_request_limit_is_refused_from_its_header"),
 ("framing: a part's length checked before its bytes", "gpuperf/files/framing.py", "    if n > limit:", "    if False:", US + "test_a_part_longer_than_the_request_limit_is_refused_from_its_header"),
 ("user socket: each connection's deadline", "gpuperf/daemon/usersock.py", "Conn(conn, uid, now + CONN_DEADLINE_S)", "Conn(conn, uid, now + 1e9)", US + "test_idle_connections_are_dropped_at_their_deadline"),
 ("user socket: EMFILE pauses accepting", "gpuperf/daemon/usersock.py", "                    self._paused_until = now + ACCEPT_PAUSE_S", "                    pass", US + "test_descriptor_exhaustion_pauses_accepting_instead_of_spinning"),
 ("user socket: the soft file limit raised", "gpuperf/daemon/channels.py", "            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))\n", "", US + "test_the_soft_file_limit_is_raised_to_the_hard_one_at_start"),
 ("user socket: unread replies within their budget", "gpuperf/daemon/usersock.py", "        if self.out_bytes + len(data) > OUT_BUDGET:", "        if False:", US + "test_replies_waiting_for_slow_readers_stay_within_the_budget"),
 ("collector: the kind's length limit", "gpuperf/controller/intake.py", "field(default_factory=lambda: framing.PartReader(transport.KIND_MAX))", "field(default_factory=lambda: framing.PartReader(1 << 31))", CB + "test_a_part_before_authentication_longer_than_its_limit_is_refused_from_its_header"),
 ("collector: the credential's length limit", "gpuperf/controller/intake.py", "            c.stage, c.reader.limit = _CRED, transport.CRED_MAX", "            c.stage, c.reader.limit = _CRED, 1 << 31", CB + "test_a_part_before_authentication_longer_than_its_limit_is_refused_from_its_header"),
 ("collector: the credential checked before the body", "gpuperf/controller/intake.py", "c.sender, c.digest = transport.authenticate(transport.KIND, part, self.allowed, self.munge_socket)", "c.sender, c.digest = transport.Sender(0, 0, c.host), part", CB + "test_the_credential_is_checked_before_a_byte_of_the_body_is_read"),
 ("collector: connection cap", "gpuperf/controller/intake.py", "            if len(self.conns) >= MAX_CONNS or sum(", "            if sum(", CB + "test_connections_beyond_the_cap_are_closed_at_once"),
 ("collector: per-address cap", "gpuperf/controller/intake.py", " or sum(c.host == host for c in self.conns.values()) >= MAX_CONNS_PER_HOST:", ":", CB + "test_one_address_holds_at_most_its_share_of_connections"),
 ("collector: the authentication deadline", "gpuperf/controller/intake.py", "            c = Conn(s, host, now + AUTH_DEADLINE_S)", "            c = Conn(s, host, now + 1e9)", CB + "test_a_silent_peer_is_dropped_at_the_authentication_deadline"),
 ("collector: authenticated senders within the budget", "gpuperf/controller/intake.py", "        if self.reserved + need > AUTHED_BUDGET:", "        if False:", CB + "test_authenticated_senders_together_hold_at_most_the_budget_and_the_rest_retry"),
 ("collector: EMFILE pauses accepting", "gpuperf/controller/intake.py", "                    self._paused_until = now + ACCEPT_PAUSE_S   # the listener would be ready again at once\n                    self.sel.unregister(self.sock)\n", "", CB + "test_descriptor_exhaustion_pauses_accepting_instead_of_spinning"),
 ("metrics: bound to localhost by default", "gpuperf/files/configschema.py", "\"metrics_address\": Key(str, \"127.0.0.1\",", "\"metrics_address\": Key(str, \"0.0.0.0\",", MB + "test_by_default_metrics_listen_on_localhost_only_and_name_no_job_or_user"),
 ("metrics: no job or user labels by default", "gpuperf/files/configschema.py", "\"metrics_job_labels\": Key(bool, False,", "\"metrics_job_labels\": Key(bool, True,", MB + "test_by_default_metrics_listen_on_localhost_only_and_name_no_job_or_user"),
 ("metrics: connection cap", "gpuperf/daemon/metrics.py", "        self.slots = threading.BoundedSemaphore(MAX_CONNS)", "        self.slots = threading.BoundedSemaphore(1 << 20)", MB + "test_a_slow_loris_cannot_grow_the_threads_beyond_the_cap"),
 ("metrics: read timeout", "gpuperf/daemon/metrics.py", "    timeout = TIMEOUT_S", "    timeout = None", MB + "test_a_silent_connection_is_closed_at_the_read_timeout"),
 ("metrics: a connection's deadline", "gpuperf/daemon/metrics.py", "            late = [r for r, dl in self.deadlines.items() if dl < now]", "            late = []", MB + "test_a_trickling_connection_is_shut_down_at_its_deadline"),
 ("hook socket: connection cap", "gpuperf/daemon/hooksock.py", "            if len(self.conns) >= MAX_CONNS:", "            if False:", HB + "test_connections_beyond_the_cap_are_closed_at_once"),
 ("hook socket: a connection's deadline", "gpuperf/daemon/hooksock.py", "(conn, time.monotonic() + CONN_DEADLINE_S)", "(conn, time.monotonic() + 1e9)", HB + "test_a_silent_connection_is_closed_at_its_deadline"),
]


# a pytest plugin in the mutant's directory: which gpuperf the test imported, and how each test ended
PROBE = r"""
import json, os, sys

_ended = {}


def pytest_runtest_logreport(report):
    if report.failed or report.skipped or report.when == "call":
        _ended.setdefault(report.nodeid, []).append(f"{report.when}:{report.outcome}")


def pytest_sessionfinish(session, exitstatus):
    mods = {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())
            if n == "gpuperf" or n.startswith("gpuperf.")}
    with open(os.environ["GPUPERF_MUTANT_PROBE"], "w") as f:
        json.dump({"modules": mods, "ended": _ended, "executable": sys.executable}, f)
"""


@dataclass
class Outcome:
    """How a mutation's test ended: exit status (None: it hung past the bound), what the probe saw."""

    name: str
    test: str
    work: Path
    rc: int | None = None
    modules: dict = field(default_factory=dict)
    ended: dict = field(default_factory=dict)
    executable: str = ""
    tail: str = ""
    seconds: float = 0.0

    @property
    def test_failed(self) -> bool:
        """The named test itself failed (or hung): not a collection error, not another test."""
        if self.rc is None:
            return True
        return self.rc == 1 and any(":failed" in e for t, ends in self.ended.items()
                                    if t == self.test or t.startswith(self.test + "[") for e in ends)

    @property
    def skipped(self) -> bool:
        """The named test was skipped here (it needs what this machine lacks): the guard is not tried."""
        ends = [e for t, es in self.ended.items() if t == self.test or t.startswith(self.test + "[") for e in es]
        return self.rc == 0 and bool(ends) and all(e.endswith(":skipped") for e in ends)

    def foreign_modules(self) -> list[str]:
        """gpuperf modules the test imported from anywhere but the mutant's copy."""
        root = str(self.work / "gpuperf") + os.sep
        return sorted(n for n, f in self.modules.items() if f and not f.startswith(root))

    def summary(self) -> str:
        if self.rc is None:
            return f"fails: hangs past {TIMEOUT_S} s (good)"
        if self.skipped:
            return "its test skipped here (not tried)"
        return "fails (good)" if self.test_failed else f"PASSES (guard untested; exit {self.rc})"


def mutant(work: Path, path: str, old: str, new: str, repo: Path = REPO) -> None:
    """A copy of ``repo``'s package in ``work`` with ``old`` replaced by ``new`` in ``path`` (once, exactly)."""
    shutil.copytree(repo / "gpuperf", work / "gpuperf", ignore=shutil.ignore_patterns("__pycache__"))
    p = work / path
    text = p.read_text()
    if text.count(old) != 1:
        raise ValueError(f"{path}: the guard's text occurs {text.count(old)} times, not once")
    p.write_text(text.replace(old, new))
    (work / "mutant_probe.py").write_text(PROBE)


def run(mutation: tuple[str, str, str, str, str], work: Path, repo: Path = REPO, timeout: float = TIMEOUT_S) -> Outcome:
    """Apply one mutation in ``work`` and run its test there (the test's file read from ``repo``)."""
    name, path, old, new, test = mutation
    work.mkdir(parents=True, exist_ok=True)
    mutant(work, path, old, new, repo)
    out = Outcome(name, test, work)
    env = {**os.environ, "PYTHONPATH": str(work), "GPUPERF_MUTANT_PROBE": str(work / "probe.json"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    # cwd is the copy: ``python -m`` puts the cwd first on sys.path, ahead of the checkout's editable install
    t0 = time.monotonic()
    with open(work / "output.txt", "w+") as log:
        # hypothesis's plugin costs 1.6 s of every start on a loaded 2-core VM and no guard's test needs it
        p = subprocess.Popen([PY, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                              "-p", "mutant_probe", str(repo / test)], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            out.rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            out.rc = None
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)     # and whatever the test started (daemons, floods)
            except ProcessLookupError:
                pass
            p.wait()
        out.seconds = time.monotonic() - t0
        log.seek(0)
        out.tail = log.read()[-3000:]
    try:
        probe = json.loads((work / "probe.json").read_text())
        out.modules, out.ended, out.executable = probe["modules"], probe["ended"], probe["executable"]
    except (OSError, ValueError, KeyError):
        pass
    return out


def run_all(mutations: list, base: Path, workers: int = 2, repo: Path = REPO, progress=None) -> list[Outcome]:
    """Every mutation, each alone in its own copy, ``workers`` at a time."""
    def one(i_m):
        o = run(i_m[1], base / f"m{i_m[0]:02d}", repo)
        if progress:
            progress(o)
        return o

    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        return list(ex.map(one, enumerate(mutations)))


def main(only: list[str]) -> int:
    chosen = [m for m in M if not only or any(o in m[0] for o in only)]
    with tempfile.TemporaryDirectory(prefix="gpuperf-mutants-") as base:
        rows = run_all(chosen, Path(base), int(os.environ.get("GPUPERF_MUTATE_WORKERS", "2")),
                       progress=lambda o: print(f"{o.name:48s} {o.summary():28s} {o.seconds:5.1f} s  {o.test}", flush=True))
    bad = [(o.name, o.summary(), o.foreign_modules()) for o in rows if not o.test_failed or o.foreign_modules()]
    print("\nALL GUARDS TESTED" if not bad else f"\nUNTESTED: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
