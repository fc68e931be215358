"""``gpuperf doctor``'s checks: small pure functions of the facts ``gpuperf.commands.doctor.gather`` reads,
each returning findings with a severity and the fix in one line (the tests plant facts here and faults
on the real cluster)."""

from __future__ import annotations

import math
import stat
from dataclasses import dataclass
from typing import Any, Callable

HOOK_KEYS = ("Prolog", "Epilog", "TaskProlog")  # node hooks gpuperf needs
CTLD_HOOK_KEYS = ("EpilogSlurmctld",)
SKEW_WARN_S, SKEW_FAIL_S = 2.0, 60.0  # munge credentials live 300 s; reports compare node and controller times
NO_SUCH_JOB = "999999999"  # sacctmgr's write test: a job id no cluster has, so nothing is ever changed
# packaging/slurm.conf.snippet: each [watchdog] bound at least this far below PrologEpilogTimeout (time for
# slurmd to see the hook's exit, and for a drain scontrol already under way)
TIMEOUT_MARGIN_S = 30
NO_TIMEOUT = 65534  # what scontrol shows for an unset PrologEpilogTimeout (22.05: no limit)
# flags a PrologFlags entry sets besides its own (read_config.c prolog_str2flags; slurm.conf(5): "Setting the
# Contain implicitly sets the Alloc flag", X11 "implicitly enables both Contain and Alloc")
PROLOG_FLAG_IMPLIES = {"contain": ("alloc",), "x11": ("contain", "alloc")}
SPANK_PLUGIN = "gpuperf_spank.so"
NO_ACCOUNTING = "accounting_storage/none"  # Slurm's AccountingStorageType when slurm.conf leaves it out


@dataclass(frozen=True)
class Finding:
    """One check's verdict: status ok | warn | fail | error (could not check) | skip, and the fix."""

    status: str
    code: str
    detail: str
    fix: str = ""


Facts = dict[str, Any]


def _ok(code: str, detail: str) -> list[Finding]:
    return [Finding("ok", code, detail)]


def _unset(value: str | None) -> bool:
    return value in (None, "", "(null)")


def prolog_flags(value: str) -> set[str]:
    """The PrologFlags in effect (lowercase) as Slurm resolves a PrologFlags value: each named flag and
    those it implies (Contain sets Alloc; X11 sets Contain and Alloc)."""
    named = {x.strip().lower() for x in ("" if _unset(value) else value).split(",") if x.strip()}
    return named.union(*(PROLOG_FLAG_IMPLIES.get(x, ()) for x in named))


def spank_plugin_paths(lines: list[str]) -> list[str]:
    """The plugin paths of plugstack.conf lines that load gpuperf's SPANK plugin, as spank(7) reads a
    line: text after '#' is a comment, then ``required|optional <plugin> [args]``."""
    out = []
    for line in lines:
        bits = line.split("#", 1)[0].split()
        if len(bits) >= 2 and bits[0] in ("required", "optional") and bits[1].rsplit("/", 1)[-1] == SPANK_PLUGIN:
            out.append(bits[1])
    return out


# checks: pure functions of the facts ----------------------------------------------------------
def check_config(f: Facts) -> list[Finding]:
    """gpuperf's own config file parses and validates."""
    if f.get("config_error"):
        return [Finding("fail", "config", f["config_error"], "fix the key named, then: gpuperf doctor")]
    return _ok("config", f"{f.get('config_source', '')} valid")


def check_hooks(f: Facts) -> list[Finding]:
    """Slurm's hook settings name existing executables (node hooks on a node, EpilogSlurmctld on the controller)."""
    sc = f.get("slurm")
    if sc is None:
        return [Finding("error", "hooks", f"cannot read Slurm's config: {f.get('slurm_error')}",
                        "check SLURM_CONF and that slurmctld answers: scontrol show config")]
    keys = (HOOK_KEYS if f.get("node") else ()) + (CTLD_HOOK_KEYS if f.get("controller") else ())
    out = []
    for key in keys:
        value = sc.get(key, "(null)")
        if value in ("", "(null)"):
            out.append(Finding("fail", "hooks", f"{key} is not set", f"slurm.conf: {key}=/opt/gpuperf/bin/gpuperf-"
                               + key.lower().replace("slurmctld", "-slurmctld")))
            continue
        for path in value.split(","):
            if not f.get("executable", {}).get(path):
                out.append(Finding("fail", "hooks", f"{key}={path} is not an executable file",
                                   "install gpuperf on this host (dpkg -i gpuperf_*.deb) or correct the path in slurm.conf"))
            elif key in HOOK_KEYS and path.endswith(f"gpuperf-{key.lower()}") and f.get("compiled", {}).get(path) is False:
                # the Python hook works, at an interpreter's start (15-20 ms) per job and per task
                out.append(Finding("warn", "hooks", f"{key}={path} is the Python hook, not the compiled client "
                                   "gpuperf-hook: each job start pays an interpreter's start",
                                   "bash packaging/build-hook.sh (needs gcc), or reinstall the package"))
    return out or _ok("hooks", ", ".join(f"{k}={sc.get(k)}" for k in keys))


def check_prolog_flags(f: Facts) -> list[Finding]:
    """PrologFlags has Alloc: the prolog runs at allocation, so a bad node is drained before any step."""
    sc = f.get("slurm")
    if sc is None or not f.get("node"):
        return []
    value = sc.get("PrologFlags", "")
    if "alloc" not in prolog_flags(value):
        said = "PrologFlags is not set (Slurm's default: none)" if _unset(value) else f"PrologFlags={value}"
        return [Finding("fail", "prolog_flags", f"{said} lacks Alloc",
                        "slurm.conf: PrologFlags=Alloc,Contain; then scontrol reconfigure")]
    named = {x.strip().lower() for x in value.split(",")}
    return _ok("prolog_flags", f"PrologFlags={value}" + ("" if "alloc" in named else " (which sets Alloc)"))


def check_plugstack(f: Facts) -> list[Finding]:
    """plugstack.conf names gpuperf_spank.so, the file exists, and srun loads it (its --gpuperf option)."""
    if not f.get("node") or f.get("slurm") is None:
        return []
    named = spank_plugin_paths(f.get("plugstack_lines") or [])
    where = f"{f.get('plugstack_path')}" + (" (PlugStackConfig unset: Slurm's default, beside slurm.conf)"
                                            if f.get("plugstack_default") else "")
    if not named:
        return [Finding("warn", "plugstack", f"{where} does not name gpuperf_spank.so: tasks are not "
                        "pinned next to their GPUs", "add: optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=/run/gpuperf")]
    path = named[0]
    if not f.get("spank_exists", {}).get(path):
        return [Finding("fail", "plugstack", f"plugstack names {path}, which does not exist",
                        "install gpuperf here, or point the line at /opt/gpuperf/lib/gpuperf_spank.so")]
    if f.get("srun_has_option") is False:
        return [Finding("fail", "plugstack", f"{path} is named but srun does not load it (no --gpuperf in srun --help)",
                        "check slurmd/srun logs for the SPANK error; rebuild: bash packaging/build-spank.sh")]
    return _ok("plugstack", f"{path} named in {where} and loaded")


def check_daemon(f: Facts) -> list[Finding]:
    """The node daemon answers, and its backend sees as many GPUs as Slurm configured for this node."""
    if not f.get("node"):
        return []
    ping = f.get("daemon")
    if not ping:
        return [Finding("fail", "daemon", f"the node daemon does not answer: {f.get('daemon_error')}",
                        "systemctl enable --now gpuperf-daemon; journalctl -u gpuperf-daemon")]
    gres = f.get("gres_gpus")
    seen = ping.get("gpus")
    if gres is not None and seen != gres:
        return [Finding("fail", "daemon_gpus", f"Slurm configures {gres} GPUs on {f.get('node_name')}, the daemon's "
                        f"{ping.get('backend')} backend sees {seen}", "fix gres.conf or the driver; gpuperf check names bad GPUs")]
    if gres is None and seen and f.get("node_known"):
        # Slurm's default is no Gres: jobs cannot ask for these GPUs, nor are they confined to theirs
        return [Finding("warn", "daemon_gpus", f"Slurm configures no GPUs on {f.get('node_name')} (Gres unset), the "
                        f"daemon's {ping.get('backend')} backend sees {seen}",
                        f"slurm.conf: GresTypes=gpu and Gres=gpu:{seen} on this node's NodeName line, gres.conf naming "
                        "the devices; then restart slurmd")]
    return _ok("daemon", f"pid {ping.get('pid')}, backend {ping.get('backend')}, {seen} GPUs"
               + (f" (gres.conf: {gres})" if gres is not None else ""))


def check_collector(f: Facts) -> list[Finding]:
    """Nodes can reach the controller's collector, and munge credentials round-trip here."""
    out = []
    if f.get("munge_error"):
        out.append(Finding("fail", "munge", f"munge round trip failed: {f['munge_error']}",
                           "start munged with the cluster's key: systemctl enable --now munge"))
    else:
        out.append(Finding("ok", "munge", "credential encoded and decoded"))
    where = f"{f.get('collector')}" + (" (controller.address unset: Slurm's controller, SlurmctldAddr or "
                                         "SlurmctldHost)" if f.get("collector_default") else "")
    if f.get("collector_error"):
        out.append(Finding("fail", "collector", f"collector {where} unreachable: {f['collector_error']}",
                           "on the controller: systemctl enable --now gpuperf-collector; open its port to the nodes"))
    elif f.get("collector"):
        out.append(Finding("ok", "collector", f"{where} accepts connections"))
    return out


def check_sacctmgr(f: Facts) -> list[Finding]:
    """On the controller, this user may modify jobs in the accounting database (AdminComment)."""
    if not f.get("controller"):
        return []
    storage = (f.get("slurm") or {}).get("AccountingStorageType")
    if f.get("slurm") is not None and (_unset(storage) or storage == NO_ACCOUNTING):
        said = f"AccountingStorageType is not set (Slurm's default: {NO_ACCOUNTING})" if _unset(storage) else \
            f"AccountingStorageType={storage}"
        return [Finding("fail", "sacctmgr", f"{said}: no accounting database holds finished jobs, so gpuperf cannot "
                        "write their AdminComment", "slurm.conf: AccountingStorageType=accounting_storage/slurmdbd and a "
                        "running slurmdbd; then restart slurmctld")]
    res = f.get("sacctmgr")
    if res is None:
        return []
    rc, text = res
    # 22.05: "Nothing modified"; 24.11: "Request didn't affect anything or your user doesn't have privilege
    # ...", its one answer for both; 26.05: "Modified jobs... Error with request: Data has not changed since
    # time specified" (seen on the test cluster of each): the write reached slurmdbd every time
    t = text.lower()
    if "nothing modified" in t or "didn't affect anything" in t or "data has not changed" in t:
        return _ok("sacctmgr", "may write AdminComment (test write to a job that does not exist)")
    if "permission" in text.lower() or "privilege" in text.lower():
        return [Finding("fail", "sacctmgr", f"sacctmgr refuses job changes for this user: {text.strip()[:160]}",
                        "run the collector and EpilogSlurmctld as root or SlurmUser, or: sacctmgr modify user U set AdminLevel=Admin")]
    return [Finding("fail", "sacctmgr", f"sacctmgr cannot write AdminComment (rc {rc}): {text.strip()[:160]}",
                    "AccountingStorageType=accounting_storage/slurmdbd and a running slurmdbd: sacctmgr show cluster")]


def check_store_retention(f: Facts) -> list[Finding]:
    """On the controller: how long its store keeps node series (``controller.series_keep_days``), said."""
    if not f.get("controller") or f.get("series_keep_days") is None:
        return []
    keep = f["series_keep_days"]
    return _ok("store", "node series kept " + (f"{keep:g} days" if keep > 0 else "for ever")
               + " (controller.series_keep_days), at 100 points a metric once a job's late summaries are in")


def check_modes(f: Facts) -> list[Finding]:
    """Stores are private (no world access; a group only as ``general.state_group`` names), the control
    socket directory is root-only, the run dir not replaceable by users."""
    out = []
    group, gid_known = f.get("state_group") or "", f.get("state_group_exists", True)
    if group and not gid_known:
        out.append(Finding("fail", "modes", f"general.state_group = {group!r}: no such group on this host "
                           "(the stores stay root-only)", f"groupadd {group} on every host, or correct general.state_group"))
    for path, (mode, is_dir, role, owner_group) in sorted((f.get("modes") or {}).items()):
        want = ("0750" if is_dir else "0640") if group else ("0700" if is_dir else "0600")
        if role == "private" and mode & 0o007:
            out.append(Finding("fail", "modes", f"{path} is {mode:o}: every user can read job records",
                               f"chmod {want} {path}"))
        elif role == "private" and group and gid_known and (owner_group != group or mode & (0o050 if is_dir else 0o040) == 0):
            out.append(Finding("warn", "modes", f"{path} is {mode:o} group {owner_group}: general.state_group "
                               f"{group} cannot read it", "restart gpuperf-daemon / gpuperf-collector (they apply "
                               f"state_group at start), or: chgrp {group} {path}; chmod {want} {path}"))
        elif role == "private" and not group and mode & 0o070:
            out.append(Finding("warn", "modes", f"{path} is {mode:o}: group {owner_group} can read job records, "
                               "but general.state_group is unset", f"chmod {want} {path}, or state_group = "
                               f"\"{owner_group}\" in [general]"))
        elif role == "root-only" and mode & 0o077:
            out.append(Finding("fail", "modes", f"{path} is {mode:o}: must be root-only", f"chmod 0700 {path}"))
        elif role == "shared" and mode & 0o002 and not mode & stat.S_ISVTX:
            out.append(Finding("fail", "modes", f"{path} is {mode:o}: any user can replace job state", f"chmod 0755 {path}"))
    shared = f" (group {group})" if group else ""
    return out or _ok("modes", f"{len(f.get('modes') or {})} state paths private{shared}")


def check_prolog_timeout(f: Facts) -> list[Finding]:
    """Slurm's PrologEpilogTimeout is above gpuperf's watchdog bound with the snippet's margin, so a slow
    gpuperf hook ends itself (exit 0) before Slurm kills it and drains the node."""
    sc, bound = f.get("slurm"), f.get("watchdog_s")
    if sc is None or not bound or not f.get("node"):
        return []
    raw = sc.get("PrologEpilogTimeout", "")
    timeout = int(raw) if raw.isdigit() and int(raw) < NO_TIMEOUT else None
    need = bound + TIMEOUT_MARGIN_S
    fix = (f"slurm.conf: PrologEpilogTimeout={max(120, math.ceil(need))} (or lower [watchdog] prolog_s/epilog_s); "
           "then scontrol reconfigure")
    if timeout is None:
        return [Finding("warn", "prolog_timeout", f"PrologEpilogTimeout is unset: Slurm never ends a hung Prolog or "
                        f"Epilog (gpuperf ends its own after {bound:g} s)", fix)]
    if timeout <= bound:
        return [Finding("fail", "prolog_timeout", f"PrologEpilogTimeout={timeout} s is not above gpuperf's watchdog "
                        f"bound {bound:g} s: Slurm would kill a slow gpuperf hook first and drain the node", fix)]
    if timeout < need:
        return [Finding("warn", "prolog_timeout", f"PrologEpilogTimeout={timeout} s is less than {TIMEOUT_MARGIN_S} s "
                        f"above gpuperf's watchdog bound {bound:g} s", fix)]
    return _ok("prolog_timeout", f"PrologEpilogTimeout={timeout} s, gpuperf's hooks end within {bound:g} s")


def check_clock(f: Facts) -> list[Finding]:
    """This host's clock agrees with the controller's (sdiag's time); reports and munge depend on it."""
    skew = f.get("skew_s")
    if skew is None:
        return []
    if abs(skew) >= SKEW_FAIL_S:
        return [Finding("fail", "clock", f"clock is {skew:+.0f} s off the controller's", "enable chrony/NTP on every host")]
    if abs(skew) >= SKEW_WARN_S:
        return [Finding("warn", "clock", f"clock is {skew:+.1f} s off the controller's", "enable chrony/NTP on every host")]
    return _ok("clock", f"within {SKEW_WARN_S:.0f} s of the controller's")


def check_slurm_gpu(f: Facts) -> list[Finding]:
    """Slurm's own gres/gpuutil and gres/gpumem agree with gpuperf's within what Slurm's sampling explains."""
    pairs = f.get("slurm_gpu")
    if not pairs:
        return []  # the release or the nodes record no GPU TRES (before 23.02, or no AutoDetect=nvml)
    bad = {j: why for j, why in pairs.items() if why}
    if bad:
        j, why = next(iter(sorted(bad.items())))
        return [Finding("warn", "slurm_gpu", f"{len(bad)} of {len(pairs)} recent jobs: Slurm's GPU figures and "
                        f"gpuperf's disagree beyond sampling (job {j}: {why})",
                        "compare `sacct -j JOB -o TRESUsageInAve,TRESUsageInMax` with `gpuperf report JOB`; "
                        "check gres.conf AutoDetect=nvml and that gpuperf attributes the job's GPUs")]
    return _ok("slurm_gpu", f"{len(pairs)} recent jobs: Slurm's GPU figures agree with gpuperf's within sampling")


CHECKS: tuple[Callable[[Facts], list[Finding]], ...] = (
    check_config, check_hooks, check_prolog_flags, check_prolog_timeout, check_plugstack, check_daemon,
    check_collector, check_sacctmgr, check_store_retention, check_modes, check_clock, check_slurm_gpu)


def diagnose(facts: Facts) -> list[Finding]:
    """Every check's findings over the gathered facts."""
    return [x for check in CHECKS for x in check(facts)]
