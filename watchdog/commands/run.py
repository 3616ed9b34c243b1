"""``watchdog run``: the daemon. Samples on a schedule, detects, notifies.

With no ``--source`` and no config, it uses NVML when a driver is present; on a machine
without one it runs the simulated demo node with an injected hung collective at 30x
speed, so a newcomer sees a hang detected and alerted within seconds. A config file or
an explicit ``--source nvml`` never falls back to the simulator (a GPU node whose driver
broke must say so, not report a simulated healthy node).
"""

from __future__ import annotations

import argparse
import logging
import sys

from watchdog.commands.common import add_source_args
from watchdog.units import check_tz

DEMO_SPEC = "sim:comm_hang(for=4m)@2m"
DEMO_SPEED = 30.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the monitoring daemon",
                       description=__doc__.split("\n\n")[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="YAML config (see config/watchdog.yaml)")
    add_source_args(p, default="auto")
    p.add_argument("--interval", default=None, metavar="DURATION",
                   help="sampling period (default 1s)")
    p.add_argument("--speed", type=float, default=None,
                   help="run a simulated node this many times faster than real time")
    p.add_argument("--rules", action="append", default=[], metavar="PATH",
                   help="rule file or folder (default: the shipped rules)")
    p.add_argument("--duration", default=None, metavar="DURATION",
                   help="stop after this much (clock) time; default: run until stopped")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from watchdog import config as config_mod
    from watchdog.agent import Agent
    from watchdog.clock import WallClock
    from watchdog.commands.common import parse_map
    from watchdog.detect import Detector, load_rules
    from watchdog.errors import InputError, SourceUnavailable
    from watchdog.notify_console import ConsoleNotifier
    from watchdog.sources import SourceOptions, kind_of, open_live
    from watchdog.units import parse_duration

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # APScheduler logs every run at INFO and every coalesced run at WARNING; at --speed a
    # skipped run is expected, so keep its chatter out of the journal.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    cfg = config_mod.load(args.config) if args.config else config_mod.Config()
    spec = args.source if args.source != "auto" else cfg.source
    interval = parse_duration(args.interval, what="--interval") if args.interval else cfg.interval
    if interval <= 0:
        raise InputError("--interval must be positive")
    speed = args.speed if args.speed is not None else cfg.speed
    options = SourceOptions(host=args.host or cfg.host, mapping=parse_map(args.map),
                            sim_gpus=args.gpus if args.gpus != 8 else cfg.sim_gpus,
                            sim_model=args.model if args.model != "h100-sxm" else cfg.sim_model,
                            sim_seed=args.seed or cfg.sim_seed, tz=check_tz(args.tz))
    demo = False
    if spec == "auto":
        try:
            source = open_live("nvml", options, start=0.0)
        except SourceUnavailable as e:
            print(f"watchdog: {e}\nwatchdog: no GPU here, so this is the simulated demo node: "
                  f"8 H100s whose job hangs in a collective, at {DEMO_SPEED:.0f}x speed. "
                  "Use --source nvml to insist on real GPUs. Ctrl-C stops.",
                  file=sys.stderr)
            spec, demo = DEMO_SPEC, True
            speed = DEMO_SPEED if args.speed is None else speed
        else:
            spec = "nvml"
    if kind_of(spec) == "replay":
        raise InputError(f"--source {spec}: `watchdog run` needs a live source "
                         "(nvml or sim); use `watchdog replay` for logs")
    if kind_of(spec) != "sim" and speed != 1.0:
        raise InputError("--speed only applies to a simulated node (--source sim…)")
    clock = WallClock(speed=speed)
    if spec != "nvml" or demo:
        source = open_live(spec, options, start=clock.now())
    rules = load_rules(list(args.rules) or list(cfg.rules) or None)
    detector = Detector(rules, host=source.host, devices=source.devices())
    agent = Agent(source, detector, clock, [ConsoleNotifier()])
    stop_at = None
    if args.duration:
        stop_at = clock.now() + parse_duration(args.duration, what="--duration")
    print(f"watchdog: watching {len(source.devices())} GPUs on {source.host} "
          f"(source {spec}, every {interval:g}s{f', {speed:g}x speed' if speed != 1 else ''}, "
          f"{len(rules)} rules)", file=sys.stderr)
    try:
        _schedule(agent, clock, interval, speed, stop_at)
    finally:
        agent.close()
    return 0


def _schedule(agent, clock, interval: float, speed: float,  # type: ignore[no-untyped-def]
              stop_at: float | None) -> None:
    """Run ``agent.tick`` every ``interval`` clock-seconds with APScheduler until stopped."""
    import threading

    from apscheduler.schedulers.background import BackgroundScheduler

    done = threading.Event()

    def job() -> None:
        agent.tick()
        if stop_at is not None and clock.now() >= stop_at:
            done.set()

    sched = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                              "misfire_grace_time": None})
    job()  # first tick now rather than one interval later (before the scheduler runs one)
    sched.add_job(job, "interval", seconds=interval / speed, id="sample")
    sched.start()
    try:
        while not done.wait(0.5):
            pass
    finally:
        sched.shutdown(wait=True)
