"""``watchdog record``: write the project's own recording format (``.wdrec``).

Live sources are sampled on an injected clock: the wall clock for ``nvml`` (and for
``sim`` with ``--realtime``), a manual clock for ``sim`` so that recording a simulated
hour takes seconds. A log file as ``--source`` is converted (every format ``watchdog
replay`` reads). Chunks are written as they fill, so a crash keeps everything
but the last chunk; Ctrl-C or SIGTERM (kill, timeout, systemd) ends the recording cleanly,
the last chunk written. Ends with a one-line summary.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from watchdog.commands.common import add_source_args
from watchdog.commands.live import Stop, ticks
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    from watchdog.clock import Clock
    from watchdog.sources import SourceOptions
    from watchdog.sources.base import LiveSource
    from watchdog.sources.replay.recording_writer import RecordingWriter

DEFAULT_DURATION = "10m"
#: The most samples ``--chunk`` may ask for: a chunk is buffered as samples before it is
#: written (about 3 KB each), so 16 384 costs ~50 MB on top of the ~70 MB the command
#: needs anyway, far below the unit's 300 MB (and far below the 1 048 576 rows a reader
#: accepts in one chunk).
MAX_CHUNK = 16_384


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record telemetry to a .wdrec file (or convert a log)",
                       description=__doc__.split("\n\n")[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_args(p, default="nvml")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="recording to write (conventionally *.wdrec; required)")
    p.add_argument("--list-metrics", action="store_true",
                   help="list the metric names (the --map targets) with unit and meaning, "
                        "and exit")
    p.add_argument("--duration", default=DEFAULT_DURATION, metavar="DURATION",
                   help=f"how much (clock) time to record, e.g. 90s, 10m, 1h; 100ms to 400d "
                        f"(default {DEFAULT_DURATION}; live sources only)")
    p.add_argument("--interval", default="1s", metavar="DURATION",
                   help="sampling period for live sources, 100ms to 1h (default 1s)")
    p.add_argument("--realtime", action="store_true",
                   help="sample a simulated node on the wall clock instead of a manual one")
    p.add_argument("--chunk", type=int, default=4096, metavar="SAMPLES",
                   help=f"samples per chunk: memory bound and most a crash can lose, 1 to "
                        f"{MAX_CHUNK} (default 4096)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from watchdog.commands.common import source_options
    from watchdog.commands.replay import sim_times
    from watchdog.errors import InputError
    from watchdog.sources import kind_of

    if args.list_metrics:
        print(list_metrics())
        return 0
    if not args.output:
        raise InputError("--output FILE is required (the recording to write)")
    options = source_options(args)
    # the ranges of a simulated node's replay; for nvml, up to 400 days of wall time
    duration, interval = sim_times(args.duration, args.interval)
    if not 1 <= args.chunk <= MAX_CHUNK:
        raise InputError(f"--chunk {args.chunk}: out of range (1 to {MAX_CHUNK} samples: a "
                         "chunk is held in memory until it is written)")
    kind = kind_of(args.source)
    if kind == "replay":
        if os.path.abspath(args.source) == os.path.abspath(args.output):
            raise InputError(f"--output {args.output}: would overwrite the source log")
        stats = convert_log(args.source, args.output, mapping=options.mapping or None,
                            host=options.host, tz=args.tz, chunk_rows=args.chunk)
    else:
        stats = record_live(args.source, options, args.output, duration=duration,
                            interval=interval, realtime=args.realtime, chunk_rows=args.chunk)
    print(summary(stats))
    return 0


def list_metrics() -> str:
    """The catalogue as ``--map`` targets: one line per metric (name, unit, what it is,
    other spellings), after the identity columns."""
    from watchdog import catalogue

    lines = ["identity: timestamp, index, uuid, name, pci.bus_id"]
    width = max(len(m.name) for m in catalogue.METRICS)
    for m in catalogue.METRICS:
        also = f" (also {', '.join(m.aliases)})" if m.aliases else ""
        lines.append(f"{m.name.ljust(width)}  {m.unit or '-':8} {m.help}{also}")
    return "\n".join(lines)


def convert_log(src: str, out: str, *, mapping: dict[str, str] | None, host: str | None,
                tz: str | None, chunk_rows: int = 4096) -> JsonDoc:
    """Convert a foreign log (or a recording) into a ``.wdrec`` file; returns stats."""
    from watchdog.sources.replay import open_log
    from watchdog.sources.replay.recording_writer import RecordingWriter

    rec = open_log(src, mapping=mapping, host=host, tz=tz)
    from watchdog.escape import line as one_line

    for w in rec.warnings:
        print(one_line(f"watchdog: warning: {w}"), file=sys.stderr)
    with RecordingWriter(out, host=rec.host, devices=rec.devices(), source=src,
                         chunk_rows=chunk_rows) as writer:
        writer.write_recording(rec)
    return _stats(writer, out, len(rec.devices()))


def record_live(spec: str, options: SourceOptions, out: str, *, duration: float, interval: float,
                realtime: bool = False, chunk_rows: int = 4096,
                source: LiveSource | None = None, clock: Clock | None = None) -> JsonDoc:
    """Sample a live source every ``interval`` s for ``duration`` s into ``out``.

    ``source`` and ``clock`` may be given (tests, embedding); otherwise they are made from
    ``spec``: a manual clock for ``sim`` unless ``realtime``, the wall clock otherwise.
    Ticks are at start, start + interval, … while < start + duration. If a slow read
    makes the clock overtake the schedule, the missed ticks are skipped, not bunched.
    """
    from watchdog.clock import ManualClock, WallClock
    from watchdog.sources import kind_of, open_live
    from watchdog.sources.replay.recording_writer import RecordingWriter

    if clock is None:
        wall = WallClock()
        clock = ManualClock(start=wall.now()) if kind_of(spec) == "sim" and not realtime \
            else wall
    start = clock.now()
    if source is None:
        source = open_live(spec, options, start)
    devices = source.devices()
    try:
        with RecordingWriter(out, host=source.host, devices=devices, source=spec,
                             chunk_rows=chunk_rows) as writer, Stop() as stop:
            try:
                for t in ticks(clock, start, duration, interval, stop):
                    writer.write(source.sample(t))
            except KeyboardInterrupt:  # off the main thread, where no handler of ours is
                stop.signal = "interrupted"
        if stop.signal:
            print(f"watchdog: {stop.signal}: closing the recording", file=sys.stderr)
    finally:
        source.close()
    return _stats(writer, out, len(devices))


def _stats(writer: RecordingWriter, out: str, gpus: int) -> JsonDoc:
    span = 0.0 if writer.first_ts is None or writer.last_ts is None else \
        writer.last_ts - writer.first_ts
    return {"path": out, "gpus": gpus, "samples": writer.rows, "span_s": span,
            "bytes": os.path.getsize(out)}


def summary(stats: JsonDoc) -> str:
    """``recorded 8 GPUs, 4800 samples over 10m00s, 212.4 kB -> node.wdrec``."""
    span = stats["span_s"]
    h, rem = divmod(round(span), 3600)
    m, s = divmod(rem, 60)
    span_txt = f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
    size = stats["bytes"]
    size_txt = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"
    gpus = f"{stats['gpus']} GPU{'' if stats['gpus'] == 1 else 's'}"
    return (f"recorded {gpus}, {stats['samples']} samples over {span_txt}, "
            f"{size_txt} -> {stats['path']}")
