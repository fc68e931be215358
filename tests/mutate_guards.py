"""Every guard on a user's files and parsed text, removed one at a time: the named test must fail.

Run from the repository root with the test venv's python (``python tests/mutate_guards.py [name...]``):
each mutation edits one file (one exact match, else it says so), runs the one test, restores the
file. docs/SECURITY.md ("Threat model: files and parsers") lists the same guard -> test pairs.
"""
import os
import subprocess
import sys
from pathlib import Path

PY = sys.executable
U = "tests/unit/"
S, H, G = U + "test_security_files.py::", U + "test_hardening.py::", U + "test_safeio_guards.py::"
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
]
only = sys.argv[1:]
rows = []
for name, f, old, new, test in M:
    if only and not any(o in name for o in only):
        continue
    p = Path(f)
    orig = p.read_text()
    n = orig.count(old)
    if n != 1:
        rows.append((name, test, f"MUTATION NOT APPLIED ({n} matches)"))
        continue
    p.write_text(orig.replace(old, new))
    try:
        r = subprocess.run([PY, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": "."})
        res = "fails (good)" if r.returncode != 0 else "PASSES (guard untested)"
    except subprocess.TimeoutExpired:
        res = "fails: hangs past 120 s (good)"
    finally:
        p.write_text(orig)
    rows.append((name, test, res))
    print(f"{name:48s} {res:28s} {test}", flush=True)
bad = [r for r in rows if "good" not in r[2]]
print("\nALL GUARDS TESTED" if not bad else f"\nUNTESTED: {bad}")
sys.exit(1 if bad else 0)
