"""What one test-cluster instance looks like on disk and on the network, and its config files (pure).

Everything an instance owns is derived from its name: the directory, the ports, the first job
id (so two instances never share a job id, which cgroup v1 paths and gpuperf's state assume),
the private subnet of a multi-node instance. Nothing here touches the system.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuperf.files import config as gpuperf_config

ROOT = Path("/tmp")
# GPUPERF_PREFIX: where tests/run.sh installed gpuperf (default /opt/gpuperf; parallel checkouts use their own)
PREFIX = Path(os.environ.get("GPUPERF_PREFIX", "/opt/gpuperf"))
VENV_BIN = PREFIX / "venv" / "bin"
# the hooks' stable paths that slurm.conf.snippet names (packages and install.sh make them); older
# installs of a checkout have only the venv's
HOOK_BIN = PREFIX / "bin" if (PREFIX / "bin" / "gpuperf-prolog").exists() else VENV_BIN
PROLOG_EPILOG_TIMEOUT_S = 120  # the snippet's value (tests/cluster/test_slurmconf.py keeps them equal)
HOOKS = {  # wrapper name in <dir>/hooks -> gpuperf entry point
    "prolog": "gpuperf-prolog",
    "epilog": "gpuperf-epilog",
    "taskprolog": "gpuperf-taskprolog",
    "epilog-slurmctld": "gpuperf-epilog-slurmctld",
}


@dataclass(frozen=True)
class Node:
    """One slurmd of an instance."""

    name: str
    addr: str
    netns: str | None  # network namespace it runs in; None: the host's (loopback)
    spool: Path
    devdir: Path  # its fake /dev/nvidiaN character devices


@dataclass(frozen=True)
class Layout:
    """Where everything of one instance lives; derived from its name only."""

    name: str
    dir: Path
    hostname: str
    cluster_name: str
    ctld_addr: str
    ctld_port: int
    slurmd_port: int
    dbd_port: int
    metrics_port: int  # gpuperf daemon's /metrics (per instance: several run side by side)
    collector_port: int  # gpuperf controller's collector
    first_job_id: int
    nodes: tuple[Node, ...]
    gpus: int
    cpus: int
    mem_mb: int
    cgroup: bool  # proctrack/task cgroup plugins (single host only: cgroup v1 paths are per job id)
    subnet: str | None  # "10.77.K" for namespaced nodes
    bridge: str | None
    node_root: str
    extra_conf: str = ""
    gpu_files: tuple[str, ...] = ()  # real GPUs (/dev/nvidiaN, one per gres); empty: fake char devices
    cgroup_v2: bool = False  # the unified hierarchy (cgroup/v2 plugin, no systemd) instead of v1
    plugin_dir: str = ""  # Slurm unpacked in a prefix (dpkg -x): its plugins; '' = Slurm's built-in path
    slurm_bin: str = "/usr/bin"  # where sbatch, scontrol, sacct... are (gpuperf's slurm_bin_dir)
    lib_path: str = ""  # prefix mode: the unpacked Slurm's libraries, for the commands the root hooks run

    @property
    def real_gpus(self) -> bool:
        return bool(self.gpu_files)

    @property
    def slurm_conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def gpuperf_conf(self) -> Path:
        return self.dir / "gpuperf.toml"

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    @property
    def state_dir(self) -> Path:
        return self.dir / "state"

    @property
    def log_dir(self) -> Path:
        return self.dir / "log"

    @property
    def pid_dir(self) -> Path:
        return self.dir / "pids"

    @property
    def db_dir(self) -> Path:
        return self.dir / "db"

    @property
    def db_run(self) -> Path:
        return self.dir / "dbrun"

    @property
    def db_socket(self) -> Path:
        return self.db_run / "mysqld.sock"

    @property
    def hook_dir(self) -> Path:
        return self.dir / "hooks"

    @property
    def out_dir(self) -> Path:
        return self.dir / "out"


def check_name(name: str) -> str:
    """Instance names are short words: letters, digits, '-' and '_' (they end up in paths and node names)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}", name):
        raise ValueError(f"bad cluster instance name {name!r}: use 1-32 letters, digits, '-', '_'")
    return name


def make_layout(name: str, hostname: str, nodes: int = 1, gpus: int = 4, cpus: int = 16, mem_mb: int = 16000,
                node_root: str = "", extra_conf: str = "", root: Path = ROOT, cgroup_v1: bool = True,
                cgroup_v2: bool = False, gpu_files: tuple[str, ...] = (), plugin_dir: str = "",
                slurm_bin: str = "/usr/bin", lib_path: str = "") -> Layout:
    """The layout of instance ``name`` (pure: same name, same ports and paths).

    ``cgroup_v1`` / ``cgroup_v2``: the machine mounts cgroup v1 controllers / a writable unified
    hierarchy (Slurm's cgroup plugins are used on a single node only). ``gpu_files``: the real GPUs'
    device files, one gres each (``gpus`` is then their number); ``plugin_dir``/``slurm_bin``: Slurm
    unpacked in a prefix.
    """
    if gpu_files:
        if nodes != 1:
            raise ValueError("real GPUs: one node (the machine's own)")
        gpus = len(gpu_files)
    check_name(name)
    if not 1 <= nodes <= 8:
        raise ValueError(f"nodes must be 1..8, got {nodes}")
    if not 1 <= gpus <= 16:
        raise ValueError(f"gpus must be 1..16, got {gpus}")
    h = zlib.crc32(name.encode())
    word = re.sub(r"[^a-z0-9]", "", name.lower()) or "c"
    d = root / f"gpuperf-slurm-{name}"
    # 8 ports per instance, below the ephemeral range (32768+) so a client's source port never takes ours
    base = 20000 + (h % 1500) * 8
    multi = nodes > 1
    subnet = f"10.77.{h % 250 + 1}" if multi else None
    node_list = []
    for i in range(1, nodes + 1):
        nname = f"{word}n{i}"
        node_list.append(Node(
            name=nname,
            addr=f"{subnet}.{i + 1}" if multi else "127.0.0.1",
            netns=f"gpuperf-{name}-n{i}" if multi else None,
            spool=d / "spool" / nname,
            devdir=d / "dev" / nname,
        ))
    return Layout(
        name=name, dir=d, hostname=hostname, cluster_name=f"gp{word}"[:30],
        ctld_addr=f"{subnet}.1" if multi else "127.0.0.1",
        ctld_port=base, slurmd_port=base + 1, dbd_port=base + 2, metrics_port=base + 3, collector_port=base + 4,
        first_job_id=1000 + (h % 9000) * 1000,
        nodes=tuple(node_list), gpus=gpus, cpus=cpus, mem_mb=mem_mb,
        cgroup=(cgroup_v1 or cgroup_v2) and not multi, cgroup_v2=cgroup_v2 and not cgroup_v1,
        subnet=subnet, bridge=f"gpbr{h % 100000:05d}" if multi else None,
        node_root=node_root, extra_conf=extra_conf, gpu_files=tuple(gpu_files), plugin_dir=plugin_dir,
        slurm_bin=slurm_bin, lib_path=lib_path,
    )


def _topology(cpus: int, real: bool = False) -> str:
    # fake nodes: 2 sockets (the recorded nodes'); a real node: one socket (the GPU machines' one NUMA node;
    # gpuperf reads the real topology itself, Slurm only needs CPUs it can bind)
    sockets = 2 if cpus % 2 == 0 and cpus >= 2 and not real else 1
    return f"CPUs={cpus} Boards=1 SocketsPerBoard={sockets} CoresPerSocket={cpus // sockets} ThreadsPerCore=1"


def slurm_conf(l: Layout) -> str:
    """slurm.conf of the instance (FACTS.md: the lines that mattered on bookworm's 22.05)."""
    d = l.dir
    hooks = l.hook_dir
    if l.cgroup:
        plugins = ["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity"]
    else:
        # several slurmd of one job on one host would share cgroup v1 paths (.../job_<id>)
        plugins = ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity"]
    lines = [
        "# generated by tests/cluster/slurmconf.py; rewritten by SlurmCluster.up()",
        f"ClusterName={l.cluster_name}",
        f"SlurmctldHost={l.hostname}({l.ctld_addr})",
        "SlurmUser=root",
        f"SlurmctldPort={l.ctld_port}",
        f"SlurmdPort={l.slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"StateSaveLocation={d}/spool/ctld",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={l.pid_dir}/slurmctld.pid",
        f"SlurmdPidFile={l.pid_dir}/slurmd-%n.pid",
        f"SlurmctldLogFile={l.log_dir}/slurmctld.log",
        f"SlurmdLogFile={l.log_dir}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"PlugStackConfig={d}/plugstack.conf",
        "SlurmdParameters=config_overrides",
        *([f"PluginDir={l.plugin_dir}"] if l.plugin_dir else []),
        *plugins,
        "PrologFlags=Alloc,Contain",
        # as packaging/slurm.conf.snippet: gpuperf's watchdog bounds (60 s) end its hooks first, with margin
        f"PrologEpilogTimeout={PROLOG_EPILOG_TIMEOUT_S}",
        f"Prolog={hooks}/prolog",
        f"Epilog={hooks}/epilog",
        f"TaskProlog={hooks}/taskprolog",
        f"EpilogSlurmctld={hooks}/epilog-slurmctld",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=localhost",
        f"AccountingStoragePort={l.dbd_port}",
        "AccountingStorageTRES=gres/gpu",
        "AccountingStorageEnforce=associations",
        # with Slurm's cgroups, account through them too (the cpuacct hierarchy gpuperf reads job CPU from)
        f"JobAcctGatherType=jobacct_gather/{'cgroup' if l.cgroup else 'linux'}",
        "JobAcctGatherFrequency=30",
        "JobCompType=jobcomp/none",
        f"FirstJobId={l.first_job_id}",
        "MinJobAge=300",
        "KillWait=5",
        "InactiveLimit=0",
        "SlurmdTimeout=120",
        "MessageTimeout=10",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        "DebugFlags=NO_CONF_HASH",
    ]
    for n in l.nodes:
        lines.append(f"NodeName={n.name} NodeAddr={n.addr} NodeHostname={n.name} {_topology(l.cpus, l.real_gpus)} "
                     f"RealMemory={l.mem_mb} Gres=gpu:{l.gpus} State=UNKNOWN")
    lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    if l.extra_conf:
        lines.append(l.extra_conf.rstrip("\n"))
    return "\n".join(lines) + "\n"


def gres_conf(l: Layout) -> str:
    """gres.conf: fake GPUs are character devices (plain files give no CUDA_VISIBLE_DEVICES, FACTS.md);
    real ones their /dev/nvidiaN, one line each (a range would assume they are numbered without gaps)."""
    out = ["AutoDetect=off"]
    if l.gpu_files:
        return "\n".join(out + [f"NodeName={l.nodes[0].name} Name=gpu File={f}" for f in l.gpu_files]) + "\n"
    last = l.gpus - 1
    for n in l.nodes:
        files = f"{n.devdir}/nvidia[0-{last}]" if last else f"{n.devdir}/nvidia0"
        out.append(f"NodeName={n.name} Name=gpu File={files}")
    return "\n".join(out) + "\n"


def cgroup_conf(l: Layout) -> str:
    """cgroup.conf: v1 hierarchy here (hybrid mount), devices constrained to the job's GPUs; v2 (the GPU
    machines, no systemd): IgnoreSystemd (slurmd makes its own scope), cores constrained too."""
    if l.cgroup_v2:
        return ("CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\nConstrainDevices=yes\n"
                "ConstrainCores=yes\nConstrainRAMSpace=no\n")
    return ("CgroupPlugin=cgroup/v1\nCgroupAutomount=yes\nConstrainDevices=yes\n"
            "ConstrainCores=no\nConstrainRAMSpace=no\n")


def slurmdbd_conf(l: Layout) -> str:
    """slurmdbd.conf (mode 600): root over the instance's own MariaDB socket (unix_socket auth)."""
    return "\n".join([
        "DbdHost=localhost",
        f"DbdPort={l.dbd_port}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        f"LogFile={l.log_dir}/slurmdbd.log",
        f"PidFile={l.pid_dir}/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        "StorageUser=root",
        "StorageLoc=slurm_acct_db",
        "DebugLevel=info",
        *([f"PluginDir={l.plugin_dir}"] if l.plugin_dir else []),
    ]) + "\n"


NODE_HOOKS = ("prolog", "epilog", "taskprolog")


def hook_script(l: Layout, hook: str) -> str:
    """A wrapper Slurm runs as a hook: hooks get no PATH, so everything is absolute.

    On a multi-node instance every node hook reads its node's config (own run_dir and daemon
    socket), because all the nodes share this machine's file system.
    """
    lines = ["#!/bin/sh", f"# gpuperf {hook} hook of test cluster {l.name} (generated)",
             f"GPUPERF_CONFIG={l.gpuperf_conf}"]
    if len(l.nodes) > 1 and hook in NODE_HOOKS:
        node_conf = f"{l.dir}/nodes/$SLURMD_NODENAME/gpuperf.toml"
        lines.append(f'[ -n "$SLURMD_NODENAME" ] && [ -f "{node_conf}" ] && GPUPERF_CONFIG="{node_conf}"')
    if l.lib_path and hook != "taskprolog":
        # slurmd gives a hook no LD_LIBRARY_PATH, and an unpacked Slurm's sinfo/scontrol need one (the
        # prolog drains through them); a TaskProlog must see the task's own (it finds the job's NCCL there)
        lines.append(f"LD_LIBRARY_PATH={l.lib_path}; export LD_LIBRARY_PATH")
    lines += ["export GPUPERF_CONFIG", f"export SLURM_CONF={l.slurm_conf}", f'exec {HOOK_BIN / HOOKS[hook]} "$@"']
    return "\n".join(lines) + "\n"


def node_gpuperf_conf(l: Layout, node: str) -> Path:
    """The gpuperf config a node's hooks read (the instance's own on a single node)."""
    return l.gpuperf_conf if len(l.nodes) == 1 else l.dir / "nodes" / node / "gpuperf.toml"


def gpuperf_defaults(l: Layout) -> dict[str, dict[str, Any]]:
    """The instance's gpuperf config: every path inside the instance directory, ports of its own."""
    return {
        "general": {
            "run_dir": str(l.run_dir),
            "state_dir": str(l.state_dir),
            "log_file": str(l.log_dir / "gpuperf.log"),
            "slurm_bin_dir": l.slurm_bin,
            "node_root": l.node_root,
        },
        # job labels on /metrics: the Prometheus tests join on them, as the shipped dashboard does
        "daemon": {"socket_dir": str(l.run_dir / "daemon"), "metrics_port": l.metrics_port, "metrics_job_labels": True},
        "controller": {"store": str(l.state_dir / "cluster.sqlite"), "port": l.collector_port,
                       "address": f"{l.ctld_addr}:{l.collector_port}",
                       # the job stays COMPLETING while EpilogSlurmctld waits: keep test jobs quick
                       "merge_wait_s": 2.0,
                       # tests wait for a job's final queue state: no re-reading after the write, except in
                       # tests/integration/test_coexist_slurm.py, which sets it to test another tool's later write
                       "admin_comment_recheck_s": 0.0},
    }


def for_node(data: dict[str, dict[str, Any]], node: str) -> dict[str, dict[str, Any]]:
    """A config as one node of a multi-node instance reads it: its run, state and socket dirs are its own."""
    defaults = gpuperf_config.defaults()
    out = {s: dict(v) if isinstance(v, dict) else v for s, v in data.items()}
    for section, key in (("general", "run_dir"), ("general", "state_dir"), ("daemon", "socket_dir")):
        table = out.setdefault(section, {})
        if isinstance(table, dict):
            table[key] = f"{table.get(key, defaults.data[section][key])}/{node}"
    return out


def to_toml(data: dict[str, dict[str, Any]]) -> str:
    """Render sections of scalars, lists, sub-tables and arrays of tables as TOML."""
    out: list[str] = []
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ValueError(f"TOML top level: [{section}] must be a table")
        _table(out, section, values, "[{}]")
    return "\n".join(out) + "\n"


def _table(out: list[str], name: str, values: dict[str, Any], header: str) -> None:
    out.append(header.format(name))
    nested = []
    for k, v in values.items():
        if isinstance(v, dict):
            nested.append((k, v, "[{}]"))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            nested.extend((k, x, "[[{}]]") for x in v)
        else:
            out.append(f"{k} = {_value(v)}")
    for k, v, h in nested:
        _table(out, f"{name}.{k}", v, h)


def _value(v: Any) -> str:
    from gpuperf.files import tomlw

    return tomlw.value(v)
