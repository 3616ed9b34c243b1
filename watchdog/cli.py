"""The ``watchdog`` command line: argument parsing and the error boundary.

Every :class:`~watchdog.errors.WatchdogError` becomes one line on stderr and its exit
code; anything else is a bug and is reported as one line too (``--debug`` shows the
traceback). Sub-commands live in ``watchdog.commands.<name>``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import watchdog.threads  # noqa: F401 - first: caps math-library thread pools before numpy
from watchdog import __version__
from watchdog.commands import COMMANDS
from watchdog.errors import WatchdogError, error_line


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser with every sub-command registered (``only``: that one alone)."""
    p = argparse.ArgumentParser(
        prog="watchdog",
        description="Detect hung collectives, stalls, throttling, memory pressure and "
                    "hardware faults on GPU nodes.",
    )
    p.add_argument("--version", action="version", version=f"nvml-watchdog {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks for internal errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        try:
            mod = importlib.import_module(f"watchdog.commands.{name}")
        except ModuleNotFoundError as e:  # a command not built yet
            if e.name != f"watchdog.commands.{name}":
                raise
            continue
        mod.register(sub)
    return p


def _command(argv: list[str]) -> str | None:
    """The sub-command ``argv`` names, when its first word is one: only that one's module
    is imported and registered. Why: registering all nine imported every command module,
    16 ms of CPU on each ``watchdog check`` (run by Slurm and Kubernetes on every node,
    budgeted against ``gpustat --json``). Anything else (no command, a typo, ``--help``)
    gets the full parser, and with it the full usage and error."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser(_command(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except WatchdogError as e:
        print(error_line(e), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("watchdog: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        if args.debug:
            raise
        print(f"watchdog: internal error: {type(e).__name__}: {e} "
              "(this is a bug; rerun with --debug and report it)", file=sys.stderr)
        return 70
