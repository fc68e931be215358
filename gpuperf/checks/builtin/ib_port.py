"""ib_port: an InfiniBand/RoCE port not ACTIVE, or below the expected rate."""

from __future__ import annotations

from typing import Any

from gpuperf.checks.base import CheckEnv, CheckResult, register

CODE = "ib_port"
_KINDS = ("ib", "roce")


def _name(n: dict[str, Any]) -> str:
    return f"{n.get('name')}:{n.get('port') or 1}"


@register(CODE, severity="fail", help="IB/RoCE port not ACTIVE or below checks.ib_min_rate_gbps", needs_gpus=False)
def check(topo: dict[str, Any], snap: dict[str, Any], job_gpus: list[int], cfg: Any, env: CheckEnv = CheckEnv()) -> CheckResult:
    """Checks every IB/RoCE port, or only those named in ``checks.ib_ports`` ('mlx5_0' or 'mlx5_0:1')."""
    nics = [n for n in topo.get("nics") or [] if isinstance(n, dict) and n.get("kind") in _KINDS]
    wanted = set(cfg.checks.ib_ports)
    if wanted:
        nics = [n for n in nics if n.get("name") in wanted or _name(n) in wanted]
        absent = wanted - {n.get("name") for n in nics} - {_name(n) for n in nics}
    else:
        absent = set()
    min_rate = float(cfg.checks.ib_min_rate_gbps)
    problems = [f"port {p} (checks.ib_ports) not found" for p in sorted(absent)]
    unknown = [_name(n) for n in nics if n.get("state") is None]
    nics = [n for n in nics if n.get("state") is not None]
    for n in nics:
        state, rate = n.get("state"), n.get("rate_gbps")
        if str(state).upper() != "ACTIVE":
            problems.append(f"{_name(n)} ({n.get('kind')}, {n.get('bus_id')}) state {state}")
        elif min_rate and rate is not None and float(rate) < min_rate:
            problems.append(f"{_name(n)} ({n.get('kind')}, {n.get('bus_id')}) rate {float(rate):g} Gb/s, "
                            f"expected >= {min_rate:g} (checks.ib_min_rate_gbps)")
    if problems:
        return CheckResult(CODE, "fail", "; ".join(problems))
    note = f"; state unknown: {', '.join(unknown)}" if unknown else ""
    if not nics:
        return CheckResult(CODE, "skip", "no IB/RoCE port" + note)
    rates = sorted({f"{float(n['rate_gbps']):g}" for n in nics if n.get("rate_gbps") is not None})
    return CheckResult(CODE, "ok", f"{len(nics)} IB/RoCE ports ACTIVE" + (f" at {'/'.join(rates)} Gb/s" if rates else "") + note)
