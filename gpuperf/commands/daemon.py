"""``gpuperf daemon [--backend SPEC] [--foreground] [--controller]``: the node daemon, or on the
controller host the controller service (``--controller``: node summaries, merges, AdminComments)."""

from __future__ import annotations

import argparse
import signal
import threading

from gpuperf.files import config as config_mod
from gpuperf.files import log


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``gpuperf daemon``."""
    p.add_argument("--backend", help="sampler: auto, nvml, dcgm or replay:FILE (default: daemon.backend)")
    p.add_argument("--foreground", action="store_true",
                   help="also log to stderr (the daemon never forks: systemd runs it as Type=simple)")
    p.add_argument("--controller", action="store_true",
                   help="run the controller service (node summaries, merges, AdminComments) instead of the node daemon")


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; exit 2 when it cannot start (config, socket, sampler)."""
    cfg = config_mod.load()  # a ConfigError is reported by gpuperf.cli (exit 2)
    name = "collector" if args.controller else "daemon"
    log.setup(name, cfg.general.log_file, cfg.general.log_level, stderr=args.foreground or not cfg.general.log_file)
    _prepare_state_dir(cfg, log.get(name))
    if args.controller:
        from gpuperf.controller.service import serve as controller_serve, tune_gc

        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        tune_gc()
        try:
            controller_serve(cfg, stop=stop)
        except OSError as e:  # its store (one of a newer gpuperf, unreadable), its port: say so, exit 2
            log.get("controller").error("controller service cannot start: %s", e)
            return 2
        return 0
    from gpuperf.daemon.server import serve

    lg = log.get("daemon")
    return serve(cfg, args.backend, prolog=prolog_steps(lg), epilog=epilog_step(lg), taskenv=taskenv_step(lg))


def _warm(logger, what: str, load):
    """``load()`` (imports a hook's steps now, so the first job does not wait for them); None, logged, when
    they cannot be imported: a broken install costs the daemon's service of that hook, never the daemon."""
    try:
        return load()
    except Exception as e:  # noqa: BLE001 - that hook then runs its steps in Python
        logger.error("%s unavailable: %s: %s", what, type(e).__name__, e)
        return None


def prolog_steps(logger):
    """The prolog's steps for the daemon's fast path (``prolog.indaemon.run``); None when unavailable."""
    def load():
        from gpuperf.prolog import affinityplan, envplan, indaemon  # noqa: F401 - the steps it runs, warm
        return indaemon.run
    return _warm(logger, "prolog fast path", load)


def epilog_step(logger):
    """The epilog's step for the compiled hook client (``epilog.indaemon.run``); None when unavailable."""
    def load():
        from gpuperf.epilog import indaemon
        return indaemon.run
    return _warm(logger, "epilog in the daemon", load)


def taskenv_step(logger):
    """The TaskProlog's answer for the compiled hook client (``prolog.taskdaemon.run``); None when unavailable."""
    def load():
        from gpuperf.prolog import taskdaemon
        return taskdaemon.run
    return _warm(logger, "TaskProlog in the daemon", load)


def _prepare_state_dir(cfg, logger) -> None:
    """state_dir as ``general.state_group`` says, before a store opens in it (each start: after systemd's
    StateDirectory= handling); a problem is logged and the stores stay private."""
    from gpuperf.files import statefiles

    try:
        statefiles.prepare_state_dir(cfg.general.state_dir, cfg.general.state_group)
    except (OSError, LookupError) as e:
        logger.error("state directory %s: %s", cfg.general.state_dir, e)
