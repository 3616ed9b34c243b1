"""``watchdog train``: fit the anomaly model on healthy telemetry and write it to a file.

The source is a log or recording (PATH), the simulated node (``sim[:SCENARIO…]``), or the
real GPUs (``nvml``: sampled for ``--duration``, on the monotonic clock; SIGTERM or
Ctrl-C ends the sampling early and fits on what was read). Windows that overlap an incident the
rules find are left out. The file is read by ``watchdog replay --model FILE`` and the
daemon's config ``model: FILE``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from watchdog.commands.common import add_source_args
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    import pandas as pd

    from watchdog.sources.replay.frame import Recording

MIN_BUSY_MIN = 10.0  # busy minutes per GPU, as replay --model auto


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``train`` sub-command (cheap imports only)."""
    p = sub.add_parser("train", help="fit the anomaly model on healthy telemetry",
                       description=__doc__.split("\n\n")[1],
                       epilog="Exit status: 0 written; 2 bad input or too little data; 3 "
                              "the GPUs cannot be read.")
    add_source_args(p, default=None)
    p.add_argument("--duration", default=None, metavar="DURATION",
                   help="how long to sample (nvml, default 2h) or simulate (sim, default 2h)")
    p.add_argument("--interval", default="1s", help="sampling interval (nvml, sim)")
    p.add_argument("--output", required=True, metavar="MODEL", help="model file to write")
    p.set_defaults(func=run)


def _frame(args: argparse.Namespace, duration: float, interval: float
           ) -> tuple[pd.DataFrame, str, str]:
    """``(frame, host, gpu model)`` of the training data."""
    from watchdog.anomaly.offline import gpu_model_of
    from watchdog.commands.common import gpu_model_arg, source_options
    from watchdog.pipeline.replay import ReplayOptions, open_input
    from watchdog.sources import is_sim, kind_of
    from watchdog.sources.sim.frames import simulate

    spec = args.source
    if is_sim(spec):
        key = gpu_model_arg(args) or "h100-sxm"
        rec, _src = simulate(spec, duration=duration, interval=interval, gpus=args.gpus,
                             model=key, seed=args.seed, host=args.host)
        return rec.frame, rec.host, gpu_model_of(rec.frame, key)
    if kind_of(spec) == "replay":
        rec = open_input(spec, ReplayOptions(mapping=source_options(args).mapping,
                                             host=args.host, tz=args.tz), in_parts=False)
        return rec.frame, rec.host, _name(rec)
    return _sample_nvml(args, duration, interval)


def _name(rec: Recording) -> str:
    names = [d.name for d in rec.devices() if getattr(d, "name", None)]
    from watchdog.anomaly.offline import gpu_model_of

    return names[0] or "unknown" if names else gpu_model_of(rec.frame)


def _sample_nvml(args: argparse.Namespace, duration: float, interval: float
                 ) -> tuple[pd.DataFrame, str, str]:
    """Sample the real GPUs for ``duration`` s into a frame: ticks on the monotonic
    clock (a wall-clock step neither stretches nor cuts the hours of sampling), and
    SIGTERM or Ctrl-C ending the sampling early, the model then fitted on what was read
    (:mod:`watchdog.commands.live`)."""
    import sys

    import pandas as pd

    from watchdog.anomaly import features as F
    from watchdog.clock import WallClock
    from watchdog.commands.common import source_options
    from watchdog.commands.live import Stop, ticks
    from watchdog.sources import open_live

    clock = WallClock()
    start = clock.now()
    src = open_live("nvml", source_options(args), start=start)
    rows: list[JsonDoc] = []
    try:
        with Stop() as stop:
            for now in ticks(clock, start, duration, interval, stop):
                for s in src.sample(now):
                    rows.append({"ts": now, "uuid": s.uuid, "index": s.index,
                                 "lost": s.lost, **{m: s.values.get(m) for m in F.METRICS}})
        if stop.signal:
            print(f"watchdog: {stop.signal}: sampling ended after "
                  f"{(clock.now() - start) / 60:.1f} of {duration / 60:.0f} min; fitting on "
                  "what was read", file=sys.stderr)
        names = [d.name for d in src.devices() if d.name]
    finally:
        src.close()
    frame = pd.DataFrame(rows).astype({m: float for m in F.METRICS}, errors="ignore")
    return frame, src.host, names[0] if names else "unknown"


def run(args: argparse.Namespace) -> int:
    """Entry point of ``watchdog train``."""
    from pathlib import Path

    from watchdog.anomaly import features as F
    from watchdog.anomaly import persist, train
    from watchdog.anomaly.offline import fit_grid
    from watchdog.detect import load_rules
    from watchdog.errors import InputError
    from watchdog.pipeline.core import build_detector, feed_blocks
    from watchdog.units import parse_duration

    if not args.source:
        raise InputError("--source is required: a log PATH, nvml, or sim[:SCENARIO,…]")
    if not Path(args.output).resolve().parent.is_dir():
        raise InputError(f"--output {args.output}: no such folder")
    duration = parse_duration(args.duration or "2h", what="--duration")
    interval = parse_duration(args.interval, what="--interval")
    if duration <= 0 or interval <= 0:
        raise InputError("--duration and --interval must be positive")
    frame, host, gpu_model = _frame(args, duration, interval)
    if len(frame) == 0:
        raise InputError(f"{args.source}: no samples to train on")
    rules = load_rules(None)
    det = build_detector(rules, host=host, devices=[], mode="block")
    feed_blocks(det, frame, [], block_rows=131_072)
    incidents = det.finish()
    grid = F.grid_from_frame(frame)
    feats = F.compute(grid)
    busy = train.busy_minutes(feats, grid.step)
    if len(busy) == 0 or busy.min() < MIN_BUSY_MIN:
        raise InputError(f"{args.source}: too little data to train: "
                         f"{busy.min() if len(busy) else 0:.0f} busy minutes on the least "
                         f"busy GPU, at least {MIN_BUSY_MIN:.0f} needed (an hour or more of "
                         "normal work is better)")
    try:
        model, stats = fit_grid(grid, incidents, gpu_model, seed=args.seed or 0,
                                feats=feats)
    except train.NotEnoughData as e:
        raise InputError(f"{args.source}: too little data to train: {e} (train on at "
                         "least an hour of normal work)") from None
    size = persist.save(model, args.output)
    print(f"watchdog: model written to {args.output} ({size} bytes): {gpu_model}, "
          f"{len(grid.uuids)} GPUs, {int(stats['windows'])} windows, "
          f"{busy.min():.0f} busy minutes on the least busy GPU, "
          f"{len(incidents)} incident(s) left out, threshold {model.threshold:.3f}, "
          f"fit {stats['fit_s']:.1f} s", file=sys.stderr)
    if train.coarse(model):
        print(f"watchdog: warning: {train.coarse_note(model)}: train on a longer span of "
              "normal work", file=sys.stderr)
    return 0
