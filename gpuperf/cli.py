"""The ``gpuperf`` command: subcommands registered by module name, imported only when used."""

from __future__ import annotations

import argparse
import importlib
import sys

from gpuperf import __version__

# name -> (module, one-line help). Each module has add_arguments(parser) and run(args) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "topology": ("gpuperf.commands.topology", "show or record this node's GPU/NUMA/NIC/PCIe topology"),
    "check": ("gpuperf.commands.check", "run node health checks (exit 0 healthy, 1 unhealthy, 2 could not check)"),
    "env": ("gpuperf.commands.env", "the NCCL/CUDA environment gpuperf would inject here, and why"),
    "report": ("gpuperf.commands.report", "a job's efficiency report (terminal, --json, --html)"),
    "jobs": ("gpuperf.commands.jobs", "list recent jobs with their class and wasted GPU-hours"),
    "fleet": ("gpuperf.commands.fleet", "GPUs and nodes ranked by deviation from their model's fleet median (admins)"),
    "top": ("gpuperf.commands.top", "live per-GPU view of this node's jobs"),
    "daemon": ("gpuperf.commands.daemon", "run the node daemon"),
    "tune": ("gpuperf.commands.tune", "measure NCCL settings on this node and write winning policy rules"),
    "doctor": ("gpuperf.commands.doctor", "check this host's gpuperf installation: hooks, plugin, daemon, collector (exit 0/1/2)"),
}


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, object | None]:
    """The parser; only the subcommand named in argv is imported (keeps hooks and --help fast)."""
    parser = argparse.ArgumentParser(prog="gpuperf", description="GPU job health, affinity, environment and efficiency for Slurm.")
    parser.add_argument("--version", action="version", version=f"gpuperf {__version__}")
    parser.add_argument("--config", help="config file (default $GPUPERF_CONFIG or /etc/gpuperf/config.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if a in COMMANDS), None)
    module = None
    for name, (modname, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            module = importlib.import_module(modname)
            module.add_arguments(p)
    return parser, module


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``gpuperf``."""
    argv = sys.argv[1:] if argv is None else argv
    parser, module = build_parser(argv)
    args = parser.parse_args(argv)
    if module is None:
        parser.print_help()
        return 2
    if args.config:
        import os

        os.environ["GPUPERF_CONFIG"] = args.config
    from gpuperf.files.config import ConfigError

    try:
        return int(module.run(args) or 0)
    except ConfigError as e:
        # every subcommand loads the config the same way: one place says so, exit 2 ("could not")
        print(f"gpuperf {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
