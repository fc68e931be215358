"""Everything that talks to Slurm (scontrol, sinfo, sacct, sacctmgr) in one place.

Hooks get no PATH (FACTS.md), so binaries are called by absolute path from
``general.slurm_bin_dir``. Functions raise ``SlurmError`` with the command's stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass


class SlurmError(Exception):
    """A Slurm command failed; the message holds its stderr."""


_TASK_OR_COMPONENT = re.compile(r"[1-9]\d{0,9}[_+]\d{1,9}", re.ASCII)  # 8_3, 10+1: what sacctmgr's jobid= takes
_DETAIL = re.compile(r"\s+Nodes=(\S+) CPU_IDs=(\S+) Mem=\d+ GRES=")


def parse_job_cpu_ids(out: str, node: str | None) -> str | None:
    """The CPU_IDs for ``node`` in ``scontrol show job -d`` text, None when not listed; SlurmError when
    the text is ambiguous.

    The job's user writes JobName, Comment, WorkDir... and scontrol prints them raw, newlines included,
    so a job named ``x\\n     Nodes=n1 CPU_IDs=0-63 Mem=0 GRES=`` puts a line of Slurm's own form into
    the output. Slurm's detail lines are one run of consecutive lines (between ``JOB_GRES=`` and
    ``MinCPUsNode=``, both Slurm's), a user field's are another run, never adjacent to it: more than
    one run means a user's field holds one, and then none is believed."""
    runs: list[list[tuple[str, str]]] = []
    prev = False
    for line in out.splitlines():
        m = _DETAIL.match(line)
        if m and prev:
            runs[-1].append((m.group(1), m.group(2)))
        elif m:
            runs.append([(m.group(1), m.group(2))])
        prev = m is not None
    if len(runs) > 1:
        raise SlurmError(f"scontrol show job -d: {len(runs)} runs of Nodes=/CPU_IDs= lines (a user's field "
                         "holds one): the job's CPU ids are not read from it")
    found = runs[0] if runs else []
    for nodes, ids in found:
        if nodes == node:
            return ids
    # one detail line for the whole job: every node has the same ids
    return found[0][1] if len(found) == 1 else None


@dataclass
class Slurm:
    """A handle on the Slurm CLI in ``bin_dir``."""

    bin_dir: str = "/usr/bin"
    timeout_s: float = 10.0

    def run(self, tool: str, *args: str, timeout_s: float | None = None, input: str | None = None) -> str:
        """Run one Slurm tool (``input`` on its stdin); stdout on success, SlurmError otherwise."""
        exe = os.path.join(self.bin_dir, tool)
        try:
            p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s or self.timeout_s,
                               input=input)
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

    def set_admin_comments_db(self, items: list[tuple[int, str]], names: dict[int, str] | None = None) -> str:
        """Many finished jobs' AdminComments in one sacctmgr process (one command per stdin line).

        ``names``: raw id -> ``8_3`` / ``10+1`` for array tasks and het components, written by name:
        ``jobid=<raw id>`` selects every task of the array, or every component of the het job, whose id
        that raw id is too (an array's last task and a het job's component 0 run under it; seen on 22.05).
        sacctmgr goes on after a job the database does not know yet ("Nothing modified") and then
        exits 1, so the exit status says nothing about the others: check with ``admin_comments``."""
        names = names or {}

        def _where(j: int) -> str:
            name = names.get(j, "")
            return name if _TASK_OR_COMPONENT.fullmatch(name) else str(int(j))

        # the value is quoted: a line is split at spaces; our comments hold no quote (lowercase-safe)
        script = "".join(f'modify job where jobid={_where(j)} set AdminComment="{t}"\n' for j, t in items if '"' not in t)
        try:
            return self.run("sacctmgr", "-i", input=script, timeout_s=self.timeout_s + len(items) * 0.5)
        except SlurmError as e:
            if "Nothing modified" in str(e) or "didn't affect anything" in str(e):
                return str(e)
            raise

    def admin_comments(self, job_ids: list[int]) -> dict[int, str]:
        """job id -> AdminComment ('' when none) for every job sacct knows, in one sacct call."""
        return {j: r["AdminComment"] for j, r in self.sacct_jobs(job_ids, ("JobID", "AdminComment%65535")).items()}

    def sacct_jobs(self, job_ids: list[int], fields: tuple[str, ...]) -> dict[int, dict[str, str]]:
        """job id -> field -> value for every job of ``job_ids`` sacct knows, in one sacct call.

        ``fields`` starts with JobID; a width suffix (``AdminComment%65535``) is dropped from the key.
        The last field may hold '|' (it gets the rest of the line)."""
        if not job_ids:
            return {}
        # keyed by JobIDRaw: an array task's JobID is "8_3", and -j of an array's own id lists every task
        out = self.run("sacct", "-n", "-X", "-P", "-j", ",".join(str(int(j)) for j in job_ids),
                       "-o", ",".join(("JobIDRaw", *fields[1:])), timeout_s=self.timeout_s + len(job_ids) * 0.05)
        keys = [f.partition("%")[0] for f in fields]
        wanted = {int(j) for j in job_ids}
        got: dict[int, dict[str, str]] = {}
        for line in out.splitlines():
            vals = line.split("|", len(keys) - 1)
            if len(vals) == len(keys) and vals[0].isdigit() and int(vals[0]) in wanted:
                got[int(vals[0])] = dict(zip(keys, vals))
        return got

    def sacct_rows(self, fields: tuple[str, ...], since: str, user: str | None = None,
                   timeout_s: float = 120.0, job_ids: list[int] | None = None) -> list[dict[str, str]]:
        """Allocation lines of every job that ran since ``since`` (sacct's time syntax), one sacct call;
        of the raw ``job_ids`` instead, whenever they ran, when given.

        ``user`` None: the caller's own jobs (sacct's default); ``"ALL"``: everyone's (admins)."""
        # no -s: with a state filter 22.05's sacct lists nothing for a plain -S window
        window = ["-j", ",".join(str(int(j)) for j in job_ids)] if job_ids else ["-S", since]
        args = ["-n", "-X", "-P", *window, "-o", ",".join(fields)]
        if user == "ALL":
            args.append("-a")
        elif user:
            args += ["-u", user]
        out = self.run("sacct", *args, timeout_s=timeout_s)
        keys = [f.partition("%")[0] for f in fields]  # AdminComment%65535 -> AdminComment
        rows = []
        for line in out.splitlines():
            vals = line.split("|", len(keys) - 1)
            if len(vals) == len(keys):
                rows.append(dict(zip(keys, vals)))
        return rows

    def admin_comment(self, job_id: int) -> str:
        """The AdminComment sacct holds for a job ('' when none)."""
        # by raw id: -j of an array's own id lists every task, and the first line is another task's
        return self.sacct_job(job_id, ("JobID", "AdminComment%65535")).get("AdminComment", "")

    def job_cpu_ids(self, job_id: int, node: str | None) -> str | None:
        """The job's CPU_IDs on ``node`` from ``scontrol show job -d`` (Slurm's CPU ids), None when not listed."""
        return parse_job_cpu_ids(self.run("scontrol", "show", "job", "-d", str(job_id)), node)

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
        return ctld_address(cfg)

    def show_job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job -o`` of a job slurmctld still knows, as KEY -> value ({} when gone).

        Not for decisions: the job's user writes JobName, Comment, WorkDir... and a comment holding
        ``JobState=PENDING`` replaces the real key here (the line is split on spaces). ``job_state``
        asks for the fields themselves."""
        try:
            out = self.run("scontrol", "show", "job", "-o", str(job_id))
        except SlurmError:
            return {}
        return dict(tok.partition("=")[::2] for tok in out.split() if "=" in tok)

    def job_state(self, job_id: int) -> tuple[str, str] | None:
        """(state, reason) of a job slurmctld still knows, None when gone; no user-written text is parsed."""
        try:
            out = self.run("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T|%r")
        except SlurmError:
            return None
        for line in out.splitlines():
            state, sep, reason = line.partition("|")
            if sep:
                return state.strip(), reason.strip()
        return None

    def sacct_job(self, job_id: int, fields: tuple[str, ...] = ("JobID", "User", "UID", "State", "NodeList")) -> dict[str, str]:
        """One job's allocation line from sacct as field -> value ({} when sacct does not know it).

        ``job_id`` is the raw id; ``fields`` starts with JobID (its value: the name users know, ``8_3``);
        the last field may hold '|'; a width suffix (``AdminComment%65535``) is dropped from the key."""
        out = self.run("sacct", "-n", "-X", "-P", "-j", str(int(job_id)), "-o", ",".join(("JobIDRaw", *fields)))
        keys = [f.partition("%")[0] for f in fields]
        for line in out.splitlines():
            raw, _, rest = line.partition("|")
            vals = rest.split("|", len(keys) - 1)
            if raw.strip() == str(int(job_id)) and len(vals) == len(keys):
                return dict(zip(keys, vals))
        return {}

    def job_ids(self, ref: str) -> list[tuple[int, str, str]]:
        """(raw id, JobID as users write it, state) of every allocation a job reference names.

        ``ref`` as Slurm takes it (``8``, ``8_3``, ``10+1``, no step): sacct's lines, then squeue's for
        jobs accounting does not hold yet (a fresh job, a site without accounting). Pending array
        ranges (``8_[4-9]``) are kept as sacct prints them. SlurmError only when neither answers."""
        got: dict[int, tuple[int, str, str]] = {}
        errors = []
        for tool, args in (("sacct", ("-n", "-P", "-X", "-j", ref, "-o", "JobIDRaw,JobID,State")),
                           ("squeue", ("-h", "-t", "all", "-j", ref, "-o", "%A|%i|%T"))):
            try:
                out = self.run(tool, *args)
            except SlurmError as e:
                # squeue refuses a job it no longer holds ("Invalid job id specified"): not an error here
                errors.append(str(e))
                continue
            for line in out.splitlines():
                raw, sep, rest = line.strip().partition("|")
                shown, _, state = rest.partition("|")
                if sep and raw.isdigit() and shown:
                    # a pending range shares its raw id with the task that starts last, and for a moment
                    # at its end one tool names that task by the bare array id: the task's own name wins
                    old = got.get(int(raw), (0, "", ""))[1]
                    if not old or "[" in old or (old.isdigit() and not shown.isdigit() and "[" not in shown):
                        got[int(raw)] = (int(raw), shown, state.split()[0] if state.strip() else "")
        if not got and len(errors) == 2 and not any("Invalid job id" in e for e in errors):
            raise SlurmError("; ".join(errors))
        return sorted(got.values())

    def sacct_names(self, job_ids: list[int]) -> list[tuple[int, str]]:
        """(raw id, JobID as users write it: ``8_3``, ``10+1``) for raw ids, in one sacct call."""
        if not job_ids:
            return []
        out = self.run("sacct", "-n", "-P", "-X", "-j", ",".join(str(int(j)) for j in job_ids),
                       "-o", "JobIDRaw,JobID", timeout_s=self.timeout_s + len(job_ids) * 0.05)
        got = []
        for line in out.splitlines():
            raw, sep, shown = line.strip().partition("|")
            if sep and raw.isdigit() and shown:
                got.append((int(raw), shown))
        return got

    def node_cpu_layout(self, node: str) -> tuple[int, int, int] | None:
        """(sockets, cores per socket, threads per core) Slurm has for ``node``: the key to its abstract CPU ids."""
        out = self.run("scontrol", "show", "node", "-o", node)
        fields = dict(tok.partition("=")[::2] for tok in out.split() if "=" in tok)
        try:
            return int(fields["Sockets"]), int(fields["CoresPerSocket"]), int(fields["ThreadsPerCore"])
        except (KeyError, ValueError):
            return None


_UNSET = ("", "(null)")  # how scontrol shows a setting slurm.conf leaves out
_CTLD_KEY = re.compile(r"SlurmctldHost\[(\d+)\]")


def ctld_hosts(conf: dict[str, str]) -> list[tuple[str, str]]:
    """(name, address) of each slurmctld host, primary first, from ``scontrol show config`` as a dict.

    ``SlurmctldHost[i] = name(addr)`` or ``= name`` (the address is then the name, slurm.conf(5)); a
    Slurm before 17.11 shows ControlMachine/ControlAddr and BackupController/BackupAddr instead."""
    indexed = sorted((int(m.group(1)), v) for k, v in conf.items() if (m := _CTLD_KEY.fullmatch(k)))
    out = []
    for _, value in indexed:
        name, _, rest = (x.strip() for x in value.partition("("))
        if name:
            out.append((name, rest.rstrip(")").strip() or name))
    if out:
        return out
    for host_key, addr_key in (("ControlMachine", "ControlAddr"), ("BackupController", "BackupAddr")):
        name, addr = conf.get(host_key, ""), conf.get(addr_key, "")
        if name not in _UNSET:
            out.append((name, addr if addr not in _UNSET else name))
    return out


def ctld_address(conf: dict[str, str]) -> str:
    """Where nodes reach the active controller: SlurmctldAddr (a virtual address over the primary and
    backups), else the primary's address; SlurmError when ``scontrol show config`` names no controller."""
    addr = conf.get("SlurmctldAddr", "")
    if addr not in _UNSET:
        return addr
    hosts = ctld_hosts(conf)
    if not hosts:
        raise SlurmError("scontrol show config has no SlurmctldHost")
    return hosts[0][1]


def expand_hostlist(expr: str) -> list[str]:
    """A Slurm hostlist ('gpu[01-03,7],login1') as names, without calling scontrol (pure, per job).

    Slurm's syntax: comma-separated items, each with bracket groups of numbers and ranges (zero
    padding kept). No library for it ships with the runtime; tested against ``scontrol show hostnames``."""
    names: list[str] = []
    item, depth = "", 0
    for ch in expr + ",":
        if ch == "," and depth == 0:
            if item.strip():
                names += _expand_item(item.strip())
            item = ""
            continue
        depth += (ch == "[") - (ch == "]")
        item += ch
    return names


def _expand_item(item: str) -> list[str]:
    lo = item.find("[")
    if lo < 0:
        return [item]
    hi = item.index("]", lo)
    head, body, tail = item[:lo], item[lo + 1:hi], item[hi + 1:]
    out = []
    for part in body.split(","):
        a, sep, b = part.partition("-")
        nums = [a] if not sep else [str(n).zfill(len(a)) for n in range(int(a), int(b) + 1)]
        for n in nums:
            out += [head + n + rest for rest in _expand_item(tail)] if "[" in tail else [head + n + tail]
    return out


def sacct_json_release(doc: dict) -> str | None:
    """The Slurm release that wrote a ``sacct --json`` document ('22.05.8'), from its ``meta``: 22.05 names
    it ``Slurm`` with integer parts, 24.11 and 26.05 ``slurm`` with strings (tests/data/slurm/*)."""
    meta = doc.get("meta") if isinstance(doc, dict) else None
    v = ((meta or {}).get("slurm") or (meta or {}).get("Slurm") or {}).get("version") or {}
    try:
        return f"{int(v['major'])}.{int(v['minor']):02d}.{int(v['micro'])}"
    except (KeyError, TypeError, ValueError):
        return None


def parse_sacct_json(doc: dict) -> dict[int, dict[str, object]]:
    """job id -> ``{"admin_comment": str, "tres": {type or type/name: count}}`` of a ``sacct --json`` document
    of any release met (schemas dbv0.0.38 in 22.05, data_parser v0.0.42 in 24.11, v0.0.45 in 26.05): the
    fields gpuperf reads sit at the same paths in each; an empty name is None in 22.05 and '' later."""
    out: dict[int, dict[str, object]] = {}
    for job in doc.get("jobs") or [] if isinstance(doc, dict) else []:
        try:
            job_id = int(job["job_id"])
        except (KeyError, TypeError, ValueError):
            continue
        comment = (job.get("comment") or {}).get("administrator") or ""
        tres = {}
        for t in ((job.get("tres") or {}).get("allocated") or []):
            key = f"{t.get('type')}/{t['name']}" if t.get("name") else str(t.get("type"))
            if isinstance(t.get("count"), int):
                tres[key] = t["count"]
        out[job_id] = {"admin_comment": comment, "tres": tres}
    return out
