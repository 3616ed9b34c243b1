"""``watchdog run``: the daemon. Samples on a schedule, detects, records, notifies.

With a config file (production: ``--config /etc/nvml-watchdog/watchdog.yaml``) it watches
the real GPUs through NVML unless the file names another source, and never falls back to
the simulator: on a node whose driver is missing it stays up, raises one node-level
nvml_error incident and retries. With no config and no ``--source`` it watches NVML when a
driver is present; on a machine without one it runs the simulated demo node (a hung
collective at 30x speed), so a newcomer sees a hang detected and alerted within seconds.
"""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from watchdog.commands.common import add_source_args
from watchdog.units import check_tz

if TYPE_CHECKING:
    from watchdog.service.config import Config

DEMO_SPEC = "sim:comm_hang(for=4m)@2m"
DEMO_SPEED = 30.0
MAX_RUN_S = 3650 * 86400.0  # --duration: at most 10 years


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the monitoring daemon",
                       description=__doc__.split("\n\n")[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="Signals: SIGTERM/SIGINT stop (state saved, exit 0); SIGHUP "
                              "reloads the config and rules (a bad one is logged and the "
                              "running one kept). Under systemd (Type=notify) it sends "
                              "READY=1, STATUS= and WATCHDOG=1.")
    p.add_argument("--config", metavar="FILE", help="YAML config (see config/watchdog.yaml)")
    add_source_args(p, default=None, sim_defaults=False)
    p.add_argument("--interval", default=None, metavar="DURATION",
                   help="sampling period (default 1s)")
    p.add_argument("--speed", type=float, default=None,
                   help="run a simulated node this many times faster than real time")
    p.add_argument("--rules", action="append", default=[], metavar="PATH",
                   help="rule file or folder (default: the shipped rules)")
    p.add_argument("--state-dir", default=None, metavar="DIR",
                   help="where learned state, incidents and status live (default: config "
                        "state_dir, $STATE_DIRECTORY, or ~/.local/state/nvml-watchdog)")
    p.add_argument("--duration", default=None, metavar="DURATION",
                   help="stop after this much (clock) time; default: run until stopped")
    p.add_argument("--shadow", action="store_true",
                   help="run beside the node's agent on the same GPUs (a config or a rule "
                        "being tried out): detects and records, never notifies. Without "
                        "it a second agent on the same GPUs is refused (exit 2)")
    p.set_defaults(func=run)


def _logging() -> None:
    """One log format for the daemon, journald priorities under systemd, no secrets
    (:mod:`watchdog.logs`)."""
    from watchdog.logs import setup

    setup()


def _settings(args: argparse.Namespace) -> tuple[Config, str, float, float]:
    """The config (file or defaults) with command-line values on top:
    ``(cfg, spec, interval, speed)``. ``spec`` is ``auto`` only without config and --source.
    ``--interval`` and ``--speed`` have the config's ranges (``watchdog.config.RANGES``)."""
    from watchdog import config as config_mod
    from watchdog.units import duration_in, number_in

    cfg = config_mod.load(args.config) if args.config else config_mod.Config()
    spec = args.source or (cfg.source if args.config else "auto")
    lo, hi = config_mod.RANGES["interval"]
    interval = (duration_in(args.interval, lo, hi, what="--interval")
                if args.interval else cfg.interval)
    lo, hi = config_mod.RANGES["speed"]
    speed = (float(number_in(args.speed, lo, hi, what="--speed", lo_open=True))
             if args.speed is not None else cfg.speed)
    return cfg, spec, interval, speed


def run(args: argparse.Namespace) -> int:
    from watchdog import config as config_mod
    from watchdog.clock import WallClock
    from watchdog.commands.common import gpu_model_arg, parse_map
    from watchdog.config import RANGES
    from watchdog.errors import InputError, SourceUnavailable
    from watchdog.sources import SourceOptions, check_live, kind_of, open_live
    from watchdog.units import duration_in

    _logging()
    cfg, spec, interval, speed = _settings(args)
    if args.gpus is not None and not 1 <= args.gpus <= 256:
        raise InputError(f"--gpus {args.gpus}: expected 1..256")
    lo, hi = RANGES["sim_seed"]
    if args.seed is not None and not lo <= args.seed <= hi:
        raise InputError(f"--seed {args.seed}: expected {lo:.0f}..{hi:.0f}")
    stop_after = (duration_in(args.duration, 0.0, MAX_RUN_S, what="--duration")
                  if args.duration else None)
    options = SourceOptions(
        host=args.host or cfg.host, mapping=parse_map(args.map),
        sim_gpus=args.gpus if args.gpus is not None else cfg.sim_gpus,
        sim_model=gm if (gm := gpu_model_arg(args)) is not None else cfg.sim_model,
        sim_seed=args.seed if args.seed is not None else cfg.sim_seed,
        call_timeout=cfg.call_timeout, tz=check_tz(args.tz))
    demo = False
    if spec == "auto":  # no config, no --source: real GPUs if there are any, else the demo
        try:
            open_live("nvml", options, start=0.0).close()
            spec = "nvml"
        except SourceUnavailable as e:
            log = logging.getLogger("watchdog.agent")
            log.warning("%s", getattr(e, "cause", e))
            log.warning("no GPU here, so this is the simulated demo node: 8 H100s whose job "
                        "hangs in a collective, at %.0fx speed. Use --source nvml to insist "
                        "on real GPUs. Ctrl-C stops.", DEMO_SPEED)
            spec, demo = DEMO_SPEC, True
            speed = DEMO_SPEED if args.speed is None else speed
    if kind_of(spec) == "replay":
        raise InputError(f"--source {spec}: `watchdog run` needs a live source "
                         "(nvml or sim); use `watchdog replay` for logs")
    if kind_of(spec) != "sim" and speed != 1.0:
        raise InputError("--speed only applies to a simulated node (--source sim…)")
    check_live(spec, options)  # a sim spec whole, now: a typo is one line, not one per tick
    from watchdog.service.agent import build

    agent = build(cfg, spec=spec, options=options, interval=interval, speed=speed,
                  rules_override=list(args.rules), state_dir=args.state_dir, demo=demo,
                  clock=WallClock(speed=speed), stop_after=stop_after,
                  load_config=config_mod.load, shadow=args.shadow)
    return agent.serve()
