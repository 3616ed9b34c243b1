"""Choose a metric source from a ``--source`` spec: ``nvml`` | ``sim[:S1,S2…]`` | PATH.

Imports are lazy so that ``watchdog check`` with the NVML or simulated source never
loads pandas (the replay parsers do).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from watchdog.errors import InputError


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything a source may need, filled from the command line or the config.

    ``mapping`` maps catalogue names to foreign CSV column names (``--map``).
    ``sim_*`` shape the simulated node; ``call_timeout`` bounds every NVML call (s).
    """

    host: str | None = None
    mapping: dict[str, str] = field(default_factory=dict)
    sim_gpus: int = 8
    sim_model: str = "h100-sxm"
    sim_seed: int = 0
    call_timeout: float = 2.0
    tz: str | None = None  # zone of naive log timestamps (replay); None = UTC


def is_sim(spec: str) -> bool:
    """Whether a ``--source`` value or replay input names the simulated node (``sim`` or
    ``sim:…``), not a file: ``simple.csv`` is a file. The one place this is decided."""
    return spec == "sim" or spec.startswith("sim:")


def kind_of(spec: str) -> str:
    """``"nvml"``, ``"sim"`` or ``"replay"`` for a ``--source`` value."""
    if spec == "nvml":
        return "nvml"
    if is_sim(spec):
        return "sim"
    return "replay"


def open_live(spec: str, options: SourceOptions, start: float):
    """Open a live source (``nvml`` or ``sim…``); ``start`` is the clock's time now (s).

    Returns an object satisfying :class:`watchdog.sources.base.LiveSource`.
    """
    kind = kind_of(spec)
    if kind == "nvml":
        from watchdog.sources.nvml import NvmlSource

        return NvmlSource(host=options.host, call_timeout=options.call_timeout)
    if kind == "sim":
        from watchdog.sources.sim import SimSource

        return SimSource.from_spec(
            spec,
            gpus=options.sim_gpus,
            model=options.sim_model,
            seed=options.sim_seed,
            start=start,
            host=options.host,
        )
    raise InputError(f"--source {spec}: a log file is not a live source")


def check_live(spec: str, options: SourceOptions) -> None:
    """Check a live source spec whole, now: for ``sim…`` the scenario names, their
    parameters and times and the GPUs they name (against ``options.sim_gpus`` and
    ``sim_model``), by building the node once and dropping it (milliseconds, nothing
    sampled). :class:`InputError` names the bad part and the known scenarios. A command
    calls this before it starts, so a typo is one line and exit 2 (or UNKNOWN for
    ``check``), not an error on every tick of a running daemon. ``nvml`` is checked by
    opening it, which is the daemon's business (it retries a missing driver)."""
    if kind_of(spec) == "sim":
        open_live(spec, options, start=0.0).close()


def open_recorded(path: str, options: SourceOptions):
    """Open a recorded log or recording at ``path`` (any format the replay reader knows).

    Returns an object satisfying :class:`watchdog.sources.base.RecordedSource`. ``-`` is
    standard input (a pipe, read whole: see :mod:`watchdog.sources.replay`).
    """
    if path != "-" and not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    from watchdog.sources.replay import open_log

    return open_log(path, mapping=options.mapping or None, host=options.host, tz=options.tz)
