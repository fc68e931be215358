"""``gpuperf tune``: measure candidate NCCL settings on this node and write a rule only for a clear winner.

Opt-in, for admins, on an idle node. The baseline is what gpuperf injects here today; each
candidate adds one variable to it. A candidate becomes a ``[[env.rules]]`` table only when it
beats the baseline by more than the run-to-run spread at every size that matters and loses
nowhere >= 1 MiB (``gpuperf.env.tuning.decide``); the rule records its evidence.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import socket
import sys
from pathlib import Path

# one variable per candidate; workload variables among them need force = true in a rule,
# which tune writes only with the measurement that justifies it
CANDIDATES = ["NCCL_PROTO=LL128", "NCCL_ALGO=Ring", "NCCL_P2P_LEVEL=NVL", "NCCL_ALGO=Tree",
              "NCCL_PROTO=Simple", "CUDA_DEVICE_MAX_CONNECTIONS=1", "NCCL_MIN_NCHANNELS=32"]
QUICK_CANDIDATES = ["NCCL_PROTO=LL128", "NCCL_ALGO=Ring", "NCCL_P2P_LEVEL=NVL"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``gpuperf tune``."""
    p.add_argument("--out", required=True, help="TOML file for the rules (written even when nothing wins)")
    p.add_argument("--quick", action="store_true", help=f"{len(QUICK_CANDIDATES)} candidates, 2 rounds, 256 KiB-1 GiB")
    p.add_argument("--candidate", action="append", metavar="NAME=VALUE", help="try this instead of the built-in list")
    p.add_argument("--nproc", type=int, help="processes (default: every visible GPU)")
    p.add_argument("--backend", default="nccl")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--rounds", type=int, help="fresh launches per setting (default 3, quick 2)")
    p.add_argument("--min-size", type=int, help="smallest message in bytes (default 8 KiB, quick 256 KiB)")
    p.add_argument("--max-size", type=int, default=1 << 30, help="largest message in bytes (default 1 GiB)")
    p.add_argument("--matter-min", type=int, default=1 << 20, help="sizes that matter start here (default 1 MiB)")
    p.add_argument("--env-root", help="baseline from a recorded node (smoke tests) instead of this one")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds one launch may take")


def _candidates(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    raw = args.candidate or (QUICK_CANDIDATES if args.quick else CANDIDATES)
    out = {}
    for item in raw:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"candidate {item!r} is not NAME=VALUE")
        out[item] = {name.strip(): value.strip()}
    return out


def run(args: argparse.Namespace) -> int:
    """Entry of ``gpuperf tune``."""
    from gpuperf.env import ncclbench as nb, rules as envrules, tuning

    try:
        cands = _candidates(args)
    except ValueError as e:
        print(f"gpuperf tune: {e}", file=sys.stderr)
        return 2
    for env in cands.values():
        for name in env:
            why = envrules.check_name(name)
            if why:
                print(f"gpuperf tune: {why}", file=sys.stderr)
                return 2
    nproc = args.nproc or len(nb.versions().get("gpus") or []) or 0
    if nproc < 2:
        print("gpuperf tune: needs at least 2 GPUs (or --nproc with --device cpu)", file=sys.stderr)
        return 2
    baseline, answer = nb.gpuperf_exports(nproc, args.env_root)
    rounds = args.rounds or (2 if args.quick else 3)
    min_size = args.min_size or (256 * nb.KIB if args.quick else 8 * nb.KIB)
    size_list = nb.sizes(min_size, args.max_size)
    sets = {"baseline": baseline, **{n: {**baseline, **e} for n, e in cands.items()}}
    print(f"baseline (gpuperf's environment here): {baseline or '(nothing)'}; {len(cands)} candidate(s), "
          f"{rounds} round(s), {nb.human(size_list[0])}-{nb.human(size_list[-1])}", flush=True)
    results = nb.measure(sets, nproc, args.backend, args.device, size_list, rounds, 3 if args.quick else 5,
                         timeout_s=args.timeout, log=lambda m: print(m, flush=True))
    # the set measured holds the baseline too; the rule adds only the candidate's variable
    verdicts = [dataclasses.replace(tuning.decide(results["baseline"], results[n], size_list, args.matter_min),
                                    env=cands[n]) for n in cands]
    winners = tuning.best_per_variable(verdicts)
    info = nb.versions()
    text = render_rules(winners, verdicts, info, answer, rounds, args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"versions": info, "sizes": size_list, "verdicts": [{"name": v.name, "accepted": v.accepted, "reason": v.reason,
                                                            **v.evidence()} for v in verdicts],
         "sets": {n: r.to_dict() for n, r in results.items()}}, indent=1))
    for v in verdicts:
        print(f"{'RULE ' if v in winners else 'no   '} {v.name}: {v.reason}")
    print(f"wrote {len(winners)} rule(s) to {args.out}")
    return 0


def render_rules(winners: list, verdicts: list, info: dict, answer: dict, rounds: int, args: argparse.Namespace) -> str:
    """The rules file: a header saying what was measured, every verdict as a comment, the winning rules."""
    from gpuperf.env import ncclbench as nb, policy as envpolicy, rules as envrules

    host = socket.gethostname()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gpus = sorted(set(info.get("gpus") or []))
    lines = [f"# gpuperf tune on {host}, {when}: {args.nproc or len(info.get('gpus') or [])} x "
             f"{', '.join(gpus) or args.device}, torch {info.get('torch')}, NCCL {info.get('nccl')}, {rounds} round(s)",
             "# Merge the [[env.rules]] tables below into /etc/gpuperf/config.toml to apply them.", "#"]
    for v in verdicts:
        lines.append(f"# {'ACCEPTED' if v in winners else 'rejected'} {v.name}: {v.reason}")
    lines.append("")
    shape = answer.get("shape") or {}
    for v in winners:
        name = "tune-" + "-".join(f"{k}-{val}" for k, val in v.env.items()).lower().replace("_", "-")
        match = {"multi_node": False}  # measured within one node: says nothing about the network
        if gpus:
            match = {"gpu_model": gpus[0], **match}
        ev = {"host": host, "when": when, "nccl": info.get("nccl") or "", "nproc": len(info.get("gpus") or []),
              "rounds": rounds, "baseline_gpus": len(shape.get("gpus") or []), **v.evidence()}
        rule = envrules.Rule(name, match, dict(v.env), (), any(k in envpolicy.FORCE_REQUIRED for k in v.env),
                             f"gpuperf tune: {v.reason}", ev)
        envrules.parse_rule(0, _raw(rule))  # what tune writes must load as config
        lines.append(envrules.to_toml(rule))
    if not winners:
        lines.append(f"# No candidate won clearly at every size >= {nb.human(args.matter_min)}: no rule written; "
                     "NCCL's own choices stand.")
    return "\n".join(lines) + "\n"


def _raw(rule) -> dict:
    return {"name": rule.name, "match": rule.match, "set": rule.set, "force": rule.force, "reason": rule.reason,
            "evidence": rule.evidence}
