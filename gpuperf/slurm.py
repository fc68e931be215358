"""Everything that talks to Slurm (scontrol, sinfo, sacct, sacctmgr) in one place.

Hooks get no PATH (FACTS.md), so binaries are called by absolute path from
``general.slurm_bin_dir``. Functions raise ``SlurmError`` with the command's stderr.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass


class SlurmError(Exception):
    """A Slurm command failed; the message holds its stderr."""


@dataclass
class Slurm:
    """A handle on the Slurm CLI in ``bin_dir``."""

    bin_dir: str = "/usr/bin"
    timeout_s: float = 10.0

    def run(self, tool: str, *args: str, timeout_s: float | None = None) -> str:
        """Run one Slurm tool; stdout on success, SlurmError otherwise."""
        exe = os.path.join(self.bin_dir, tool)
        try:
            p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s or self.timeout_s)
        except FileNotFoundError:
            raise SlurmError(f"{exe} not found") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{tool} {' '.join(args)} timed out") from None
        if p.returncode != 0:
            raise SlurmError(f"{tool} {' '.join(args)}: {p.stderr.strip() or p.stdout.strip() or f'exit {p.returncode}'}")
        return p.stdout

    # nodes -------------------------------------------------------------------------------
    def drain(self, node: str, reason: str) -> None:
        """Drain a node with a reason an admin can act on."""
        self.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    def resume(self, node: str) -> None:
        """Return a drained node to service."""
        self.run("scontrol", "update", f"NodeName={node}", "State=RESUME")

    def node_reasons(self) -> dict[str, tuple[str, str]]:
        """Every node -> (state, reason) as sinfo reports them (reason '' when none)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%T|%E")
        nodes: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            parts = line.split("|", 2)
            if len(parts) == 3:
                reason = parts[2].strip()
                nodes[parts[0]] = (parts[1].strip(), "" if reason == "none" else reason)
        return nodes

    # jobs --------------------------------------------------------------------------------
    def requeue_hold(self, job_id: int) -> None:
        """Requeue a job and hold it, so it does not start again on a bad node."""
        self.run("scontrol", "requeuehold", str(job_id))

    def requeue(self, job_id: int) -> None:
        """Requeue a job without a hold (works from its Prolog: the job then never starts on this node)."""
        self.run("scontrol", "requeue", str(job_id))

    def eligible_now(self, job_id: int) -> None:
        """Clear the begin time Slurm puts on a requeued job (now + 120 s in 22.05), so another node takes it now."""
        self.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")

    def set_admin_comment_running(self, job_id: int, text: str) -> None:
        """AdminComment of a job that is still running (scontrol refuses finished jobs)."""
        self.run("scontrol", "update", f"JobId={job_id}", f"AdminComment={text}")

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        """AdminComment in the accounting database, for finished jobs (22.05 lowercases it)."""
        self.run("sacctmgr", "-i", "modify", "job", "where", f"jobid={job_id}", "set", f"AdminComment={text}")

    def admin_comment(self, job_id: int) -> str:
        """The AdminComment sacct holds for a job ('' when none)."""
        out = self.run("sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "AdminComment%65535")
        lines = [l for l in out.splitlines() if l.strip()]
        return lines[0] if lines else ""

    def job_cpu_ids(self, job_id: int, node: str | None) -> str | None:
        """The job's CPU_IDs on ``node`` from ``scontrol show job -d`` (Slurm's CPU ids), None when not listed."""
        out = self.run("scontrol", "show", "job", "-d", str(job_id))
        found: list[tuple[str, str]] = []
        for line in out.splitlines():
            fields = dict(tok.partition("=")[::2] for tok in line.split() if "=" in tok)
            if "Nodes" in fields and "CPU_IDs" in fields:
                found.append((fields["Nodes"], fields["CPU_IDs"]))
        for nodes, ids in found:
            if nodes == node:
                return ids
        # one detail line for the whole job: every node has the same ids
        return found[0][1] if len(found) == 1 else None

    def hostnames(self, nodelist: str) -> list[str]:
        """A Slurm hostlist expression ('n[1-3]') as node names."""
        return [h for h in self.run("scontrol", "show", "hostnames", nodelist).split() if h]

    def ctld_host(self) -> str:
        """The controller's address: SlurmctldAddr, else the address (or name) of SlurmctldHost[0]."""
        cfg = {}
        for line in self.run("scontrol", "show", "config").splitlines():
            k, sep, v = line.partition("=")
            if sep:
                cfg[k.strip()] = v.strip()
        addr = cfg.get("SlurmctldAddr", "")
        if addr and addr != "(null)":
            return addr
        host = cfg.get("SlurmctldHost[0]", "")
        if "(" in host:
            return host.split("(", 1)[1].rstrip(")")
        if not host:
            raise SlurmError("scontrol show config has no SlurmctldHost")
        return host

    def show_job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job -o`` of a job slurmctld still knows, as KEY -> value ({} when gone)."""
        try:
            out = self.run("scontrol", "show", "job", "-o", str(job_id))
        except SlurmError:
            return {}
        return dict(tok.partition("=")[::2] for tok in out.split() if "=" in tok)

    def sacct_job(self, job_id: int, fields: tuple[str, ...] = ("JobID", "User", "UID", "State", "NodeList")) -> dict[str, str]:
        """One job's allocation line from sacct as field -> value ({} when sacct does not know it)."""
        out = self.run("sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", ",".join(fields))
        for line in out.splitlines():
            vals = line.split("|")
            if len(vals) == len(fields):
                return dict(zip(fields, vals))
        return {}

    def node_cpu_layout(self, node: str) -> tuple[int, int, int] | None:
        """(sockets, cores per socket, threads per core) Slurm has for ``node``: the key to its abstract CPU ids."""
        out = self.run("scontrol", "show", "node", "-o", node)
        fields = dict(tok.partition("=")[::2] for tok in out.split() if "=" in tok)
        try:
            return int(fields["Sockets"]), int(fields["CoresPerSocket"]), int(fields["ThreadsPerCore"])
        except (KeyError, ValueError):
            return None
