"""The env plan as data, and what each task decides from it: the part of the env policy a TaskProlog needs.

The node's policy (``gpuperf.env.policy``: topology + job shape + admin rules) runs in the prolog and
leaves an ``EnvPlan`` in the job's ``env.json``; every task then finishes it here (per-task values,
the NCCL the task will load, the user's own variables win) and exports it with a marker. Split from
the policy so the TaskProlog, run in every task, imports only this (``tests/unit/test_hook_imports.py``).
Pure: no I/O.
"""

from __future__ import annotations

import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

SCHEMA = "gpuperf.env.v1"
# in the job's directory, both the job user's: the prolog's plan, and one record per step of what its
# TaskProlog exported (``gpuperf.env.report`` reads them back for the job's report)
CACHE = "env.json"
TASK_DIR = "env"
# exported with the variables: NAME:crc32 of each value gpuperf set, so a later step (srun inside a
# batch script, gpuperf-run inside a task) can tell gpuperf's values from the user's own
MARKER = "GPUPERF_ENV_SET"
USER_WINS = "the job set it: the user's value wins"
# other names of the same setting: a user who set one of them has decided it
ALIASES = {"PYTORCH_CUDA_ALLOC_CONF": ("PYTORCH_ALLOC_CONF",)}
AFFINITY_OMP_MARKER = "GPUPERF_OMP"  # the affinity SPANK plugin's record of the OpenMP values it set


# Workload decisions and switches that can disable a transport: an admin rule needs ``force = true``
# to set them (the reason says what goes wrong). The defaults set none of them, except
# NCCL_NET_GDR_LEVEL=PXB, NCCL's own default, where the topology warrants it (see _gdr).
FORCE_REQUIRED: dict[str, str] = {
    "NCCL_ALGO": "forcing an algorithm loses bandwidth at other sizes (Tree: about -30% at >= 32 MiB on 4xH200)",
    "NCCL_PROTO": "forcing a protocol helps some sizes and hurts others",
    "NCCL_P2P_LEVEL": "a wrong level disables NVLink/PCIe peer-to-peer (LOC disables NVLink)",
    "NCCL_P2P_DISABLE": "disables GPU peer-to-peer, NVLink included",
    "NCCL_SHM_DISABLE": "disables shared-memory transport",
    "NCCL_IB_DISABLE": "disables InfiniBand/RoCE",
    "NCCL_NET_GDR_LEVEL": "a wrong level disables GPUDirect RDMA (LOC)",
    "NCCL_NVLS_ENABLE": "NVLink SHARP costs GPU memory; a workload decision",
    "NCCL_MIN_NCHANNELS": "channel counts are a workload decision",
    "NCCL_MAX_NCHANNELS": "channel counts are a workload decision",
    "NCCL_BUFFSIZE": "buffer size is a workload decision",
    "NCCL_NTHREADS": "thread count is a workload decision",
    "NCCL_LAUNCH_MODE": "launch mode is a workload decision",
    "CUDA_DEVICE_MAX_CONNECTIONS": "Megatron tensor-parallel overlap wants 1, FSDP wants more than 1",
    "CUDA_VISIBLE_DEVICES": "Slurm assigns the job's GPUs",
}


# Variable classes gpuperf may inject: a name outside them (LD_PRELOAD, PATH, ...) is refused.
VARIABLE_CLASSES: dict[str, str] = {
    "NCCL_": "NCCL",
    "CUDA_": "CUDA runtime",
    "PYTORCH_": "PyTorch",
    "TORCH_": "PyTorch",
    "OMP_": "OpenMP",
    "UCX_": "UCX",
    "FI_": "libfabric (EFA)",
    "NVSHMEM_": "NVSHMEM",
    "GLOO_": "Gloo",
    "MKL_": "MKL",
}


class _Record(tuple):
    """A namedtuple's essentials (named fields, trailing defaults, tuple equality, ``_asdict``).

    Not ``collections.namedtuple``, dataclasses or typing.NamedTuple: the TaskProlog imports this module
    in every task, and ``collections`` alone costs its fresh process ~2 ms (more than the work it does).
    """

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _defaults: tuple[Any, ...] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for i, name in enumerate(cls._fields):
            setattr(cls, name, property(lambda self, i=i: self[i], doc=f"field {i}: {name}"))

    def __new__(cls, *args: Any, **kw: Any) -> Any:
        fields, first_default = cls._fields, len(cls._fields) - len(cls._defaults)
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__}() takes {len(fields)} fields, {len(args)} given")
        vals = list(args)
        for i in range(len(args), len(fields)):
            if fields[i] in kw:
                vals.append(kw.pop(fields[i]))
            elif i >= first_default:
                vals.append(cls._defaults[i - first_default])
            else:
                raise TypeError(f"{cls.__name__}() missing field {fields[i]!r}")
        if kw:
            raise TypeError(f"{cls.__name__}() got unknown or repeated fields {sorted(kw)}")
        return tuple.__new__(cls, vals)

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)  # copy and pickle rebuild from the fields, not from one tuple argument

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={v!r}' for n, v in zip(self._fields, self))})"

    def _asdict(self) -> dict[str, Any]:
        """The fields as a dict, in order."""
        return dict(zip(self._fields, self))


# EnvVar: name, value, reason, rule; nccl_below: applies only while the job's NCCL is older than this
# (unknown version: applies); per_task: the value is decided in each task ("omp_threads"), not here
class EnvVar(_Record):
    """One variable to inject, why, and which rule produced it."""

    __slots__ = ()
    _fields = ("name", "value", "reason", "rule", "nccl_below", "per_task")
    _defaults = (None, None)
    name: str
    value: str
    reason: str
    rule: str
    nccl_below: tuple[int, int, int] | None
    per_task: str | None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        d = self._asdict()
        d["nccl_below"] = list(self.nccl_below) if self.nccl_below else None
        return d

    @staticmethod
    def from_dict(d: dict[str, Any], where: str = "var") -> "EnvVar":
        """Inverse of to_dict; ValueError (one short line, none of the record's text) for one that is not."""
        _fields_of(d, EnvVar._fields, ("name", "value"), where)
        below = d.get("nccl_below")
        if below is not None and (not isinstance(below, list) or len(below) > 3
                                  or any(isinstance(x, bool) or not isinstance(x, int) for x in below)):
            raise ValueError(f"plan: {where}.nccl_below is not a version")
        value = d["value"]
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"plan: {where}.value is not a string")
        return EnvVar(_text(d["name"], where, "name"), _text(str(value), where, "value"),
                      _text(d.get("reason", ""), where, "reason"), _text(d.get("rule", ""), where, "rule"),
                      tuple(below) if below else None,
                      None if d.get("per_task") is None else _text(d["per_task"], where, "per_task"))


# a plan's bounds (the prolog writes ~20 variables of a few hundred characters each; the file is its
# user's to rewrite, and the root daemon reads it for each TaskProlog: issue 36, finding 1)
PLAN_MAX_ITEMS = 256
PLAN_MAX_TEXT = 4096


def _text(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str) or len(v) > PLAN_MAX_TEXT:
        raise ValueError(f"plan: {where}.{key} is not a string of at most {PLAN_MAX_TEXT} characters")
    return v


def _fields_of(d: Any, fields: Sequence[str], required: Sequence[str], where: str) -> None:
    """``d`` is an object with only ``fields`` and every one of ``required`` (the error names no key of it)."""
    if not isinstance(d, dict):
        raise ValueError(f"plan: {where} is not an object")
    if any(k not in fields for k in d):
        raise ValueError(f"plan: {where} has a field that is not one of {', '.join(fields)}")
    if any(k not in d for k in required):
        raise ValueError(f"plan: {where} lacks one of {', '.join(required)}")


def _items(d: dict[str, Any], key: str) -> list[Any]:
    v = d.get(key, [])
    if not isinstance(v, list) or len(v) > PLAN_MAX_ITEMS:
        raise ValueError(f"plan: {key} is not a list of at most {PLAN_MAX_ITEMS}")
    return v


class Skipped(_Record):
    """A variable the policy considered and did not set, and why."""

    __slots__ = ()
    _fields = ("name", "reason", "rule")
    name: str
    reason: str
    rule: str


class EnvPlan:
    """The ordered variables for one job on one node, with what was skipped and notes for the report."""

    def __init__(self, vars: list[EnvVar] | None = None, skipped: list[Skipped] | None = None,
                 notes: list[str] | None = None, disabled: str | None = None):
        self.vars = list(vars or [])
        self.skipped = list(skipped or [])
        self.notes = list(notes or [])
        self.disabled = disabled  # why nothing is injected (config error, opt-out), else None

    def __repr__(self) -> str:
        return f"EnvPlan(vars={self.vars!r}, skipped={self.skipped!r}, notes={self.notes!r}, disabled={self.disabled!r})"

    def names(self) -> list[str]:
        """Names of the variables to inject, in order."""
        return [v.name for v in self.vars]

    def get(self, name: str) -> EnvVar | None:
        """The variable called ``name``, if the plan sets it."""
        return next((v for v in self.vars if v.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (the env.json cache and the report)."""
        return {"schema": SCHEMA, "vars": [v.to_dict() for v in self.vars],
                "skipped": [s._asdict() for s in self.skipped], "notes": list(self.notes), "disabled": self.disabled}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "EnvPlan":
        """Inverse of to_dict; ValueError, one short line naming where (never the record's own text, which
        its user may have made 900,000 characters long), for another schema or a plan out of its bounds."""
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} plan")
        skipped = []
        for i, s in enumerate(_items(d, "skipped")):
            _fields_of(s, Skipped._fields, Skipped._fields, f"skipped[{i}]")
            skipped.append(Skipped(*(_text(s[k], f"skipped[{i}]", k) for k in Skipped._fields)))
        disabled = d.get("disabled")
        return EnvPlan([EnvVar.from_dict(v, f"vars[{i}]") for i, v in enumerate(_items(d, "vars"))], skipped,
                       [_text(n, f"notes[{i}]", "text") for i, n in enumerate(_items(d, "notes"))],
                       None if disabled is None else _text(disabled, "plan", "disabled"))


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """'2.21.5' or '2.21.5-1+cuda12.4' -> (2, 21, 5); None when it does not look like one."""
    if not text:
        return None
    head = text.strip().split("-")[0].split("+")[0]
    parts = head.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:3]):
        return None
    nums = [int(p) for p in parts[:3]] + [0] * (3 - len(parts[:3]))
    return (nums[0], nums[1], nums[2])


def _vstr(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


def omp_threads(cpus_per_task: int, gpus_per_task: int = 1) -> EnvVar:
    """OMP_NUM_THREADS for a task with these CPUs and GPUs: its CPUs, shared among its GPUs' processes."""
    gpt = max(1, gpus_per_task)
    n = max(1, cpus_per_task // gpt)
    why = f"the task has {cpus_per_task} CPU(s)"
    if gpt > 1:
        why += (f" and {gpt} GPUs; launchers (torchrun, mp.spawn) start one process per GPU that inherits this "
                f"value, so each gets {n}")
    why += ("; unset, OpenMP starts one thread per CPU the process may use in every process and oversubscribes "
            "them (4 ranks on 32 CPUs: more than 2.5x slower than with 8 threads each, "
            "benchmarks/omp_shared_node.py on the 2x H200 machine)")
    return EnvVar("OMP_NUM_THREADS", str(n), why, "default:omp_threads")


def drop_user_set(plan: EnvPlan, user_set: Iterable[str]) -> EnvPlan:
    """A variable the user set always wins (under any of its names): drop it from the plan and say so."""
    mine = set(user_set)
    for v in [v for v in plan.vars if v.name in mine or mine.intersection(ALIASES.get(v.name, ()))]:
        plan.vars.remove(v)
        plan.skipped.append(Skipped(v.name, USER_WINS, v.rule))
    return plan


def off_reason(config_error: str | None, enabled: bool, gpuperf_opt: str | None) -> str | None:
    """Why nothing is injected for a job (broken config, disabled, the job's GPUPERF=off), or None."""
    if config_error:
        # the admin's policy is unknown: injecting defaults could set what a rule forbids
        return f"config error, nothing injected: {config_error}"
    if not enabled:
        return "env injection disabled in the config ([env] enabled = false)"
    if (gpuperf_opt or "").strip().lower() in ("off", "0", "no", "false"):
        return "the job turned gpuperf off (GPUPERF=off / --gpuperf=off)"
    return None


def finalize_task(p: EnvPlan, user_set: Iterable[str], cpus_per_task: int | None, gpus_per_task: int,
                  nccl_version: tuple[int, int, int] | None, nccl_source: str | None = None) -> EnvPlan:
    """Per task: decide per-task values, drop what the found NCCL no longer needs, let the user's variables win."""
    out = EnvPlan(skipped=list(p.skipped), notes=list(p.notes), disabled=p.disabled)
    for v in p.vars:
        if v.nccl_below and nccl_version and nccl_version >= v.nccl_below:
            out.skipped.append(Skipped(v.name, f"NCCL {_vstr(nccl_version)} ({nccl_source}) decides it itself "
                                       f"(since {_vstr(v.nccl_below)})", v.rule))
            continue
        if v.per_task == "omp_threads":
            if not cpus_per_task:
                out.skipped.append(Skipped(v.name, "the task's CPU count is unknown", v.rule))
                continue
            v = omp_threads(cpus_per_task, gpus_per_task)
        out.vars.append(v)
    if nccl_version:
        out.notes.append(f"NCCL {_vstr(nccl_version)} found ({nccl_source})")
    return drop_user_set(out, user_set)


def _crc(value: str) -> str:
    return f"{zlib.crc32(value.encode('utf-8', 'surrogateescape')):08x}"


def marker(exports: Sequence[tuple[str, str]]) -> str:
    """The MARKER value for these exports."""
    return ",".join(f"{n}:{_crc(v)}" for n, v in exports)


def affinity_omp_marker(threads: str) -> str:
    """GPUPERF_OMP for an OMP_NUM_THREADS gpuperf exported: tells the affinity SPANK plugin it may refine it."""
    return f"{threads} none"


def _marked(environ: Mapping[str, str]) -> dict[str, str]:
    ours: dict[str, str] = {}
    for item in (environ.get(MARKER) or "").split(","):
        name, _, crc = item.partition(":")
        if name and crc:
            ours[name] = crc
    return ours


def injected(environ: Mapping[str, str]) -> list[str]:
    """Variables that still hold the value gpuperf exported (an earlier step's injection, inherited)."""
    return [n for n, crc in _marked(environ).items() if n in environ and _crc(environ[n]) == crc]


def user_set(environ: Mapping[str, str]) -> frozenset[str]:
    """Variables of the classes gpuperf injects that the user set (not values gpuperf itself exported)."""
    ours = _marked(environ)
    # the affinity plugin marks the OpenMP values it set as "<threads> <places>" in GPUPERF_OMP
    omp = (environ.get(AFFINITY_OMP_MARKER) or "").split(" ", 1)
    theirs = {"OMP_NUM_THREADS": omp[0], "OMP_PLACES": omp[1] if len(omp) > 1 else None}
    prefixes = tuple(VARIABLE_CLASSES)
    return frozenset(k for k, v in environ.items()
                     if k.startswith(prefixes) and not (k in ours and ours[k] == _crc(v))
                     and not (omp[0] and theirs.get(k) == v))
