"""What ``watchdog check`` concludes: statuses, problems, per-GPU and node verdicts.

The types only (no judging), so that the probe's own checks
(:mod:`watchdog.check.judge`) and the rules' findings (:mod:`watchdog.check.rules`) both
speak them without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from watchdog.records import DeviceInfo, Sample


class Status(IntEnum):
    """Nagios status; the value is the exit code."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


# Aggregation order, least to most severe (not the exit-code order: UNKNOWN is 3 there).
RANK = {Status.OK: 0, Status.UNKNOWN: 1, Status.WARNING: 2, Status.CRITICAL: 3}


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status (CRITICAL > WARNING > UNKNOWN > OK); OK for none."""
    return max(statuses, key=RANK.__getitem__, default=Status.OK)


# --- thresholds (each with its reason) ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Problem:
    """One finding. ``gpu``/``uuid`` are None for a node-level problem (GPU count)."""

    severity: Status
    check: str  # gpu_count | gpu_lost | nvml_timeout | nvml_error | xid | ecc | clock_events
    #            | pcie | nvlink | memory | hang
    message: str
    gpu: int | None = None
    uuid: str | None = None


@dataclass(slots=True)
class GpuVerdict:
    """The verdict on one GPU, with the last reading the table and JSON show."""

    index: int
    uuid: str
    device: DeviceInfo | None
    last: Sample | None
    samples: int
    problems: list[Problem] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return worst(p.severity for p in self.problems)

    @property
    def name(self) -> str | None:
        return self.device.name if self.device else None


@dataclass(slots=True)
class Verdict:
    """The node's verdict. ``checked_at`` is POSIX seconds of the judged moment."""

    host: str
    checked_at: float
    gpus: list[GpuVerdict]
    problems: list[Problem]
    expected_gpus: int | None = None
    driver: str | None = None
    source: str = "nvml"
    duration_s: float = 0.0

    @property
    def status(self) -> Status:
        return worst(p.severity for p in self.problems)

    @property
    def exit_code(self) -> int:
        return int(self.status)


# --- node-level checks -----------------------------------------------------------------------
