"""Issue 28 on the Slurm test cluster under the units' memory limits: run the cluster test, render its figures
as ``benchmarks/results/security_cluster.md``.

    GPUPERF_PREFIX=/tmp/gp-NAME GPUPERF_TEST_CLUSTER=NAME python3 benchmarks/security_cluster.py [--no-run]

Runs ``tests/integration/test_hostile_files_slurm.py`` (root, the test cluster NAME, an editable install at
GPUPERF_PREFIX): the node daemon and the controller service in memory cgroups at their units' ``MemoryMax``
under hostile job names, job-dir files and the four socket floods while jobs run; then turns
``/tmp/gpuperf-slurm-NAME/security_cluster_figures.json`` into the page.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures import cluster_test_figures, provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FLOODS = {
    "user-parts": lambda r: (f"finding 5, as the job's user at `user.sock`: ZMTP frames all flagged MORE and parts "
                             f"claiming 1 GiB; {r['offered_mib']} MiB offered, {r['claimed_mib']} MiB claimed, "
                             f"{r['accepted_mib']} MiB taken; each claim answered `{r['answer']}`"),
    "user-conns": lambda r: f"finding 6: {r['connections']:,} idle connections to `user.sock` from {r['users']} users, held 3 s",
    "ctl-flood": lambda r: (f"finding 7, an unauthenticated peer at the collector: {r['idle_connections']} idle connections "
                            f"from 10 addresses held 1 s (past the 256 cap), then ZMTP MORE floods, kind and credential "
                            f"parts claiming 1 GiB; {r['offered_mib']:,} MiB offered, {r['claimed_mib']:,} MiB claimed, "
                            f"{r['accepted_mib']} MiB taken (read and dropped); {r['answered']} claims answered "
                            f"(`{r['answer']}`)"),
    "metrics-loris": lambda r: (f"finding 8: {r['connections']:,} slow-loris connections to /metrics, a byte a second, "
                                f"5 s; a scrape after: {r['scrape_after']}"),
}


def _proc(p: dict) -> str:
    cg = f"{p['cgroup_peak_mib']} / {p['limit_mib']}" if p["cgroup_peak_mib"] is not None else f"- / {p['limit_mib']}"
    alive = "yes" if p["alive"] and p["same_pid"] else f"**no** (exit {p['exit']})"
    return (f"{p['rss_before_mib']} → {p['rss_peak_mib']} ({p['rss_growth_mib'] + 0.0:+.1f}) | {p['vmhwm_mib']} | {cg} | "
            f"{p['oom_kills'] if p['oom_kills'] is not None else '-'} | {p['peak_fds']} / {p['peak_threads']} | {alive}")


def render(fig: dict, files: dict, header: str) -> str:
    """The results page from the test's figures (``security_cluster_figures.json``, ``security_files_figures.json``)."""
    jobs = fig.get("jobs", {})
    rows = []
    for r in fig.get("phases", []):
        mine = [j for j in jobs.values() if j["phase"] == r["phase"]]
        during = sum(j["ran_during_flood"] for j in mine)
        deliv = (f"{sum(j['kind'] == 'ordinary' for j in mine)} ordinary + {sum(j['kind'] == 'hostile' for j in mine)} "
                 f"hostile ({r['hostile_job']}): {len(mine)}/{sum(len(v) for v in r['jobs'].values())} AdminComments; "
                 f"{during} ran during the flood")
        for k in sorted(r["procs"], key=lambda k: k != r["target"]):
            first = f"**{r['phase']}** ({r['flood_s']} s): {FLOODS[r['phase']](r)}" if k == r["target"] else "″"
            rows.append(f"| {first} | {k}{' (target)' if k == r['target'] else ''} | {_proc(r['procs'][k])} | "
                        f"{deliv if k == r['target'] else ''} |")
    before = fig.get("before_floods", {})
    pre = " ".join(f"{k}: VmHWM {v['vmhwm_mib']} MiB, cgroup peak {v['cgroup_peak_mib']} MiB;" for k, v in before.items())
    hostile = ", ".join(f"{k} {v['daemon_vmhwm_kib'] / 1024:.1f}" for k, v in files.items() if isinstance(v, dict))
    td = fig.get("teardown", {})
    mib = lambda d: ", ".join(f"{k} {v}" for k, v in sorted((d or {}).items())) or "?"  # noqa: E731
    cg = ("cgroup v2 (`memory.max`)" if fig.get("cgroup_v2") else "cgroup v1 (`memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`)"
          ) if not fig.get("no_cgroup") else f"**no memory cgroup** ({fig['no_cgroup']}): RSS held to the limits only"
    return f"""<!-- rendered by benchmarks/security_cluster.py from one run: do not edit the numbers -->
# Hostile jobs and socket floods on the Slurm test cluster, under the units' memory limits (issue 28)

{header}

Set-up: the single-node Slurm 22.05 test cluster (4 fake GPUs), the real node daemon (`gpuperf daemon`,
replaying an H100 recording as 4 GPUs) delivering to the real controller service (`gpuperf daemon
--controller`), which writes each job's AdminComment with sacctmgr; every job runs as the ordinary user.
Both services run as their packaged units do, without systemd (`tests/cluster/unitlimits.py`): the unit's
`ExecStart`, from its first instruction in a memory cgroup of its own, {cg}, set to the unit's `MemoryMax`
read from `packaging/gpuperf-daemon.service` ({fig.get('limits_mib', {}).get('daemon')} MiB) and
`packaging/gpuperf-collector.service` ({fig.get('limits_mib', {}).get('controller')} MiB); systemd's default
file limit (soft 1,024, hard 524,288; the daemon raises its soft limit to the hard one). First the hostile
job names and job-dir files of `security_files.md` (daemon VmHWM MiB per case: {hostile or '?'}); then
four phases, each submitting 2 ordinary jobs and 1 hostile job (as the user) and flooding once the first is
running. The floods are `tests/unit/floods.py`'s (`benchmarks/socket_floods.py` runs them larger, outside
Slurm: `security_sockets.md`), each past what breaks an unbounded process: bytes offered beyond the
target's limit, connections beyond the soft file limit it starts with and its caps.

Before the floods (the hostile name/file tests): {pre}

RSS: VmRSS sampled every 0.1 s over the phase (before → peak, growth); VmHWM: the process's lifetime peak;
cgroup: `memory.max_usage_in_bytes` over the phase (reset at its start) against the limit, MiB; OOM: the
group's `oom_kill` count; fds / threads: peaks.

| phase: flood | process | RSS MiB before → peak (growth) | VmHWM MiB | cgroup peak / limit MiB | OOM kills | fds / threads | alive, same pid | jobs delivered |
|---|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + f"""

Asserted (the test fails otherwise): after every phase both processes alive with the pid they started with,
no OOM kill, VmHWM, sampled RSS and cgroup peak below the unit's limit; the controller's RSS growth under
the unauthenticated flood below 64 MiB (here {next((r['procs']['controller']['rss_growth_mib'] for r in fig.get('phases', []) if r['phase'] == 'ctl-flood'), '?')} MiB);
a scrape answered after the slow loris; every job (ordinary and hostile) COMPLETED, final in the controller's
queue and its AdminComment in sacct ({len(jobs)}/{len(jobs)}). Over the whole module (hostile files and floods)
the cgroups' peaks: {mib(fig.get('module_cgroup_peak_mib'))} MiB; OOM kills: {mib(fig.get('module_oom_kills'))}.
At the end the services were stopped and {'the cgroups removed' if td.get('cgroups_removed') else 'no cgroup made' if fig.get('no_cgroup') and not td.get('cgroups_left') else f'NOT all cleaned up: {td}'}.
Floods and deliveries took {fig.get('floods_and_deliveries_s')} s of the run.
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-run", action="store_true", help="render the figures of the last run only")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "security_cluster.md"))
    a = ap.parse_args()
    run = cluster_test_figures(ROOT, "tests/integration/test_hostile_files_slurm.py",
                               "security_cluster_figures.json", not a.no_run)
    if run["rc"]:
        return run["rc"]
    name, prefix, load, when = run["name"], run["prefix"], run["load"], provenance(ROOT)
    took = "" if run["took_s"] is None else f"; the test file took {run['took_s']:.0f} s in all (cluster start included)"
    header = (f"Command (root, this checkout, an editable install and its own test cluster):\n\n```sh\n"
              f"GPUPERF_PREFIX={prefix} bash packaging/install.sh --test\n"
              f"GPUPERF_PREFIX={prefix} GPUPERF_TEST_CLUSTER={name} python3 benchmarks/security_cluster.py\n"
              f"# runs tests/integration/test_hostile_files_slurm.py, renders "
              f"/tmp/gpuperf-slurm-{name}/security_cluster_figures.json\n```\n\n"
              f"Run: {when}; the 2-core dev VM shared with other engineers' test runs ({load}{took}).")
    # the same test file leaves the hostile-file cases' figures beside its own
    files = json.loads((Path(f"/tmp/gpuperf-slurm-{name}") / "security_files_figures.json").read_text())
    Path(a.out).write_text(render(run["figures"], files, header))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
