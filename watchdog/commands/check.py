"""``watchdog check``: one-shot health probe with Nagios exit codes.

Only argparse wiring and output here; the work lives in :mod:`watchdog.check` and is
imported inside :func:`run` so that ``watchdog --help`` stays cheap.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn

from watchdog.check.modes import CATEGORIES, MODES
from watchdog.commands.common import add_source_args

if TYPE_CHECKING:
    from watchdog.check.verdict import Verdict

EPILOG = """\
exit codes (Nagios plugin convention; usable as a Slurm HealthCheckProgram, an NHC check
or a Kubernetes exec probe):
  0 OK        every GPU healthy
  1 WARNING   look at it: thermal slowdown (SW or HW thermal), application XID (13, 31,
              43...), PCIe link narrow / slow while busy / replaying, NVLink errors,
              memory at the limit, hang signature (the rule pages it as critical after
              it holds; a short check cannot tell a hung collective from a checkpoint
              wait: watch it with `watchdog run`)
  2 CRITICAL  drain it: fewer GPUs than --expect-gpus (or none), GPU lost, fatal XID
              (48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120, 140), uncorrectable ECC,
              row remap pending or failed, HW slowdown or power brake without a thermal
              cause, NVML call timed out (wedged driver)
  3 UNKNOWN   could not judge: no NVML library or driver, NVML init failed, an NVML read
              error on a GPU, a bad command line or --source path, an internal error.
              Bad input is UNKNOWN here (not 2 as in other commands): a typo in a probe's
              arguments must not make Slurm or Nagios drain a healthy node.
With several problems the node takes the worst: CRITICAL > WARNING > UNKNOWN > OK.

--mode slurm (a Prolog/Epilog, where any non-zero exit drains): 1 only for a critical
  lost GPU (or one missing from --expect-gpus), uncorrectable ECC or fatal XID; 0 for
  everything else, a failure to judge included. One line.
--mode npd (node-problem-detector's custom plugin): 0 OK, 1 problem, 2 cannot judge;
  one line of at most 80 characters. --category picks one NodeCondition
  (GpuWatchdog<Category>: lost, ecc, xid, driver, slowdown) or the Event rule (events:
  warnings, a hung collective).
--agent reads the running agent's judgment (its state directory: --state-dir, the
  --config's state_dir, else $STATE_DIRECTORY) instead of sampling: no NVML, a
  database read; UNKNOWN when the agent is not running or its status is stale.
What the rules describe is judged by the rules (the shipped ones, or --rules), with their
severity, over the burst ("the condition holds now": for: is not applied); rules that need
minutes (stall, straggler) are left to `watchdog run`.

sources:
  nvml        (default) read the GPUs for --duration, one reading every --interval
  sim[:S,...] a simulated node on a simulated clock, judged --at a point in its history
              (default: when the last injected fault has had time to show)
  PATH        a log or recording: its last --duration of samples are judged
"""


def _duration(text: str) -> float:
    """argparse type for durations (``2s``, ``500ms``, ``1m``, bare seconds)."""
    from watchdog.errors import InputError
    from watchdog.units import parse_duration

    try:
        return parse_duration(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a GPU count (0 or more)")
    return n


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``check`` sub-command."""
    p = subparsers.add_parser(
        "check", help="one-shot health probe (exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)",
        description="Sample the GPUs briefly and judge their health now: GPU count, lost "
                    "GPUs, NVML errors and timeouts, XIDs, ECC and row remaps, thermal and "
                    "HW slowdown, PCIe link, memory at the limit, the hang signature.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--expect-gpus", type=_count, default=None, metavar="N",
                   help="CRITICAL when fewer GPUs are found (WARNING when more)")
    p.add_argument("--duration", type=_duration, default=1.0, metavar="DURATION",
                   help="how long to sample, 0 to 10m (default 1s; 0 = a single reading); "
                        "for a log, how much of its end to judge")
    p.add_argument("--interval", type=_duration, default=0.25, metavar="DURATION",
                   help="time between readings, 100ms to 1h (default 0.25s: 4 readings in "
                        "the default 1s)")
    p.add_argument("--call-timeout", type=_duration, default=2.0, metavar="DURATION",
                   help="deadline for each NVML call, 100ms to 1m (default 2s); a call that "
                        "misses it is a wedged driver: CRITICAL")
    p.add_argument("--at", type=_duration, default=None, metavar="DURATION",
                   help="sim only: judge the simulated node this long after its start, at "
                        "most 1d (default: the last injected fault's onset plus its time to "
                        "show, or 10m for a healthy node)")
    p.add_argument("--rules", action="append", metavar="DIR_OR_FILE",
                   help="rule file or folder of *.yaml (repeatable; default: the shipped "
                        "rules): the probe judges with the same rules as run and replay")
    p.add_argument("--no-color", action="store_true",
                   help="no ANSI colour (also off when NO_COLOR is set or stdout is not a "
                        "terminal)")
    sched = p.add_argument_group("schedulers")
    sched.add_argument("--mode", choices=MODES, default="nagios",
                       help="exit codes as read by: nagios (default: 0-3), slurm (a Prolog/"
                            "Epilog: non-zero only to drain), npd (node-problem-detector: "
                            "0 OK, 1 problem, 2 unknown)")
    sched.add_argument("--category", choices=CATEGORIES, default=None,
                       help="npd: judge one NodeCondition's kinds, or the Event rule "
                            "(events); default: every condition")
    sched.add_argument("--agent", action="store_true",
                       help="the running agent's judgment (its state), no NVML of its own")
    sched.add_argument("--state-dir", metavar="DIR",
                       help="--agent: the agent's state directory")
    sched.add_argument("--config", metavar="FILE",
                       help="--agent: the agent's config (for its state_dir)")
    p.error = _unknown_error.__get__(p)
    known = p.parse_known_args

    def strict(args=None, namespace=None):  # unknown options: our exit 3, not the top's 2
        words = sys.argv[1:] if args is None else list(args)
        p._mode = _mode_in(words)
        # --json (or an abbreviation argparse accepts) anywhere: a usage error is JSON too
        p._wants_json = any(len(w) >= 3 and "--json".startswith(w) for w in words)
        ns, extras = known(args, namespace)
        if extras:
            p.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, []

    p.parse_known_args = strict
    p.set_defaults(func=run)


def _mode_in(argv: list[str]) -> str:
    """The ``--mode`` a command line asks for, read before parsing (a usage error must
    exit as that mode reads "cannot judge")."""
    for i, a in enumerate(argv):
        value = a.partition("=")[2] if a.startswith("--mode=") else \
            argv[i + 1] if a == "--mode" and i + 1 < len(argv) else None
        if value in MODES:
            return value
    return "nagios"


def _unknown_error(self: argparse.ArgumentParser, message: str) -> NoReturn:
    """Usage errors are "cannot judge": exit 3 (UNKNOWN) in the Nagios mode, not argparse's
    2 (which reads as CRITICAL); 0 in slurm mode (a typo must not drain), 2 in npd mode.
    With ``--json`` on the command line, stdout is the UNKNOWN verdict as JSON (the shape
    of every ``check --json``), so a script parsing it never meets plain text."""
    self.print_usage(sys.stderr)
    print(f"watchdog check: error: {message}", file=sys.stderr)
    mode = getattr(self, "_mode", "nagios")
    if mode == "nagios":
        if getattr(self, "_wants_json", False):
            from watchdog.check import report
            from watchdog.check.main import unknown

            print(report.to_json(unknown(argparse.Namespace(),
                                         f"bad command line: {message}")))
        else:
            print("WATCHDOG UNKNOWN - bad command line")
        raise SystemExit(3)
    print("cannot judge: bad command line")
    raise SystemExit(0 if mode == "slurm" else 2)


def run(args: argparse.Namespace) -> int:
    """Probe, judge, print; returns the Nagios exit code."""
    from watchdog.check import report, table
    from watchdog.check.main import probe, unknown
    from watchdog.errors import WatchdogError

    try:
        if args.agent:
            verdict = _agent(args)
        else:
            from watchdog.commands.common import source_options

            verdict = probe(args, source_options(args))
    except WatchdogError as e:
        from watchdog.errors import error_line

        print(error_line(e), file=sys.stderr)
        verdict = unknown(args, str(e))
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a probe that cannot judge must say UNKNOWN, never crash
        if getattr(args, "debug", False):
            raise
        msg = f"internal error: {type(e).__name__}: {e} (this is a bug; rerun with --debug)"
        print(f"watchdog: {msg}", file=sys.stderr)
        verdict = unknown(args, msg)
    from watchdog.check import modes

    if args.json:
        print(report.to_json(verdict))
    elif args.mode != "nagios":
        print(modes.line(verdict, args.mode, args.category))
    else:
        color = table.use_color(sys.stdout, args.no_color)
        sys.stdout.write(table.render(verdict, color=color))
    return modes.exit_code(verdict, args.mode, args.category)


def _agent(args: argparse.Namespace) -> Verdict:
    """The verdict of the agent whose state directory the options name."""
    from watchdog.check import agent
    from watchdog.clock import WallClock
    from watchdog.errors import InputError
    from watchdog.store import resolve_state_dir

    if args.source != "nvml" or args.map:
        raise InputError("--agent reads the agent's judgment; it takes no --source")
    configured = args.state_dir
    if configured is None and args.config:
        from watchdog import config as config_mod

        configured = config_mod.load(args.config).state_dir
    return agent.verdict(resolve_state_dir(configured), WallClock().now(), args.host)
