"""The prolog's fast path: hand the job to the node daemon in one request over the hook socket.

Imports only the standard library, the message codec and the cached config (``hookconf``: no TOML,
no typing, no pyzmq, no logging; ``tests/unit/test_hook_imports.py`` keeps it so), because on this
path the interpreter's own start is most of the prolog's time. The daemon runs the prolog's steps
(``gpuperf.prolog.indaemon``) or declines with a reason; then, as when no daemon answers, the
prolog runs every step itself (``gpuperf.prolog.STEPS``) and records why the fast path was not taken.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# what the prolog's steps read from the hook's environment (jobctx, register, envplan)
ENV_PREFIXES = ("SLURM_", "SLURMD_", "SPANK_", "_SLURM_SPANK_OPTION_", "GPUPERF")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)


def hook_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of the hook's environment the daemon needs to run the prolog for this job."""
    return {k: v for k, v in environ.items() if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


class Outcome:
    """What the fast path did: ``exit_code`` when the daemon ran the prolog, else ``why`` not."""

    __slots__ = ("exit_code", "why", "daemon_down")

    def __init__(self, exit_code: int | None = None, why: str | None = None, daemon_down: bool = False):
        self.exit_code, self.why, self.daemon_down = exit_code, why, daemon_down


def client_outcome(value: str | None) -> Outcome | None:
    """What the compiled client's fallback says (``hookbase.fallback``): the daemon declined or is down (the
    fast path is not tried again), or None: ask the daemon here (the client could not, or there was none)."""
    from gpuperf.hookbase import fallback

    got = fallback.parse(value)
    if got is None or got[0] == "client":
        return None
    kind, why = got
    if kind == "declined":
        return Outcome(why=why or "the daemon declined")
    return Outcome(why=f"daemon unavailable: {why}", daemon_down=True)


def try_daemon(environ: Mapping[str, str]) -> Outcome:
    """Ask the daemon to run this prolog; never raises for a daemon that is absent, slow or refusing."""
    import os

    from gpuperf.files import config
    from gpuperf.hookbase import hookconf
    from gpuperf.daemon import hooksock

    cfg = hookconf.load_or_defaults()
    if cfg.degraded:
        return Outcome(why="broken config")
    if not cfg.daemon.prolog_fast_path:
        return Outcome(why="daemon.prolog_fast_path = false")
    if not os.path.exists(hooksock.path_of(cfg.daemon.socket_dir)):
        return Outcome(why="no daemon hook socket")  # no daemon: the full prolog, without waiting
    job = {"env": hook_env(environ), "config": {"source": cfg.source, "digest": config.digest(cfg)}}
    try:
        reply = hooksock.call(cfg.daemon.socket_dir, "prolog", job, float(cfg.daemon.request_timeout_s))
    except hooksock.HookSocketUnavailable as e:
        return Outcome(why=f"daemon unavailable: {e}", daemon_down=True)
    if not reply.get("ok"):
        return Outcome(why=f"daemon refused: {reply.get('error')}")
    if not reply.get("done"):
        return Outcome(why=str(reply.get("why")))
    code = reply.get("exit_code")
    return Outcome(exit_code=code if isinstance(code, int) and not isinstance(code, bool) else 0)
