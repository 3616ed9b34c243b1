"""Recorded telemetry -> incidents: the replay half of the one pipeline.

``watchdog replay`` and the benchmarks call this; the live daemon
(:mod:`watchdog.pipeline.live`) feeds the same :class:`~watchdog.detect.Detector` one tick
at a time. The detector is fed a recording's frame in blocks of whole ticks: block replay
has exactly the incremental semantics of live tick-by-tick evaluation (the engine
guarantees it, ``tests/test_detect_engine.py`` proves it), at a fraction of the cost.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.incident import Incident, iso

BLOCK_ROWS = 131_072  # the engine's MAX_BLOCK_ROWS: fewer, larger blocks cost less per row
SIM_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated recordings start here


@dataclass(frozen=True)
class ReplayOptions:
    """How to read the inputs. ``mapping``: catalogue metric -> foreign CSV column
    (``--map``); ``tz``: zone of naive timestamps; ``duration``/``interval`` (s), ``gpus``,
    ``gpu_model``, ``seed``: the simulated node for ``sim:…`` inputs."""

    mapping: dict[str, str] = field(default_factory=dict)
    host: str | None = None
    tz: str | None = None
    block_rows: int = BLOCK_ROWS
    duration: float = 1800.0
    interval: float = 1.0
    gpus: int = 8
    gpu_model: str = "h100-sxm"
    seed: int = 0


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
    stats: dict[str, Any] | None = None  # gpus/samples/start/end when frames are a sample

    @functools.cached_property
    def frame(self) -> Any:
        """The whole frame."""
        if len(self.frames) == 1:
            return self.frames[0]
        import pandas as pd

        return pd.concat(self.frames, ignore_index=True)

    def source_json(self) -> dict[str, Any]:
        """The ``sources`` entry of the JSON document."""
        if self.stats is not None:
            return {"path": self.path, "host": self.host, **self.stats}
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


SIM_CHUNK_TICKS = 1024  # ticks per simulated chunk: flat memory, progress within ~1 s
PLOT_ROWS = 400_000  # rows kept for --plot from a streamed simulation (every n-th tick)
# the columns the timeline draws (watchdog.report.plot._series): all a sample keeps
PLOT_COLUMNS = ("ts", "uuid", "index", "lost", "utilization.gpu", "power.draw",
                "enforced.power.limit", "temperature.gpu", "clocks.sm", "memory.used",
                "memory.total")


def simulate(spec: str, *, duration: float, interval: float = 1.0, gpus: int = 8,
             model: str = "h100-sxm", seed: int = 0, host: str | None = None,
             start: float = SIM_START) -> tuple[Any, Any]:
    """Generate a recording of ``duration`` s from the simulated node (``sim:…`` spec).

    Returns ``(Recording, SimSource)``; the source's ``ground_truth()`` says what was
    injected (the detection benchmark scores against it). Samples every ``interval`` s
    from ``start`` (a fixed time, so a replay of a simulation is reproducible). The whole
    frame is built: for long simulations ``watchdog replay`` streams
    :func:`simulate_chunks` through the detector instead.
    """
    import pandas as pd

    from watchdog.sources.replay import Recording

    src, chunks = simulate_chunks(spec, duration=duration, interval=interval, gpus=gpus,
                                  model=model, seed=seed, host=host, start=start)
    frames, xids = [], []
    for frame, x in chunks:
        frames.append(frame)
        xids.extend(x)
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    rec = Recording(path=spec, host=src.host, format="sim", frame=frame,
                    inventory=src.devices(), xids=sorted(xids, key=lambda x: x.ts))
    return rec, src


def simulate_chunks(spec: str, *, duration: float, interval: float = 1.0, gpus: int = 8,
                    model: str = "h100-sxm", seed: int = 0, host: str | None = None,
                    start: float = SIM_START, chunk_ticks: int | None = None
                    ) -> tuple[Any, Any]:
    """The simulated node and an iterator of ``(frame, xids)`` chunks of ``chunk_ticks``
    (default :data:`SIM_CHUNK_TICKS`) ticks each (the frame contract of
    :class:`~watchdog.sources.replay.Recording`).

    Every chunk has the columns of the metrics the node reports in its first tick, so
    the chunks concatenate into the whole frame. Memory is that of one chunk.
    """
    from watchdog.errors import InputError
    from watchdog.sources.sim import SimSource

    if interval <= 0:
        raise InputError(f"{spec}: --interval {interval:g} s: must be positive")
    if duration < interval:
        raise InputError(f"{spec}: --duration must be at least one --interval "
                         f"({duration:g} s < {interval:g} s)")
    src = SimSource.from_spec(spec, gpus=gpus, model=model, seed=seed, start=start, host=host)
    return src, _chunks(src, duration, interval, chunk_ticks or SIM_CHUNK_TICKS)


def _chunks(src: Any, duration: float, interval: float, chunk_ticks: int) -> Any:
    """Frames of ``chunk_ticks`` ticks from ``src.run`` (see :func:`simulate_chunks`): a
    faultless node read every second a block at a time (:mod:`watchdog.sources.sim.fast`,
    the same readings), any other node reading by reading."""
    from watchdog import catalogue
    from watchdog.sources.sim import fast

    if fast.supports(src, interval):
        return fast.chunks(src, duration, chunk_ticks, list(catalogue.NAMES),
                           lambda rest: _scalar_chunks(src, rest, interval, chunk_ticks))
    return _scalar_chunks(src, duration, interval, chunk_ticks)


def _scalar_chunks(src: Any, duration: float, interval: float, chunk_ticks: int) -> Any:
    """Frames of ``chunk_ticks`` ticks from ``src.run``, one reading at a time."""
    import numpy as np
    import pandas as pd

    from watchdog import catalogue

    names: list[str] | None = None
    nan = float("nan")
    ticks = src.run(duration, interval)
    while True:
        ts: list[float] = []
        uuids: list[str] = []
        index: list[int] = []
        lost: list[bool] = []
        cols: dict[str, list[float]] = {name: [] for name in (names or catalogue.NAMES)}
        xids: list[Any] = []
        n = 0
        for _t, samples in ticks:
            for smp in samples:
                ts.append(smp.ts)
                uuids.append(smp.uuid)
                index.append(smp.index)
                lost.append(smp.lost)
                vals = smp.values
                for name, col in cols.items():
                    v = vals.get(name)
                    col.append(nan if v is None else v)
                xids.extend(smp.xids)
            n += 1
            if n >= chunk_ticks:
                break
        if n == 0:
            return
        data: dict[str, Any] = {"ts": np.asarray(ts, dtype=np.float64),
                                "uuid": np.asarray(uuids, dtype=object),
                                "index": np.asarray(index, dtype=np.int64),
                                "lost": np.asarray(lost, dtype=bool)}
        arrays = {name: np.asarray(col, dtype=np.float64) for name, col in cols.items()}
        if names is None:  # a metric the node never reports: column absent
            names = [m for m, arr in arrays.items() if not np.isnan(arr).all()]
        for name in names:
            data[name] = arrays[name]
        frame = pd.DataFrame(data)
        frame["uuid"] = frame["uuid"].astype(str)
        yield frame, sorted(xids, key=lambda x: x.ts)
        if n < chunk_ticks:
            return


def _replay_sim(path: str, opts: ReplayOptions, rules: Any, show: bool) -> Replayed:
    """Stream a simulated node through a fresh detector chunk by chunk: memory is flat
    however long the simulation (``sim:healthy --duration 10d``: 6.9 M rows), progress
    shows from the first chunk. Kept for ``--plot`` and the source line: every n-th tick,
    at most about :data:`PLOT_ROWS` rows."""
    import math

    import pandas as pd

    from watchdog.detect import Detector
    from watchdog.report.progress import Progress

    src, chunks = simulate_chunks(path, duration=opts.duration, interval=opts.interval,
                                  gpus=opts.gpus, model=opts.gpu_model, seed=opts.seed,
                                  host=opts.host)
    n_ticks = int(opts.duration / opts.interval + 1e-9)
    total = n_ticks * opts.gpus
    step = max(1, math.ceil(total / PLOT_ROWS))
    host = opts.host or src.host
    det = None
    kept: list[Any] = []
    rows, first_ts, last_ts, uuids = 0, None, None, set()
    with Progress(total, path, show) as bar:
        for frame, xids in chunks:
            if det is None:
                metrics = [c for c in frame.columns if c not in ("ts", "uuid", "index", "lost")]
                det = Detector(rules, host=host, devices=list(src.devices()),
                               metrics=[*metrics, "xid"])  # faults may inject XIDs later
            feed_blocks(det, frame, xids, block_rows=opts.block_rows, progress=bar)
            rows += len(frame)
            first_ts = float(frame["ts"].iloc[0]) if first_ts is None else first_ts
            last_ts = float(frame["ts"].iloc[-1])
            uuids.update(frame["uuid"].unique().tolist())
            if step == 1:
                kept.append(frame)
            else:
                tick = ((frame["ts"].to_numpy() - SIM_START)
                        / opts.interval).round().astype("int64")
                cols = [c for c in PLOT_COLUMNS if c in frame.columns]
                kept.append(frame.loc[tick % step == 0, cols])
    incidents = list(det.finish()) if det is not None else []
    frames = [pd.concat(kept, ignore_index=True)] if kept else []
    stats = {"gpus": len(uuids), "samples": rows,
             "start": iso(first_ts) if first_ts is not None else None,
             "end": iso(last_ts) if last_ts is not None else None}
    return Replayed(path, host, frames, incidents, stats=stats)


def is_sim(path: str) -> bool:
    """Whether a replay input names the simulated node rather than a file."""
    return path == "sim" or path.startswith("sim:")


def open_input(path: str, opts: ReplayOptions, in_parts: bool = True) -> Any:
    """A recording for ``path``: a log through the replay readers or a simulated node
    (``in_parts``: see :func:`~watchdog.sources.replay.open_log`)."""
    if is_sim(path):
        rec, _src = simulate(path, duration=opts.duration, interval=opts.interval,
                             gpus=opts.gpus, model=opts.gpu_model, seed=opts.seed,
                             host=opts.host)
        return rec
    if not in_parts:
        from watchdog.sources.replay import open_log

        return open_log(path, mapping=opts.mapping or None, host=opts.host, tz=opts.tz,
                        in_parts=False)
    from watchdog.sources import SourceOptions, open_recorded

    return open_recorded(path, SourceOptions(host=opts.host, mapping=opts.mapping,
                                             tz=opts.tz))


def replay_inputs(paths: Sequence[str], rules: Any, opts: ReplayOptions,
                  show_progress: bool = False) -> list[Replayed]:
    """Replay every path, one after another, each with a fresh detector."""
    from watchdog.report.progress import Progress

    out: list[Replayed] = []
    for path in paths:
        if is_sim(path):
            out.append(_replay_sim(path, opts, rules, show_progress))
            continue
        got, tried = _in_parts(path, opts, rules, show_progress)
        if got is not None:  # a large log, parsed on workers while the detector runs
            out.append(got)
            continue
        rec = open_input(path, opts, in_parts=not tried)
        warn(getattr(rec, "warnings", ()))
        host = opts.host or rec.host
        with Progress(len(rec.frame), Path(path).name, show_progress) as bar:
            incidents = detect(rec, rules, host=host, block_rows=opts.block_rows,
                               progress=bar)
        out.append(Replayed(path, host, [rec.frame], incidents))
    return out


def warn(lines: Any) -> None:
    """Print the reader's warnings (data it dropped or repaired) on stderr."""
    for line in lines or ():
        print(f"watchdog: warning: {line}", file=sys.stderr)


def _in_parts(path: str, opts: ReplayOptions, rules: Any,
              show: bool) -> tuple[Replayed | None, bool]:
    """Replay a large nvidia-smi log read in parts (see :func:`detect_parts`). Returns the
    result (None when it is not such a log, or the parts cannot serve it: then it is read
    whole, as any input) and whether parts were tried."""
    if is_sim(path) or opts.mapping:
        return None, False
    from watchdog.report.progress import Progress
    from watchdog.sources.replay import open_parts
    from watchdog.sources.replay.parts import NotInParts

    parts = open_parts(path, host=opts.host, tz=opts.tz)
    if parts is None:
        return None, False
    with parts, Progress(0, Path(path).name, show) as bar:
        try:
            incidents = detect_parts(parts, rules, host=opts.host,
                                     block_rows=opts.block_rows, progress=bar)
        except NotInParts:
            return None, True
        read = parts.read
        warn(parts.warnings())
        return Replayed(path, opts.host or read[0].host, [p.frame for p in read],
                        incidents), True
