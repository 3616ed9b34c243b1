"""``watchdog replay PATH…``: run the full detector over recorded telemetry.

Each PATH is a log the replay readers know (``nvidia-smi`` CSV in its variants, ``dmon``,
the project's recordings, any CSV with ``--map``) or ``sim:SCENARIO[,…]`` to generate a
recording from the simulated node (``--duration``, ``--interval``, ``--gpus``, ``--model``,
``--seed``) so the product can be seen with no files at all.

The detector is fed the recording's frame in blocks of whole ticks (``--block-rows``,
default 131 072 rows, the engine's own block bound): block replay has exactly the
incremental semantics of live tick-by-tick evaluation (the engine guarantees it), at a
fraction of the cost.

Output: a table (times in UTC) or, with ``--json``, exactly one JSON object on stdout:
``{"incidents": [...], "sources": [{"path", "host", "gpus", "samples", "start", "end"}],
"rules": N}``. Several paths are replayed one after another, each with a fresh detector,
and their incidents concatenated. Progress goes to stderr, only on a terminal and never
with ``--json``.

Exit status: 0 when the replay ran (incidents or not: finding incidents is the command
doing its job); 1 with ``--fail-on SEVERITY`` when an incident of that severity or worse
was found; 2 for bad input (a file, a rule, an option).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.commands.common import add_tz_arg
from watchdog.incident import SEVERITIES, Incident, iso

BLOCK_ROWS = 131_072  # the engine's MAX_BLOCK_ROWS: fewer, larger blocks cost less per row
SIM_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated recordings start here


def register(subparsers: Any) -> None:
    """Add the ``replay`` sub-command (cheap imports only)."""
    p = subparsers.add_parser(
        "replay", help="run the detector over recorded telemetry (or a simulated node)",
        description="Run the full detector (the daemon's code) over recorded telemetry "
                    "(nvidia-smi CSV, dmon, recordings, any CSV with --map) or over a "
                    "simulated node (PATH = sim:SCENARIO), and list the incidents.",
        epilog="Exit status: 0 ran fine (with or without incidents); 1 an incident at or "
               "above --fail-on; 2 bad input. Times in the table are UTC.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="log file or recording, or sim:SCENARIO[,SCENARIO…]")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (incidents, sources, rule count) on stdout")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw a timeline with incidents shaded (several paths: FILE-2.png…)")
    p.add_argument("--rules", action="append", metavar="DIR_OR_FILE",
                   help="rule file or folder of *.yaml (repeatable; default: shipped rules)")
    p.add_argument("--map", action="append", default=[], metavar="METRIC=COLUMN,…",
                   help="map catalogue metrics onto a foreign CSV's columns")
    p.add_argument("--host", default=None, help="host name to report (default: from the log)")
    add_tz_arg(p)
    p.add_argument("--fail-on", choices=SEVERITIES, default=None, metavar="SEVERITY",
                   help="exit 1 when an incident of this severity or worse is found "
                        f"({' | '.join(SEVERITIES)})")
    p.add_argument("--block-rows", type=int, default=BLOCK_ROWS, metavar="N",
                   help=f"rows fed to the detector at a time (default {BLOCK_ROWS})")
    sim = p.add_argument_group("simulated recordings (PATH = sim:SCENARIO…)")
    sim.add_argument("--duration", default="30m", help="length to simulate (default 30m)")
    sim.add_argument("--interval", default="1s", help="sampling interval (default 1s)")
    sim.add_argument("--gpus", type=int, default=8, help="simulated GPUs (default 8)")
    sim.add_argument("--model", default="h100-sxm", help="h100-sxm | a100-pcie")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.set_defaults(func=run)


@dataclass
class Replayed:
    """One replayed input: where it came from, its frame, and the incidents found.

    ``frames``: the recording's frame, or the frames of the parts of a log read in parts
    (joined only when the whole is needed: ``--plot``); every GPU is in the first one.
    """

    path: str
    host: str
    frames: list[Any]
    incidents: list[Incident] = field(default_factory=list)

    @functools.cached_property
    def frame(self) -> Any:
        """The whole frame."""
        if len(self.frames) == 1:
            return self.frames[0]
        import pandas as pd

        return pd.concat(self.frames, ignore_index=True)

    def source_json(self) -> dict[str, Any]:
        """The ``sources`` entry of the JSON document."""
        full = [f for f in self.frames if len(f)]
        return {
            "path": self.path,
            "host": self.host,
            "gpus": gpu_count(full[0]) if full else 0,
            "samples": sum(len(f) for f in full),
            "start": iso(float(full[0]["ts"].iloc[0])) if full else None,
            "end": iso(float(full[-1]["ts"].iloc[-1])) if full else None,
        }


def gpu_count(frame: Any) -> int:
    """Distinct GPUs (uuids) in a frame: ``frame["uuid"].nunique()``, without hashing a
    million strings when every tick lists the first tick's GPUs in order."""
    import numpy as np

    ts = frame["ts"].to_numpy()
    uuid = frame["uuid"].to_numpy(dtype=object)
    n = len(uuid)
    if n == 0:
        return 0
    k = int(np.searchsorted(ts, ts[0], side="right"))
    first = uuid[:k].tolist()
    if k < n and n % k == 0 and len(set(first)) == k and bool((uuid[k:] == uuid[:-k]).all()):
        return k
    return int(frame["uuid"].nunique())


def detect(recording: Any, rules: Any, *, host: str | None = None,
           block_rows: int = BLOCK_ROWS, progress: Any = None) -> list[Incident]:
    """Run a fresh :class:`~watchdog.detect.Detector` over ``recording``'s frame.

    Blocks end on tick boundaries and each block carries the XID events up to the next
    block's first timestamp, so no tick and no event is split or lost. Returns every
    incident (active ones have ``resolved_at`` None).
    """
    from watchdog.detect import Detector

    if block_rows < 1:
        raise ValueError("block_rows must be positive")
    xids = sorted(getattr(recording, "xids", ()) or (), key=lambda x: x.ts)
    det = Detector(rules, host=host or recording.host, devices=list(recording.devices()),
                   metrics=[*recording.metrics, *(["xid"] if xids else [])])
    feed_blocks(det, recording.frame, xids, block_rows=block_rows, progress=progress)
    return list(det.finish())


def feed_blocks(det: Any, frame: Any, xids: list[Any], *, block_rows: int,
                progress: Any = None, ends_tick: bool = True) -> None:
    """Feed ``frame`` to ``det`` in blocks of about ``block_rows`` rows cut at ticks.

    ``ends_tick``: no later row has the frame's last time. Otherwise that tick may go on
    in the next frame (a log read in parts), and the detector holds its rows until then.
    XID events after the last row are fed only when it ends on a tick.
    """
    import numpy as np

    ts = frame["ts"].to_numpy()
    n, i, k = len(frame), 0, 0
    while i < n:
        j = min(n, i + block_rows)
        if j < n:  # end the block on a tick boundary
            j = int(np.searchsorted(ts, ts[j], side="left"))
            if j <= i:
                j = int(np.searchsorted(ts, ts[i], side="right"))
        t_next = float(ts[j]) if j < n else float("inf")
        k2 = k
        while k2 < len(xids) and xids[k2].ts < t_next:
            k2 += 1
        det.feed_frame(frame.iloc[i:j], xids[k:k2], complete=j < n or ends_tick)
        det.drain()  # transitions are for live notification; replay reports incidents
        if progress is not None:
            progress.update(j - i)
        i, k = j, k2
    if ends_tick and k < len(xids):  # events after the last sample (or no samples at all)
        det.feed_frame(frame.iloc[n:n], xids[k:])


def detect_parts(parts: Any, rules: Any, *, host: str | None = None,
                 block_rows: int = BLOCK_ROWS, progress: Any = None) -> list[Incident]:
    """:func:`detect` over a log read in parts (:mod:`watchdog.sources.replay.parts`):
    the detector works on each part while the next one is parsed. Returns the incidents
    (``parts.read`` holds the parts); raises ``NotInParts`` when the log must be read
    whole (then nothing is reported: the caller starts again)."""
    from watchdog.detect import Detector

    det = None
    rows = 0
    for part in parts:
        if det is None:
            det = Detector(rules, host=host or part.host, devices=list(part.devices()),
                           metrics=part.metrics)  # same columns in every part; no XIDs
        rows += len(part.frame)
        if progress is not None and parts.done_bytes:  # rows so far, scaled to the file
            progress.set_total(int(rows * parts.size / parts.done_bytes))
        feed_blocks(det, part.frame, [], block_rows=block_rows, progress=progress,
                    ends_tick=parts.aligned)
    if det is None:  # pragma: no cover - a Parts has at least one range
        raise ValueError("a log in parts without parts")
    return list(det.finish())


def open_input(path: str, args: argparse.Namespace, mapping: dict[str, str],
               in_parts: bool = True) -> Any:
    """A recording for ``path``: a log through the replay readers or a simulated node
    (``in_parts``: see :func:`~watchdog.sources.replay.open_log`)."""
    if path == "sim" or path.startswith("sim:"):
        from watchdog.units import parse_duration

        rec, _src = simulate(path, duration=parse_duration(args.duration, what="--duration"),
                             interval=parse_duration(args.interval, what="--interval"),
                             gpus=args.gpus, model=args.model, seed=args.seed, host=args.host)
        return rec
    if not in_parts:
        from watchdog.sources.replay import open_log

        return open_log(path, mapping=mapping or None, host=args.host, tz=args.tz,
                        in_parts=False)
    from watchdog.sources import SourceOptions, open_recorded

    return open_recorded(path, SourceOptions(host=args.host, mapping=mapping, tz=args.tz))


def simulate(spec: str, *, duration: float, interval: float = 1.0, gpus: int = 8,
             model: str = "h100-sxm", seed: int = 0, host: str | None = None,
             start: float = SIM_START) -> tuple[Any, Any]:
    """Generate a recording of ``duration`` s from the simulated node (``sim:…`` spec).

    Returns ``(Recording, SimSource)``; the source's ``ground_truth()`` says what was
    injected (the detection benchmark scores against it). Samples every ``interval`` s
    from ``start`` (a fixed time, so a replay of a simulation is reproducible).
    """
    import numpy as np
    import pandas as pd

    from watchdog import catalogue
    from watchdog.errors import InputError
    from watchdog.sources.replay import Recording
    from watchdog.sources.sim import SimSource

    if interval <= 0 or duration < interval:
        raise InputError(f"{spec}: --duration must be at least one --interval "
                         f"({duration:g} s < {interval:g} s)")
    src = SimSource.from_spec(spec, gpus=gpus, model=model, seed=seed, start=start, host=host)
    ts: list[float] = []
    uuids: list[str] = []
    index: list[int] = []
    lost: list[bool] = []
    cols: dict[str, list[float]] = {name: [] for name in catalogue.NAMES}
    xids = []
    nan = float("nan")
    for _t, samples in src.run(duration, interval):
        for s in samples:
            ts.append(s.ts)
            uuids.append(s.uuid)
            index.append(s.index)
            lost.append(s.lost)
            vals = s.values
            for name, col in cols.items():
                v = vals.get(name)
                col.append(nan if v is None else v)
            xids.extend(s.xids)
    data: dict[str, Any] = {"ts": np.asarray(ts, dtype=np.float64),
                            "uuid": np.asarray(uuids, dtype=object),
                            "index": np.asarray(index, dtype=np.int64),
                            "lost": np.asarray(lost, dtype=bool)}
    for name, col in cols.items():
        arr = np.asarray(col, dtype=np.float64)
        if not np.isnan(arr).all():  # a metric the node never reports: column absent
            data[name] = arr
    frame = pd.DataFrame(data)
    frame["uuid"] = frame["uuid"].astype(str)
    rec = Recording(path=spec, host=src.host, format="sim", frame=frame,
                    inventory=src.devices(), xids=sorted(xids, key=lambda x: x.ts))
    return rec, src


def replay(args: argparse.Namespace) -> tuple[list[Replayed], Any]:
    """Replay every path in ``args``; returns the results and the rule set used."""
    from watchdog.commands.common import parse_map
    from watchdog.detect import load_rules
    from watchdog.errors import InputError
    from watchdog.report.progress import Progress, should_show

    if args.block_rows < 1:
        raise InputError(f"--block-rows {args.block_rows}: expected a positive number")
    mapping = parse_map(args.map)
    from watchdog.units import check_tz

    check_tz(args.tz)
    rules = load_rules(args.rules or None)
    show = should_show(args.json)
    out: list[Replayed] = []
    for path in args.paths:
        got, tried = in_parts(path, args, mapping, rules, show)
        if got is not None:  # a large log, parsed on workers while the detector runs
            out.append(got)
            continue
        rec = open_input(path, args, mapping, in_parts=not tried)
        warn(getattr(rec, "warnings", ()))
        host = args.host or rec.host
        with Progress(len(rec.frame), Path(path).name, show) as bar:
            incidents = detect(rec, rules, host=host, block_rows=args.block_rows,
                               progress=bar)
        out.append(Replayed(path, host, [rec.frame], incidents))
    return out, rules


def warn(lines: Any) -> None:
    """Print the reader's warnings (data it dropped or repaired) on stderr."""
    for line in lines or ():
        print(f"watchdog: warning: {line}", file=sys.stderr)


def in_parts(path: str, args: argparse.Namespace, mapping: dict[str, str], rules: Any,
             show: bool) -> tuple[Replayed | None, bool]:
    """Replay a large nvidia-smi log read in parts (see :func:`detect_parts`). Returns the
    result (None when it is not such a log, or the parts cannot serve it: then it is read
    whole, as any input) and whether parts were tried."""
    if path == "sim" or path.startswith("sim:") or mapping:
        return None, False
    from watchdog.report.progress import Progress
    from watchdog.sources.replay import open_parts
    from watchdog.sources.replay.parts import NotInParts

    parts = open_parts(path, host=args.host, tz=args.tz)
    if parts is None:
        return None, False
    with parts, Progress(0, Path(path).name, show) as bar:
        try:
            incidents = detect_parts(parts, rules, host=args.host,
                                     block_rows=args.block_rows, progress=bar)
        except NotInParts:
            return None, True
        read = parts.read
        warn(parts.warnings())
        return Replayed(path, args.host or read[0].host, [p.frame for p in read],
                        incidents), True


def rule_count(rules: Any) -> int:
    """Number of rules in a RuleSet (``len`` or its ``rules`` attribute)."""
    try:
        return len(rules)
    except TypeError:
        return len(rules.rules)


def plot_paths(target: str, n: int) -> list[Path]:
    """``FILE.png`` for one input; ``FILE.png``, ``FILE-2.png``… for several."""
    p = Path(target)
    return [p] + [p.with_name(f"{p.stem}-{k}{p.suffix}") for k in range(2, n + 1)]


def run(args: argparse.Namespace) -> int:
    """Entry point of ``watchdog replay``."""
    results, rules = replay(args)
    incidents = [inc for r in results for inc in r.incidents]
    if args.json:
        doc = {"incidents": [inc.to_json() for inc in incidents],
               "sources": [r.source_json() for r in results],
               "rules": rule_count(rules)}
        sys.stdout.write(json.dumps(doc) + "\n")
    else:
        from watchdog.report.table import format_table, gpu_legend

        for r in results:
            s = r.source_json()
            print(f"{r.path}: host {s['host']}, {s['gpus']} GPUs, {s['samples']} samples, "
                  f"{s['start']} .. {s['end']}")
        print(format_table(incidents))
        legend = gpu_legend(incidents)
        if legend:
            print("GPU identities:\n" + legend)
    if args.plot:
        from watchdog.report.plot import plot_timeline

        for r, target in zip(results, plot_paths(args.plot, len(results)), strict=True):
            if len(r.frame) == 0:
                print(f"watchdog: {r.path}: no samples, no timeline drawn", file=sys.stderr)
                continue
            name = Path(r.path).name if not r.path.startswith("sim") else r.path
            title = name if r.host == Path(r.path).stem else f"{r.host}: {name}"
            plot_timeline(r.frame, r.incidents, target, title=title)
            print(f"watchdog: timeline written to {target}", file=sys.stderr)
    if args.fail_on is not None:
        floor = SEVERITIES.index(args.fail_on)
        if any(SEVERITIES.index(inc.severity) >= floor for inc in incidents):
            return 1
    return 0
