"""``gpuperf tune``: measure candidate NCCL settings on this node and write a rule only for a proven winner.

Opt-in, for admins, on an idle node. The baseline is what gpuperf injects here today; each
candidate adds its variables to it. A candidate becomes a ``[[env.rules]]`` table only when the
95% interval of its paired per-round ratio lies above 1 at every size that matters and no measured
size can lose more than its tolerance (``gpuperf.env.tuning.decide``); the rule records ratios and
intervals. ``--accept-small-loss`` takes a win at the sizes that matter although smaller sizes lose
(or may): the rule's reason then names those sizes and their intervals. Otherwise the file says
"default is best" (or "no proven winner") with the evidence; every size's interval is printed.

``--transport socket`` measures the network path on one machine: every set (baseline too) runs
with NVLink, shared memory and InfiniBand off and sockets over loopback, so two processes talk as
two nodes would over TCP; the candidates are then NCCL's socket settings.
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
# NCCL's TCP transport: threads per connection x sockets per thread (product <= 64; defaults 1 x 1
# on generic hosts, more on AWS/GCP where NCCL detects the cloud)
SOCKET_CANDIDATES = ["NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4", "NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2"]
# the network path on one machine: no NVLink, no shared memory, no InfiniBand, TCP over loopback
SOCKET_PATH = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo"}
SOCKET_SIZES = [8 << 10, 128 << 10, 1 << 20, 8 << 20, 64 << 20]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``gpuperf tune``."""
    p.add_argument("--out", required=True, help="TOML file for the rules (written even when nothing wins)")
    p.add_argument("--quick", action="store_true", help=f"{len(QUICK_CANDIDATES)} candidates, 2 rounds, 256 KiB-1 GiB")
    p.add_argument("--candidate", action="append", metavar="NAME=VALUE",
                   help="try this instead of the built-in list (several variables: 'A=1 B=2')")
    p.add_argument("--transport", choices=("auto", "socket"), default="auto",
                   help="socket: force NCCL onto TCP over loopback (emulated nodes) and try socket settings")
    p.add_argument("--colls", default="allreduce", help="collectives, comma-separated (allreduce,allgather,reducescatter)")
    p.add_argument("--sizes", help="comma-separated message sizes in bytes (overrides --min-size/--max-size)")
    p.add_argument("--repeats", type=int, help="timed repeats per size per launch (default 5, quick 3)")
    p.add_argument("--budget", type=float, help="seconds for all rounds: no round starts that would end past it")
    p.add_argument("--nproc", type=int, help="processes (default: every visible GPU)")
    p.add_argument("--backend", default="nccl")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--rounds", type=int, help="fresh launches per setting (default 3, quick 2)")
    p.add_argument("--min-size", type=int, help="smallest message in bytes (default 8 KiB, quick 256 KiB)")
    p.add_argument("--max-size", type=int, default=1 << 30, help="largest message in bytes (default 1 GiB)")
    p.add_argument("--matter-min", type=int, default=1 << 20, help="sizes that matter start here (default 1 MiB)")
    p.add_argument("--accept-small-loss", action="store_true",
                   help="accept a win at every size that matters although smaller sizes lose or may lose; "
                        "the rule's reason names those sizes and their intervals")
    p.add_argument("--env-root", help="baseline from a recorded node (smoke tests) instead of this one")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds one launch may take")
    p.add_argument("--timing", choices=("launched", "queued"), default="launched",
                   help="queued: the collectives queued behind a GPU sleep, NCCL's own time (below a few MiB "
                        "'launched' times the host issuing them); CUDA only")


def _candidates(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    default = SOCKET_CANDIDATES if args.transport == "socket" else QUICK_CANDIDATES if args.quick else CANDIDATES
    out = {}
    for item in args.candidate or default:
        env = {}
        for part in item.split() or [item]:
            name, sep, value = part.partition("=")
            if not sep or not name:
                raise ValueError(f"candidate {item!r} is not NAME=VALUE")
            env[name.strip()] = value.strip()
        out[item] = env
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
    colls = tuple(c for c in args.colls.split(",") if c)
    unknown = [c for c in colls if c not in nb.COLLECTIVES]
    if unknown or not colls:
        print(f"gpuperf tune: unknown collective {unknown[0] if unknown else '(none)'} "
              f"(known: {', '.join(nb.COLLECTIVES)})", file=sys.stderr)
        return 2
    baseline, answer = nb.gpuperf_exports(nproc, args.env_root)
    if args.transport == "socket":
        baseline = {**baseline, **SOCKET_PATH}
    if getattr(args, "timing", "launched") == "queued" and args.device != "cuda":
        print("gpuperf tune: --timing queued needs --device cuda (a GPU sleep to queue behind)", file=sys.stderr)
        return 2
    rounds = args.rounds or (2 if args.quick else 3)
    min_size = args.min_size or (256 * nb.KIB if args.quick else 8 * nb.KIB)
    if args.sizes:
        size_list = sorted(int(x) for x in args.sizes.split(",") if x)
    elif args.transport == "socket" and args.min_size is None:
        size_list = [s for s in SOCKET_SIZES if s <= args.max_size]
    else:
        size_list = nb.sizes(min_size, args.max_size)
    sets = {"baseline": baseline, **{n: {**baseline, **e} for n, e in cands.items()}}
    print(f"baseline (gpuperf's environment here{', socket path' if args.transport == 'socket' else ''}): "
          f"{baseline or '(nothing)'}; {len(cands)} candidate(s), up to {rounds} round(s), "
          f"{nb.human(size_list[0])}-{nb.human(size_list[-1])}, {', '.join(colls)}", flush=True)
    results = nb.measure(sets, nproc, args.backend, args.device, size_list, rounds,
                         args.repeats or (3 if args.quick else 5), timeout_s=args.timeout,
                         log=lambda m: print(m, flush=True), colls=colls, budget_s=args.budget,
                         timing=getattr(args, "timing", "launched"))
    rounds = len(results["baseline"].rounds)
    # the set measured holds the baseline too; the rule adds only the candidate's variables
    verdicts = [dataclasses.replace(tuning.decide(results["baseline"], results[n], size_list, args.matter_min,
                                                  colls=colls, accept_cost=args.accept_small_loss), env=cands[n])
                for n in cands]
    winners = tuning.best_per_variable(verdicts)
    info = nb.versions()
    text = render_rules(winners, verdicts, info, answer, rounds, args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"versions": info, "sizes": size_list, "collectives": list(colls), "transport": args.transport,
         "timing": getattr(args, "timing", "launched"), "rounds": rounds,
         "baseline_env": baseline, "verdicts": [{"name": v.name, "accepted": v.accepted, "reason": v.reason,
                                                            **v.evidence()} for v in verdicts],
         "sets": {n: r.to_dict() for n, r in results.items()}}, indent=1))
    for v in verdicts:
        print(f"{'RULE ' if v in winners else 'no   '} {v.name}: {v.reason}")
        print("\n".join(size_lines(v, "      ")))
    print(f"wrote {len(winners)} rule(s) to {args.out}")
    return 0


def render_rules(winners: list, verdicts: list, info: dict, answer: dict, rounds: int, args: argparse.Namespace) -> str:
    """The rules file: a header saying what was measured, every verdict as a comment, the winning rules."""
    from gpuperf.env import ncclbench as nb, policy as envpolicy, rules as envrules, tuning

    host = socket.gethostname()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gpus = sorted(set(info.get("gpus") or []))
    lines = [f"# gpuperf tune on {host}, {when}: {args.nproc or len(info.get('gpus') or [])} x "
             f"{', '.join(gpus) or args.device}, torch {info.get('torch')}, NCCL {info.get('nccl')}, {rounds} round(s)",
             "# Merge the [[env.rules]] tables below into /etc/gpuperf/config.toml to apply them.",
             f"# Timing: {getattr(args, 'timing', 'launched')} (queued: behind a GPU sleep, NCCL's own time; "
             "launched: issued one by one, the host's time below a few MiB)", "#"]
    socket_path = getattr(args, "transport", "auto") == "socket"
    if socket_path:
        lines.append("# Transport: sockets over loopback (" + " ".join(f"{k}={v}" for k, v in SOCKET_PATH.items())
                     + ") in every set: the network path of a multi-node job, emulated on one machine.")
    for v in verdicts:
        lines.append(f"# {'ACCEPTED' if v in winners else 'rejected'} {v.name}: {v.reason}")
        lines.extend(size_lines(v, "#     "))
    lines.append("")
    shape = answer.get("shape") or {}
    for v in winners:
        name = "tune-" + "-".join(f"{k}-{val}" for k, val in v.env.items()).lower().replace("_", "-")
        # measured within one node: says nothing about the network, unless the network path was forced
        match = {"multi_node": socket_path}
        if gpus and not socket_path:
            match = {"gpu_model": gpus[0], **match}
        ev = {"host": host, "when": when, "nccl": info.get("nccl") or "", "nproc": len(info.get("gpus") or []),
              "rounds": rounds, "baseline_gpus": len(shape.get("gpus") or []), **v.evidence()}
        where = " on the emulated network path (TCP over loopback between 2 processes)" if socket_path else ""
        if socket_path:
            ev["transport"] = "socket over loopback"
        rule = envrules.Rule(name, match, dict(v.env), (), any(k in envpolicy.FORCE_REQUIRED for k in v.env),
                             f"gpuperf tune{where}: {v.reason}", ev)
        envrules.parse_rule(0, _raw(rule))  # what tune writes must load as config
        lines.append(envrules.to_toml(rule))
    if not winners and tuning.default_is_best(verdicts):
        lines.append(f"# Default is best: every candidate is proven no better (within the tolerance, or a loss) at "
                     f"some size >= {nb.human(args.matter_min)} (evidence above: candidate/baseline, paired rounds); "
                     "no rule written, NCCL's own choices stand.")
    elif not winners:
        lines.append(f"# No proven winner: no candidate's 95% interval lies above 1 at every size >= "
                     f"{nb.human(args.matter_min)}, and some intervals are unsettled (more rounds would tell); "
                     "no rule written.")
    return "\n".join(lines) + "\n"


def size_lines(verdict, prefix: str) -> list[str]:
    """Every measured size of a verdict: its ratio, 95% interval and what the interval says."""
    from gpuperf.env import interval as iv, ncclbench as nb

    out = []
    for c in verdict.checks:
        note = " (a loss is not ruled out)" if c.risks and not c.loses else ""
        out.append(f"{prefix}{c.coll} {nb.human(c.size)}: {iv.fmt(c.ratio)} {c.verdict}{note}")
    return out


def _raw(rule) -> dict:
    return {"name": rule.name, "match": rule.match, "set": rule.set, "force": rule.force, "reason": rule.reason,
            "evidence": rule.evidence}
