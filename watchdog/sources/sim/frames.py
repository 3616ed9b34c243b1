"""The simulated node as recorded telemetry: frames in the replay frame contract.

``watchdog replay sim:…``, ``watchdog train --source sim…``, the benchmarks and the tests
read a simulated node the way they read a log: a :class:`~watchdog.sources.replay.Recording`
(:func:`simulate`) or, for long simulations, an iterator of frames of
:data:`SIM_CHUNK_TICKS` ticks each (:func:`simulate_chunks`), so memory stays that of one
chunk however long the simulation. A faultless node read every second is computed a block
at a time (:mod:`watchdog.sources.sim.fast`, the same readings as reading by reading).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    from watchdog.records import XidEvent
    from watchdog.sources.replay.frame import Recording
    from watchdog.sources.sim.fast import Chunk
    from watchdog.sources.sim.source import SimSource

SIM_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated recordings start here

SIM_CHUNK_TICKS = 1024  # ticks per simulated chunk: flat memory, progress within ~1 s


def simulate(spec: str, *, duration: float, interval: float = 1.0, gpus: int = 8,
             model: str = "h100-sxm", seed: int = 0, host: str | None = None,
             start: float = SIM_START) -> tuple[Recording, SimSource]:
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
                    ) -> tuple[SimSource, Iterator[Chunk]]:
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


def _chunks(src: SimSource, duration: float, interval: float, chunk_ticks: int
            ) -> Iterator[Chunk]:
    """Frames of ``chunk_ticks`` ticks from ``src.run`` (see :func:`simulate_chunks`): a
    faultless node read every second a block at a time (:mod:`watchdog.sources.sim.fast`,
    the same readings), any other node reading by reading."""
    from watchdog import catalogue
    from watchdog.sources.sim import fast

    if fast.supports(src, interval):
        return fast.chunks(src, duration, chunk_ticks, list(catalogue.NAMES),
                           lambda rest: _scalar_chunks(src, rest, interval, chunk_ticks))
    return _scalar_chunks(src, duration, interval, chunk_ticks)


def _scalar_chunks(src: SimSource, duration: float, interval: float, chunk_ticks: int
                   ) -> Iterator[Chunk]:
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
        xids: list[XidEvent] = []
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
        data: JsonDoc = {"ts": np.asarray(ts, dtype=np.float64),
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
