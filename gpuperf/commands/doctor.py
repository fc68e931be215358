"""``gpuperf doctor``: is this host's gpuperf installation wired in right? One finding per check, each with
the fix in one line; exit 0 fine (warnings allowed), 1 a fault found, 2 could not check (like ``gpuperf check``).

Facts are gathered once (``gather``: Slurm's config, plugstack, daemon, collector, munge, sacctmgr, file
modes, the controller's clock); each check is a small pure function of them (``CHECKS``), so the tests
drive the checks with planted facts and the real cluster with planted faults.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import stat
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from gpuperf.commands.check import exit_code

HOOK_KEYS = ("Prolog", "Epilog", "TaskProlog")  # node hooks gpuperf needs
CTLD_HOOK_KEYS = ("EpilogSlurmctld",)
SKEW_WARN_S, SKEW_FAIL_S = 2.0, 60.0  # munge credentials live 300 s; reports compare node and controller times
NO_SUCH_JOB = "999999999"  # sacctmgr's write test: a job id no cluster has, so nothing is ever changed


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
    return out or _ok("hooks", ", ".join(f"{k}={sc.get(k)}" for k in keys))


def check_prolog_flags(f: Facts) -> list[Finding]:
    """PrologFlags has Alloc: the prolog runs at allocation, so a bad node is drained before any step."""
    sc = f.get("slurm")
    if sc is None or not f.get("node"):
        return []
    flags = [x.strip().lower() for x in sc.get("PrologFlags", "").split(",")]
    if "alloc" not in flags:
        return [Finding("fail", "prolog_flags", f"PrologFlags={sc.get('PrologFlags', '')} lacks Alloc",
                        "slurm.conf: PrologFlags=Alloc,Contain; then scontrol reconfigure")]
    return _ok("prolog_flags", f"PrologFlags={sc.get('PrologFlags')}")


def check_plugstack(f: Facts) -> list[Finding]:
    """plugstack.conf names gpuperf_spank.so, the file exists, and srun loads it (its --gpuperf option)."""
    if not f.get("node") or f.get("slurm") is None:
        return []
    lines = f.get("plugstack_lines") or []
    named = [ln for ln in lines if "gpuperf_spank.so" in ln and not ln.lstrip().startswith("#")]
    if not named:
        return [Finding("warn", "plugstack", f"{f.get('plugstack_path')} does not name gpuperf_spank.so: tasks are not "
                        "pinned next to their GPUs", "add: optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=/run/gpuperf")]
    path = named[0].split()[1] if len(named[0].split()) > 1 else ""
    if not f.get("spank_exists", {}).get(path):
        return [Finding("fail", "plugstack", f"plugstack names {path}, which does not exist",
                        "install gpuperf here, or point the line at /opt/gpuperf/lib/gpuperf_spank.so")]
    if f.get("srun_has_option") is False:
        return [Finding("fail", "plugstack", f"{path} is named but srun does not load it (no --gpuperf in srun --help)",
                        "check slurmd/srun logs for the SPANK error; rebuild: bash packaging/build-spank.sh")]
    return _ok("plugstack", f"{path} named and loaded")


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
    if f.get("collector_error"):
        out.append(Finding("fail", "collector", f"collector {f.get('collector')} unreachable: {f['collector_error']}",
                           "on the controller: systemctl enable --now gpuperf-collector; open its port to the nodes"))
    elif f.get("collector"):
        out.append(Finding("ok", "collector", f"{f['collector']} accepts connections"))
    return out


def check_sacctmgr(f: Facts) -> list[Finding]:
    """On the controller, this user may modify jobs in the accounting database (AdminComment)."""
    if not f.get("controller"):
        return []
    res = f.get("sacctmgr")
    if res is None:
        return []
    rc, text = res
    if "nothing modified" in text.lower():
        return _ok("sacctmgr", "may write AdminComment (test write to a job that does not exist)")
    if "permission" in text.lower() or "privilege" in text.lower():
        return [Finding("fail", "sacctmgr", f"sacctmgr refuses job changes for this user: {text.strip()[:160]}",
                        "run the collector and EpilogSlurmctld as root or SlurmUser, or: sacctmgr modify user U set AdminLevel=Admin")]
    return [Finding("fail", "sacctmgr", f"sacctmgr cannot write AdminComment (rc {rc}): {text.strip()[:160]}",
                    "AccountingStorageType=accounting_storage/slurmdbd and a running slurmdbd: sacctmgr show cluster")]


def check_modes(f: Facts) -> list[Finding]:
    """Stores are private (no world access), the control socket directory is root-only."""
    out = []
    for path, (mode, is_dir, role) in sorted((f.get("modes") or {}).items()):
        if role == "private" and mode & 0o007:
            out.append(Finding("fail", "modes", f"{path} is {mode:o}: every user can read job records",
                               f"chmod {'0700' if is_dir else '0600'} {path}"))
        elif role == "root-only" and mode & 0o077:
            out.append(Finding("fail", "modes", f"{path} is {mode:o}: must be root-only", f"chmod 0700 {path}"))
        elif role == "shared" and mode & 0o002 and not mode & stat.S_ISVTX:
            out.append(Finding("fail", "modes", f"{path} is {mode:o}: any user can replace job state", f"chmod 0755 {path}"))
    return out or _ok("modes", f"{len(f.get('modes') or {})} state paths private")


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


CHECKS: tuple[Callable[[Facts], list[Finding]], ...] = (
    check_config, check_hooks, check_prolog_flags, check_plugstack, check_daemon, check_collector,
    check_sacctmgr, check_modes, check_clock)


def diagnose(facts: Facts) -> list[Finding]:
    """Every check's findings over the gathered facts."""
    return [x for check in CHECKS for x in check(facts)]


# parsing: pure ------------------------------------------------------------------------------------
def parse_key_values(text: str) -> dict[str, str]:
    """``scontrol show config`` lines 'Key = value' -> dict."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() and " " not in k.strip():
            out[k.strip()] = v.strip()
    return out


def parse_gres_gpus(show_node: str) -> int | None:
    """GPU count of ``scontrol show node`` output ('Gres=gpu:4' or 'gpu:h100:8(S:0-1)'); None: no GPUs configured."""
    for tok in show_node.split():
        if tok.startswith("Gres="):
            total = 0
            for part in tok[5:].split(","):
                bits = part.split("(")[0].split(":")
                if bits[0] == "gpu" and bits[-1].isdigit():
                    total += int(bits[-1])
            return total or None
    return None


def parse_sdiag_time(text: str) -> float | None:
    """The controller's time in ``sdiag``'s first line: 'sdiag output at ... (1795406227)'."""
    for line in text.splitlines():
        if line.startswith("sdiag output at") and line.rstrip().endswith(")"):
            try:
                return float(line.rsplit("(", 1)[1].rstrip(")"))
            except ValueError:
                return None
    return None


# gathering: I/O at the edge ----------------------------------------------------------------------
def _run(argv: list[str], timeout: float = 10.0, env: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return p.returncode, p.stdout + p.stderr


def _plugstack(path: str) -> list[str]:
    """plugstack.conf's lines, with the files its ``include`` lines name (one level)."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return []
    out = []
    for ln in lines:
        bits = ln.split()
        if len(bits) == 2 and bits[0] == "include":
            for inc in sorted(glob.glob(bits[1] if bits[1].startswith("/") else os.path.join(os.path.dirname(path), bits[1]))):
                try:
                    out += open(inc).read().splitlines()
                except OSError:
                    pass
        else:
            out.append(ln)
    return out


def _mode_facts(cfg: Any) -> dict[str, tuple[int, bool, str]]:
    from gpuperf.daemon.startup import store_path
    from gpuperf.controller.clusterstore import default_path

    paths = {cfg.general.state_dir: "private", store_path(cfg): "private", default_path(cfg): "private",
             cfg.daemon.socket_dir: "root-only", cfg.general.run_dir: "shared"}
    out = {}
    for p, role in paths.items():
        try:
            st = os.stat(p)
        except OSError:
            continue
        out[p] = (stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode), role)
    return out


def gather(role: str, node_name: str) -> Facts:
    """Read everything the checks need from this host (Slurm, gpuperf's config, daemon, collector, munge)."""
    from gpuperf import config as config_mod

    f: Facts = {"node_name": node_name}
    try:
        cfg = config_mod.load()
        f["config_source"] = cfg.source
    except config_mod.ConfigError as e:
        f["config_error"] = str(e)
        cfg = config_mod.load_or_defaults()
    bin_dir = cfg.general.slurm_bin_dir
    rc, text = _run([os.path.join(bin_dir, "scontrol"), "show", "config"])
    sc = parse_key_values(text) if rc == 0 else None
    f["slurm"], f["slurm_error"] = sc, None if rc == 0 else text.strip()[:200]
    ctld = (sc or {}).get("SlurmctldHost[0]", "").split("(")[0]
    here = {socket.gethostname(), socket.gethostname().split(".")[0]}
    f["controller"] = role in ("controller", "both") or (role == "auto" and ctld in here)
    rc_n, show_node = _run([os.path.join(bin_dir, "scontrol"), "show", "node", node_name])
    f["node"] = role in ("node", "both") or (role == "auto" and rc_n == 0 and "NodeName=" in show_node)
    if sc is not None:
        hooks = [p for k in HOOK_KEYS + CTLD_HOOK_KEYS for p in sc.get(k, "").split(",") if p not in ("", "(null)")]
        f["executable"] = {p: os.path.isfile(p) and os.access(p, os.X_OK) for p in hooks}
        f["plugstack_path"] = sc.get("PlugStackConfig", "/etc/slurm/plugstack.conf")
        f["plugstack_lines"] = _plugstack(f["plugstack_path"])
        named = [ln.split()[1] for ln in f["plugstack_lines"] if "gpuperf_spank.so" in ln and len(ln.split()) > 1]
        f["spank_exists"] = {p: os.path.isfile(p) for p in named}
        if named and f["node"]:
            rc_h, help_text = _run([os.path.join(bin_dir, "srun"), "--help"])
            f["srun_has_option"] = "--gpuperf" in help_text
        t0 = time.time()
        rc_d, sdiag = _run([os.path.join(bin_dir, "sdiag")])
        ctl_t = parse_sdiag_time(sdiag) if rc_d == 0 else None
        # sdiag's time has 1 s resolution: compare with the middle of the call
        f["skew_s"] = None if ctl_t is None else round((t0 + time.time()) / 2 - ctl_t, 1)
    f["gres_gpus"] = parse_gres_gpus(show_node) if rc_n == 0 else None
    if f["node"]:
        _daemon_facts(cfg, f)
    _collector_facts(cfg, f)
    if f["controller"]:
        f["sacctmgr"] = _run([os.path.join(bin_dir, "sacctmgr"), "-i", "modify", "job", "where",
                              f"jobid={NO_SUCH_JOB}", "set", "AdminComment=gpuperf-doctor"])
    f["modes"] = _mode_facts(cfg)
    return f


def _daemon_facts(cfg: Any, f: Facts) -> None:
    from gpuperf.daemon import client

    try:
        reply = client.call(cfg, "ping", timeout_s=3.0)
        f["daemon"] = reply if reply.get("ok") else None
        f["daemon_error"] = None if reply.get("ok") else reply.get("error")
    except Exception as e:  # noqa: BLE001 - any failure to talk to it is the finding
        f["daemon"], f["daemon_error"] = None, str(e)


def _collector_facts(cfg: Any, f: Facts) -> None:
    from gpuperf.controller import transport

    try:
        transport.verify_credential(transport.credential(b"gpuperf-doctor", cfg.controller.munge_socket),
                                    cfg.controller.munge_socket)
    except Exception as e:  # noqa: BLE001
        f["munge_error"] = str(e)
    try:
        ep = transport.controller_endpoint(cfg)
    except Exception as e:  # noqa: BLE001
        f["collector"], f["collector_error"] = "?", str(e)
        return
    f["collector"] = ep
    host, _, port = ep[len("tcp://"):].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=3.0).close()
    except OSError as e:
        f["collector_error"] = str(e)


# command -------------------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``gpuperf doctor``."""
    p.add_argument("--role", choices=("auto", "node", "controller", "both"), default="auto",
                   help="what this host is (auto: a Slurm node if scontrol knows it, controller if SlurmctldHost)")
    p.add_argument("--node", metavar="NAME", help="Slurm node name (default $SLURMD_NODENAME or the short hostname)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")


def render(findings: list[Finding]) -> str:
    """One line per finding, faults first with their fix, and a verdict line."""
    order = {"fail": 0, "error": 1, "warn": 2, "ok": 3, "skip": 4}
    lines = []
    for x in sorted(findings, key=lambda x: (order[x.status], x.code)):
        lines.append(f"{x.status.upper():5} {x.code:13} {x.detail}" + (f"\n      fix: {x.fix}" if x.fix else ""))
    verdict = {0: "installation fine", 1: "FAULTS FOUND", 2: "could not check everything"}[exit_code(findings)]
    return "\n".join(lines + [verdict])


def run(args: argparse.Namespace) -> int:
    """Gather, check, print; exit 0 fine, 1 a fault, 2 could not check."""
    node = args.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    findings = diagnose(gather(args.role, node))
    print(json.dumps([asdict(x) for x in findings], indent=1) if args.json else render(findings))
    return exit_code(findings)
