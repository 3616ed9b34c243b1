"""Recorded telemetry -> incidents: the replay half of the one pipeline.

``watchdog replay`` and the benchmarks call this; the live daemon
(:mod:`watchdog.pipeline.live`) feeds the same :class:`~watchdog.detect.Detector` one tick
at a time. The detector is fed a recording's frame in blocks of whole ticks: block replay
has exactly the incremental semantics of live tick-by-tick evaluation (the engine
guarantees it, ``tests/test_detect_engine.py`` proves it), at a fraction of the cost.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from watchdog.incident import Incident, iso
from watchdog.pipeline import core
from watchdog.records import DeviceInfo
from watchdog.sources import is_sim
from watchdog.sources.sim.frames import SIM_START, simulate, simulate_chunks
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    import pandas as pd

    from watchdog.anomaly.offline import Decision
    from watchdog.detect import Detector, Rule
    from watchdog.detect.coverage import Note
    from watchdog.detect.engaged import EngagedTimeline
    from watchdog.pipeline.ports import Progress, ProgressBar
    from watchdog.sources.replay.frame import Recording
    from watchdog.sources.replay.parts import Parts
    from watchdog.sources.wandb.console import ConsoleLine

BLOCK_ROWS = 131_072  # the engine's MAX_BLOCK_ROWS: fewer, larger blocks cost less per row


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
    frames: list[pd.DataFrame]
    incidents: list[Incident] = field(default_factory=list)
    stats: JsonDoc | None = None  # gpus/samples/start/end when frames are a sample
    # when a rule was pending or firing on each GPU (the detector's)
    engaged: EngagedTimeline | None = None
    # what the log let each rule judge (watchdog.detect.coverage.Note): rules that could
    # not run on it and why, rules that ran on a fallback; said once per log
    notes: list[Note] = field(default_factory=list)
    # what the job itself said, when the input records it (a W&B run): notable console
    # lines (watchdog.sources.wandb.console.ConsoleLine) and the exit code
    console: list[ConsoleLine] | None = None
    exit_code: int | None = None
    # the anomaly model's decision per GPU (watchdog.anomaly.offline.Decision), when asked
    model: list[Decision] = field(default_factory=list)

    @functools.cached_property
    def frame(self) -> pd.DataFrame:
        """The whole frame."""
        if len(self.frames) == 1:
            return self.frames[0]
        import pandas as pd

        return pd.concat(self.frames, ignore_index=True)

    def source_json(self) -> JsonDoc:
        """The ``sources`` entry of the JSON document."""
        job = {} if self.console is None else {"exit_code": self.exit_code}
        if self.stats is not None:
            return {"path": self.path, "host": self.host, **self.stats, **job}
        full = [f for f in self.frames if len(f)]
        return {
            "path": self.path,
            "host": self.host,
            "gpus": gpu_count(full[0]) if full else 0,
            "samples": sum(len(f) for f in full),
            "start": iso(float(full[0]["ts"].iloc[0])) if full else None,
            "end": iso(float(full[-1]["ts"].iloc[-1])) if full else None,
            **job,
        }

    def console_near(self, inc: Incident) -> list[ConsoleLine]:
        """The job's console lines worth showing next to ``inc`` (empty when the input
        records no console): see :func:`watchdog.sources.wandb.console.nearby`."""
        if not self.console:
            return []
        from watchdog.sources.wandb.console import nearby

        end = inc.resolved_at
        if end is None:  # active at the end: up to the end of the recording
            end = float(self.frames[-1]["ts"].iloc[-1]) if len(self.frames[-1]) else \
                inc.started_at
        return nearby(self.console, inc.started_at, end)


def gpu_count(frame: pd.DataFrame) -> int:
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


def sampling_interval(frame: pd.DataFrame, rows: int = 20_000) -> float | None:
    """The median time between one GPU's samples (s), from the first GPU's rows among the
    first ``rows`` of ``frame`` (None with fewer than two)."""
    import numpy as np

    head = frame.iloc[:rows]
    if len(head) < 2:
        return None
    uuid = head["uuid"].to_numpy(dtype=object)
    ts = head["ts"].to_numpy(dtype=np.float64)[uuid == uuid[0]]
    if len(ts) < 2:
        return None
    step = float(np.median(np.diff(ts)))
    return step if step > 0 else None


def judged(rules: Sequence[Rule], frames: Sequence[pd.DataFrame], metrics: Sequence[str],
           devices: Sequence[DeviceInfo], det: Detector, xids: bool = False) -> list[Note]:
    """The coverage notes of a log (:mod:`watchdog.detect.coverage`) whose ``frames``
    carry ``metrics``: a metric counts when some frame holds a value of it."""
    from watchdog.detect.coverage import coverage, late, merge

    have = [m for m in metrics if any(f[m].notna().any() for f in frames if m in f)]
    have += ["xid"] if xids else []
    return merge(coverage(list(rules), have, list(devices), det.config.interval,
                          det.widened_to),
                 late(list(rules), have, list(devices), det.learned_since()))


def detect(recording: Recording, rules: Sequence[Rule], *, host: str | None = None,
           block_rows: int = BLOCK_ROWS, progress: Progress | None = None) -> list[Incident]:
    """Run a fresh detector over ``recording``'s frame (:func:`core.feed_blocks`).
    Returns every incident (active ones have ``resolved_at`` None)."""
    return list(detector_over(recording, rules, host=host, block_rows=block_rows,
                              progress=progress).incidents)


def detector_over(recording: Recording, rules: Sequence[Rule], *, host: str | None = None,
                  block_rows: int = BLOCK_ROWS, progress: Progress | None = None
                  ) -> Detector:
    """The finished detector of :func:`detect` (its incidents, and when each GPU was
    engaged by a rule, for the anomaly stage)."""
    xids = sorted(getattr(recording, "xids", ()) or (), key=lambda x: x.ts)
    det = core.build_detector(rules, host=host or recording.host,
                              devices=list(recording.devices()), mode="block",
                              metrics=[*recording.metrics, *(["xid"] if xids else [])],
                              interval=sampling_interval(recording.frame))
    core.feed_blocks(det, recording.frame, xids, block_rows=block_rows, progress=progress)
    det.finish()
    return det


def detect_parts(parts: Parts, rules: Sequence[Rule], *, host: str | None = None,
                 block_rows: int = BLOCK_ROWS, progress: Progress | None = None
                 ) -> list[Incident]:
    """:func:`detect` over a log read in parts (see :func:`detector_over_parts`)."""
    return list(detector_over_parts(parts, rules, host=host, block_rows=block_rows,
                                    progress=progress).incidents)


def detector_over_parts(parts: Parts, rules: Sequence[Rule], *, host: str | None = None,
                        block_rows: int = BLOCK_ROWS, progress: Progress | None = None
                        ) -> Detector:
    """The finished detector over a log read in parts
    (:mod:`watchdog.sources.replay.parts`): it works on each part while the next one is
    parsed (``parts.read`` holds the parts); raises ``NotInParts`` when the log must be
    read whole (then nothing is reported: the caller starts again)."""
    det = None
    rows = 0
    for part in parts:
        if det is None:  # same columns in every part; no XIDs
            det = core.build_detector(rules, host=host or part.host,
                                      devices=list(part.devices()), mode="block",
                                      metrics=part.metrics,
                                      interval=sampling_interval(part.frame))
        rows += len(part.frame)
        if progress is not None and parts.done_bytes:  # rows so far, scaled to the file
            progress.set_total(int(rows * parts.size / parts.done_bytes))
        core.feed_blocks(det, part.frame, [], block_rows=block_rows, progress=progress,
                         ends_tick=parts.aligned)
    if det is None:  # pragma: no cover - a Parts has at least one range
        raise ValueError("a log in parts without parts")
    det.finish()
    return det


PLOT_ROWS = 400_000  # rows kept for --plot from a streamed simulation (every n-th tick)
# the columns the timeline draws (watchdog.report.plot._series): all a sample keeps
PLOT_COLUMNS = ("ts", "uuid", "index", "lost", "utilization.gpu", "power.draw",
                "enforced.power.limit", "temperature.gpu", "clocks.sm", "memory.used",
                "memory.total")


class Feedback(Protocol):
    """What a replay tells the person running it: progress and warnings. The pipeline
    never prints; the command decides where this goes (``watchdog replay``: a bar on a
    terminal, warnings on stderr)."""

    def progress(self, total: int, name: str) -> ProgressBar:
        """A context manager with ``update(rows)`` and ``set_total(rows)``."""
        ...

    def warn(self, line: str) -> None:
        """Data the reader dropped or repaired, said once."""
        ...


class Quiet:
    """No bar; warnings kept in :attr:`warnings` (a library caller reads them there)."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def progress(self, total: int, name: str) -> ProgressBar:
        return _NoBar()

    def warn(self, line: str) -> None:
        self.warnings.append(line)


class _NoBar:
    def update(self, rows: int) -> None:
        return None

    def set_total(self, total: int) -> None:
        return None

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _replay_sim(path: str, opts: ReplayOptions, rules: Sequence[Rule],
                fb: Feedback) -> Replayed:
    """Stream a simulated node through a fresh detector chunk by chunk: memory is flat
    however long the simulation (``sim:healthy --duration 10d``: 6.9 M rows), progress
    shows from the first chunk. Kept for ``--plot`` and the source line: every n-th tick,
    at most about :data:`PLOT_ROWS` rows."""
    import math

    import pandas as pd

    src, chunks = simulate_chunks(path, duration=opts.duration, interval=opts.interval,
                                  gpus=opts.gpus, model=opts.gpu_model, seed=opts.seed,
                                  host=opts.host)
    n_ticks = int(opts.duration / opts.interval + 1e-9)
    total = n_ticks * opts.gpus
    step = max(1, math.ceil(total / PLOT_ROWS))
    host = opts.host or src.host
    det = None
    kept: list[pd.DataFrame] = []
    rows, first_ts, last_ts, uuids = 0, None, None, set()
    with fb.progress(total, path) as bar:
        for frame, xids in chunks:
            if det is None:
                metrics = [c for c in frame.columns if c not in ("ts", "uuid", "index", "lost")]
                det = core.build_detector(  # faults may inject XIDs later
                    rules, host=host, devices=list(src.devices()), mode="block",
                    metrics=[*metrics, "xid"])
            core.feed_blocks(det, frame, xids, block_rows=opts.block_rows, progress=bar)
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
    return Replayed(path, host, frames, incidents, stats=stats,
                    engaged=det.engaged if det is not None else None)


def open_input(path: str, opts: ReplayOptions, in_parts: bool = True) -> Recording:
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


def expand(paths: Sequence[str]) -> list[str]:
    """The inputs ``paths`` name: a folder stands for every W&B run below it
    (:func:`watchdog.sources.wandb.runs_in`), anything else for itself."""
    import os

    out: list[str] = []
    for p in paths:
        if not is_sim(p) and p != "-" and os.path.isdir(p):
            from watchdog.sources.wandb import runs_in

            out += runs_in(p)
        else:
            out.append(p)
    return out


def replay_inputs(paths: Sequence[str], rules: Sequence[Rule], opts: ReplayOptions,
                  feedback: Feedback | None = None,
                  skipped: list[tuple[str, str]] | None = None) -> list[Replayed]:
    """Replay every path, one after another, each with a fresh detector; a folder
    stands for the W&B runs in it (:func:`expand`). With ``skipped``, an input that
    cannot be read is noted there (path, the reason) and the others are replayed;
    without, its :class:`InputError` ends the replay."""
    from watchdog.errors import InputError

    fb = feedback or Quiet()
    out: list[Replayed] = []
    todo = expand(paths)
    for k, path in enumerate(todo):
        try:
            out.append(_replay_one(path, opts, rules, fb,
                                   f"[{k + 1}/{len(todo)}] " if len(todo) > 1 else ""))
        except InputError as e:
            if skipped is None:
                raise
            skipped.append((path, str(e)))
    return out


def _replay_one(path: str, opts: ReplayOptions, rules: Sequence[Rule], fb: Feedback,
                prefix: str) -> Replayed:
    """One input through a fresh detector (``prefix``: its place among several, for the
    progress bar)."""
    if is_sim(path):
        return _replay_sim(path, opts, rules, fb)
    got, tried = _in_parts(path, opts, rules, fb)
    if got is not None:  # a large log, parsed on workers while the detector runs
        return got
    rec = open_input(path, opts, in_parts=not tried)
    for line in getattr(rec, "warnings", ()) or ():
        fb.warn(line)
    return replay_recording(rec, rules, opts, fb, prefix + Path(path).name, path=path)


def replay_recording(rec: Recording, rules: Sequence[Rule], opts: ReplayOptions,
                     fb: Feedback | None = None, name: str = "", *,
                     path: str | None = None) -> Replayed:
    """A recording already read (a log's, or a copy with faults written into its frame:
    :mod:`watchdog.testing.framelog`) through a fresh detector."""
    fb = fb or Quiet()
    host = opts.host or rec.host
    with fb.progress(len(rec.frame), name) as bar:
        det = detector_over(rec, rules, host=host, block_rows=opts.block_rows,
                            progress=bar)
    return Replayed(path or rec.path, host, [rec.frame], list(det.incidents),
                    engaged=det.engaged,
                    notes=judged(rules, [rec.frame], rec.metrics, rec.devices(), det,
                                 bool(getattr(rec, "xids", None))),
                    console=getattr(rec, "console", None),
                    exit_code=getattr(rec, "exit_code", None))


def _in_parts(path: str, opts: ReplayOptions, rules: Sequence[Rule],
              fb: Feedback) -> tuple[Replayed | None, bool]:
    """Replay a large nvidia-smi log read in parts (see :func:`detect_parts`). Returns the
    result (None when it is not such a log, or the parts cannot serve it: then it is read
    whole, as any input) and whether parts were tried."""
    if is_sim(path) or opts.mapping:
        return None, False
    from watchdog.sources.replay import open_parts
    from watchdog.sources.replay.parts import NotInParts

    parts = open_parts(path, host=opts.host, tz=opts.tz)
    if parts is None:
        return None, False
    with parts, fb.progress(0, Path(path).name) as bar:
        try:
            det = detector_over_parts(parts, rules, host=opts.host,
                                      block_rows=opts.block_rows, progress=bar)
        except NotInParts:
            return None, True
        read = parts.read
        for line in parts.warnings() or ():
            fb.warn(line)
        return Replayed(path, opts.host or read[0].host, [p.frame for p in read],
                        list(det.incidents), engaged=det.engaged,
                        notes=judged(rules, [p.frame for p in read], read[0].metrics,
                                     read[0].devices(), det)), True
