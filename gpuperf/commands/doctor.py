"""``gpuperf doctor``: is this host's gpuperf installation wired in right? One finding per check, each with
the fix in one line; exit 0 fine (warnings allowed), 1 a fault found, 2 could not check (like ``gpuperf check``).

Facts are gathered once (``gather``: Slurm's config, plugstack, daemon, collector, munge, sacctmgr, file
modes, the controller's clock); each check is a small pure function of them (``doctor_checks.CHECKS``), so
the tests drive the checks with planted facts and the real cluster with planted faults.
"""

from __future__ import annotations

import argparse
import glob
import grp
import json
import os
import re
import socket
import stat
import subprocess
import time
from dataclasses import asdict
from typing import Any

from gpuperf.hookbase import watchdog
from gpuperf.commands.check import exit_code
from gpuperf.access.slurm import ctld_hosts
from gpuperf.commands.doctor_checks import (CTLD_HOOK_KEYS, HOOK_KEYS, NO_SUCH_JOB, Facts, Finding,  # noqa: F401
                                            diagnose, spank_plugin_paths)

# parsing: pure ------------------------------------------------------------------------------------
_INDEXED = re.compile(r"([A-Za-z]+)\[\d+\]")


def parse_key_values(text: str) -> dict[str, str]:
    """``scontrol show config`` lines 'Key = value' -> dict. From 23.02 a hook that may name several
    programs prints one line each, ``Prolog[0] = ...`` (24.11, 26.05: tests/data/slurm): joined under
    ``Prolog`` with commas, as slurm.conf writes them (22.05 prints ``Prolog = ...``). ``SlurmctldHost[0]``
    stays as it is (``ctld_hosts`` reads it)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        k = k.strip()
        if not (sep and k and " " not in k):
            continue
        m = _INDEXED.fullmatch(k)
        if m and m.group(1) != "SlurmctldHost":
            key = m.group(1)
            out[key] = f"{out[key]},{v.strip()}" if out.get(key) else v.strip()
        out[k] = v.strip()
    return out


UNSET = ("", "(null)")  # how ``scontrol show config`` prints a setting slurm.conf leaves out
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
# PluginDir unset: Slurm's compiled-in directory, which scontrol shows in its place; should it show none,
# the directories distributions compile in (Debian's, RPM's, a source build's /usr/local prefix)
DEFAULT_PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm", "/usr/local/lib/slurm")
MAX_INCLUDE_DEPTH = 8  # plugstack.conf include nesting followed; Slurm has no bound, a loop would never end


def setting(sc: dict[str, str], key: str) -> str | None:
    """A slurm.conf setting as ``scontrol show config`` shows it; None when unset."""
    value = sc.get(key, "")
    return None if value in UNSET else value


def plugstack_path(sc: dict[str, str]) -> tuple[str, bool]:
    """(the plugstack.conf Slurm reads, whether it is Slurm's default): PlugStackConfig, else
    ``plugstack.conf`` in the directory of slurm.conf (slurm.conf(5), PlugStackConfig)."""
    explicit = setting(sc, "PlugStackConfig")
    if explicit:
        return explicit, False
    conf = setting(sc, "SLURM_CONF") or DEFAULT_SLURM_CONF
    return os.path.join(os.path.dirname(conf), "plugstack.conf"), True


def spank_candidates(name: str, sc: dict[str, str]) -> list[str]:
    """Where Slurm looks for a plugstack line's plugin: the path itself when absolute, else each
    directory of PluginDir (slurm.conf(5): a colon-separated list) in turn (spank(7))."""
    if name.startswith("/"):
        return [name]
    plugin_dir = setting(sc, "PluginDir")
    dirs = [d for d in plugin_dir.split(":") if d] if plugin_dir else list(DEFAULT_PLUGIN_DIRS)
    return [os.path.join(d, name) for d in dirs]


def roles(role: str, sc: dict[str, str] | None, hostnames: set[str], node_known: bool) -> tuple[bool, bool]:
    """(controller, node) for ``--role``: auto makes a host the controller when it is any SlurmctldHost
    (the primary or a backup, which runs EpilogSlurmctld once it takes over), a node when scontrol knows it."""
    ctld = {name for name, _ in ctld_hosts(sc or {})}
    controller = role in ("controller", "both") or (role == "auto" and bool(ctld & hostnames))
    node = role in ("node", "both") or (role == "auto" and node_known)
    return controller, node


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


def read_plugstack(path: str, depth: int = 0) -> list[str]:
    """plugstack.conf's lines with each ``include <glob>`` line replaced by the files it names, as spank(7)
    reads them: a relative glob from the including file's directory, matches in sorted order, nested
    includes followed (MAX_INCLUDE_DEPTH levels); an unreadable file reads as empty, as Slurm's missing one."""
    try:
        lines = open(path).read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for ln in lines:
        bits = ln.split("#", 1)[0].split()
        if bits[:1] != ["include"]:
            out.append(ln)
        elif len(bits) >= 2 and depth < MAX_INCLUDE_DEPTH:
            pattern = bits[1] if bits[1].startswith("/") else os.path.join(os.path.dirname(path), bits[1])
            for inc in sorted(glob.glob(pattern)):
                out += read_plugstack(inc, depth + 1)
    return out


def _mode_facts(cfg: Any) -> dict[str, tuple[int, bool, str, str]]:
    from gpuperf.daemon.startup import store_path
    from gpuperf.controller.clusterstore import default_path

    paths = {cfg.general.state_dir: "private", store_path(cfg): "private", default_path(cfg): "private",
             cfg.daemon.socket_dir: "root-only", cfg.general.run_dir: "shared"}
    for store in (store_path(cfg), default_path(cfg)):
        for suffix in ("-wal", "-shm"):
            paths[store + suffix] = "private"
    out = {}
    for p, role in paths.items():
        try:
            st = os.stat(p)
        except OSError:
            continue
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        out[p] = (stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode), role, group)
    return out


def _state_group_facts(cfg: Any, f: Facts) -> None:
    from gpuperf.files import statefiles

    f["state_group"] = cfg.general.state_group
    if cfg.general.state_group:
        try:
            statefiles.group_id(cfg.general.state_group)
        except LookupError:
            f["state_group_exists"] = False


def gather(role: str, node_name: str) -> Facts:
    """Read everything the checks need from this host (Slurm, gpuperf's config, daemon, collector, munge)."""
    f: Facts = {"node_name": node_name}
    cfg = config_facts(f)
    bin_dir = cfg.general.slurm_bin_dir
    rc, text = _run([os.path.join(bin_dir, "scontrol"), "show", "config"])
    sc = parse_key_values(text) if rc == 0 else None
    f["slurm"], f["slurm_error"] = sc, None if rc == 0 else text.strip()[:200]
    rc_n, show_node = _run([os.path.join(bin_dir, "scontrol"), "show", "node", node_name])
    f["node_known"] = rc_n == 0 and "NodeName=" in show_node
    # slurmctld matches SlurmctldHost against this host's name as gethostname() gives it and its short form
    here = {socket.gethostname(), socket.gethostname().split(".")[0]}
    f["controller"], f["node"] = roles(role, sc, here, f["node_known"])
    if sc is not None:
        hooks = [p for k in HOOK_KEYS + CTLD_HOOK_KEYS for p in sc.get(k, "").split(",") if p not in ("", "(null)")]
        f["executable"] = {p: os.path.isfile(p) and os.access(p, os.X_OK) for p in hooks}
        f["compiled"] = {p: _is_elf(p) for p in hooks}
        f["plugstack_path"], f["plugstack_default"] = plugstack_path(sc)
        f["plugstack_lines"] = read_plugstack(f["plugstack_path"])
        named = spank_plugin_paths(f["plugstack_lines"])
        f["spank_exists"] = {p: any(os.path.isfile(x) for x in spank_candidates(p, sc)) for p in named}
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
    _collector_facts(cfg, f, sc)
    if f["controller"]:
        f["series_keep_days"] = cfg.controller.series_keep_days
        f["sacctmgr"] = _run([os.path.join(bin_dir, "sacctmgr"), "-i", "modify", "job", "where",
                              f"jobid={NO_SUCH_JOB}", "set", "AdminComment=gpuperf-doctor"])
        _slurm_gpu_facts(cfg, f)
    f["modes"] = _mode_facts(cfg)
    _state_group_facts(cfg, f)
    f["watchdog_s"] = max(watchdog.bound_of(cfg, "prolog") or 0, watchdog.bound_of(cfg, "epilog") or 0) or None
    return f


def config_facts(f: Facts) -> Any:
    """gpuperf's config as every gpuperf process reads it ($GPUPERF_CONFIG, else /etc/gpuperf/config.toml):
    its source or error into ``f``; returns it, or defaults with the valid [general] keys when broken."""
    from gpuperf.files import config as config_mod

    try:
        cfg = config_mod.load()
        f["config_source"] = cfg.source
    except config_mod.ConfigError as e:
        f["config_error"] = str(e)
        cfg = config_mod.load_or_defaults()
    return cfg


def _daemon_facts(cfg: Any, f: Facts) -> None:
    from gpuperf.daemon import client

    try:
        reply = client.call(cfg, "ping", timeout_s=3.0)
        f["daemon"] = reply if reply.get("ok") else None
        f["daemon_error"] = None if reply.get("ok") else reply.get("error")
    except Exception as e:  # noqa: BLE001 - any failure to talk to it is the finding
        f["daemon"], f["daemon_error"] = None, str(e)


SLURM_GPU_JOBS = 20  # the controller's latest jobs compared with Slurm's own GPU figures (one sacct call each)


def _slurm_gpu_facts(cfg: Any, f: Facts) -> None:
    """Slurm's gres/gpuutil and gres/gpumem beside gpuperf's, for the controller store's latest GPU jobs:
    job id -> disagreement (None: sampling explains the gap); absent where Slurm records none."""
    from gpuperf.access.slurm import Slurm
    from gpuperf.controller.clusterstore import ClusterStore, default_path
    from gpuperf.report import slurmtres

    try:
        with ClusterStore(default_path(cfg), readonly=True) as st:
            rows = st.jobs(sort="end", limit=SLURM_GPU_JOBS)
            summaries = {int(r["job_id"]): st.job(int(r["job_id"])) for r in rows}
    except Exception:  # noqa: BLE001 - no store here (a node, or no job yet): nothing to compare
        return
    slurm = Slurm(cfg.general.slurm_bin_dir)
    found = {}
    for job_id, s in summaries.items():
        if not s:
            continue
        got = slurmtres.read(slurm, job_id, int((s.get("job") or {}).get("gpu_count") or 0))
        if got is not None:
            found[job_id] = slurmtres.disagreement(s, got)
    f["slurm_gpu"] = found


def _collector_facts(cfg: Any, f: Facts, sc: dict[str, str] | None) -> None:
    from gpuperf.controller import transport

    try:
        transport.verify_credential(transport.credential(b"gpuperf-doctor", cfg.controller.munge_socket),
                                    cfg.controller.munge_socket)
    except Exception as e:  # noqa: BLE001
        f["munge_error"] = str(e)
    f["collector_default"] = not cfg.controller.address
    try:
        ep = transport.controller_endpoint(cfg, sc)
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
                   help="what this host is (auto: a Slurm node if scontrol knows it, controller if any SlurmctldHost)")
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


def _is_elf(path: str) -> bool:
    """The file (links followed) is a compiled program, not a script."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False
