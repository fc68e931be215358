"""Admin environment rules (``[[env.rules]]`` in the config): declarative, validated when loaded.

A rule matches on facts of the node and job (GPU model, NVLink or PCIe, NIC kind, node name glob,
partition, multi-node) and sets or forbids variables::

    [[env.rules]]
    name = "roce-fabric-a"
    match = { nic_kind = "roce", node = "gpu-a*" }
    set = { NCCL_IB_TC = "106" }
    forbid = ["PYTORCH_CUDA_ALLOC_CONF"]
    reason = "fabric A carries RDMA in traffic class 106"

Setting a variable gpuperf never forces (``envpolicy.FORCE_REQUIRED``) needs ``force = true``.
Every error names the rule.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, NamedTuple

from gpuperf.files import tomlw
from gpuperf.env.policy import FORCE_REQUIRED, VARIABLE_CLASSES

MATCH_KEYS: dict[str, str] = {
    "gpu_model": "glob on the GPU name, case-insensitive (\"*H100*\")",
    "interconnect": "nvlink or pcie",
    "nic_kind": "ib, roce, ethernet or efa (any active NIC of that kind)",
    "node": "glob on the node name",
    "partition": "glob on the job's partition",
    "multi_node": "true or false",
}
RULE_KEYS = ("name", "match", "set", "forbid", "force", "reason", "evidence")
_CHOICES = {"interconnect": ("nvlink", "pcie"), "nic_kind": ("ib", "roce", "ethernet", "efa")}
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class RuleError(ValueError):
    """A rule that cannot be used; the message names it."""


class Rule(NamedTuple):
    """One validated admin rule (a NamedTuple: config validation imports this in the TaskProlog too)."""

    name: str
    match: dict[str, Any]
    set: dict[str, str]
    forbid: tuple[str, ...] = ()
    force: bool = False
    reason: str = ""
    evidence: dict[str, Any] | None = None

    def matches(self, facts: dict[str, Any]) -> bool:
        """True when every match key holds for these facts (``envpolicy.node_facts``)."""
        for key, want in self.match.items():
            have = facts.get(key)
            if key == "multi_node":
                if bool(have) != want:
                    return False
                continue
            pats = [want] if isinstance(want, str) else list(want)
            fold = key in ("gpu_model", "interconnect", "nic_kind")
            if not any(_glob(h, p, fold) for h in have or [] for p in pats):
                return False
        return True


def _glob(value: str, pattern: str, fold: bool) -> bool:
    if fold:
        return fnmatch.fnmatchcase(value.lower(), pattern.lower())
    return fnmatch.fnmatchcase(value, pattern)


def _label(i: int, raw: Any) -> str:
    name = raw.get("name") if isinstance(raw, dict) else None
    return f"env rule '{name}' (rules[{i}])" if isinstance(name, str) and name else f"env rule rules[{i}]"


def check_name(name: Any) -> str | None:
    """Why a variable name cannot be injected, or None when it can."""
    if not isinstance(name, str) or not _NAME.match(name):
        return f"{name!r} is not a variable name (A-Z, 0-9, _)"
    if not name.startswith(tuple(VARIABLE_CLASSES)):
        known = ", ".join(f"{p}*" for p in VARIABLE_CLASSES)
        return f"unknown variable class: {name} (gpuperf sets only {known})"
    return None


def _value(label: str, name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RuleError(f"{label}: set.{name} must be a string or a number, got {value!r}")
    text = str(value)
    if any(c in text for c in "\n\r\0"):
        # the TaskProlog protocol is one line per variable: a newline would inject another command
        raise RuleError(f"{label}: set.{name} must be one line")
    return text


def _match(label: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise RuleError(f"{label}: match must be a table")
    out: dict[str, Any] = {}
    for key, want in raw.items():
        if key not in MATCH_KEYS:
            raise RuleError(f"{label}: unknown match key '{key}' (known: {', '.join(MATCH_KEYS)})")
        if key == "multi_node":
            if not isinstance(want, bool):
                raise RuleError(f"{label}: match.multi_node must be true or false")
            out[key] = want
            continue
        pats = [want] if isinstance(want, str) else want
        if not isinstance(pats, list) or not pats or not all(isinstance(p, str) and p for p in pats):
            raise RuleError(f"{label}: match.{key} must be a string or a list of strings")
        if key in _CHOICES:
            bad = [p for p in pats if p.lower() not in _CHOICES[key]]
            if bad:
                raise RuleError(f"{label}: match.{key} must be one of {', '.join(_CHOICES[key])}, got {bad[0]!r}")
        out[key] = want
    return out


def parse_rule(i: int, raw: Any) -> Rule:
    """Validate one raw rule table; RuleError names the rule."""
    label = _label(i, raw)
    if not isinstance(raw, dict):
        raise RuleError(f"{label}: must be a table")
    unknown = [k for k in raw if k not in RULE_KEYS]
    if unknown:
        raise RuleError(f"{label}: unknown key '{unknown[0]}' (known: {', '.join(RULE_KEYS)})")
    name = raw.get("name", f"rules[{i}]")
    if not isinstance(name, str) or not name:
        raise RuleError(f"{label}: name must be a non-empty string")
    force = raw.get("force", False)
    if not isinstance(force, bool):
        raise RuleError(f"{label}: force must be true or false")
    reason = raw.get("reason", "")
    if not isinstance(reason, str):
        raise RuleError(f"{label}: reason must be a string")
    sets = raw.get("set", {})
    if not isinstance(sets, dict):
        raise RuleError(f"{label}: set must be a table of NAME = \"value\"")
    forbid = raw.get("forbid", [])
    if not isinstance(forbid, list) or not all(isinstance(n, str) for n in forbid):
        raise RuleError(f"{label}: forbid must be a list of variable names")
    if not sets and not forbid:
        raise RuleError(f"{label}: sets nothing and forbids nothing")
    values: dict[str, str] = {}
    for n, v in sets.items():
        why = check_name(n)
        if why:
            raise RuleError(f"{label}: {why}")
        if n in FORCE_REQUIRED and not force:
            raise RuleError(f"{label}: sets {n}, which gpuperf never forces ({FORCE_REQUIRED[n]}); "
                            "add force = true to the rule if this is intended")
        values[n] = _value(label, n, v)
    for n in forbid:
        why = check_name(n)
        if why:
            raise RuleError(f"{label}: forbid: {why}")
        if n in values:
            raise RuleError(f"{label}: both sets and forbids {n}")
    evidence = raw.get("evidence", {})
    if not isinstance(evidence, dict):
        raise RuleError(f"{label}: evidence must be a table")
    return Rule(name, _match(label, raw.get("match", {})), values, tuple(forbid), force, reason, evidence or None)


def parse(raw_rules: Any) -> list[Rule]:
    """Validate the ``[[env.rules]]`` list; RuleError (a ValueError) names the first bad rule."""
    if not isinstance(raw_rules, list):
        raise RuleError("env rules must be a list of tables ([[env.rules]])")
    rules = [parse_rule(i, r) for i, r in enumerate(raw_rules)]
    seen: set[str] = set()
    for i, r in enumerate(rules):
        if r.name in seen:
            raise RuleError(f"env rule '{r.name}' (rules[{i}]): another rule has the same name")
        seen.add(r.name)
    return rules


def validate(raw_rules: Any) -> None:
    """The config schema's validator for ``env.rules``: raises ValueError naming the rule."""
    parse(raw_rules)


def to_toml(rule: Rule) -> str:
    """One rule as a ``[[env.rules]]`` TOML table (what ``gpuperf tune`` writes)."""
    lines = ["[[env.rules]]", f"name = {_tv(rule.name)}"]
    if rule.reason:
        lines.append(f"reason = {_tv(rule.reason)}")
    if rule.force:
        lines.append("force = true")
    if rule.match:
        lines.append("match = { " + ", ".join(f"{k} = {_tv(v)}" for k, v in rule.match.items()) + " }")
    if rule.set:
        lines.append("set = { " + ", ".join(f"{k} = {_tv(v)}" for k, v in rule.set.items()) + " }")
    if rule.forbid:
        lines.append("forbid = [" + ", ".join(_tv(n) for n in rule.forbid) + "]")
    if rule.evidence:
        lines.append("[env.rules.evidence]")
        lines.extend(f"{k} = {_tv(v)}" for k, v in rule.evidence.items())
    return "\n".join(lines) + "\n"


def _tv(v: Any) -> str:
    return tomlw.value(v)
