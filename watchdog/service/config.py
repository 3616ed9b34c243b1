"""The daemon's settings as its config file gives them (:class:`Config`): what the agent
is built from. Reading and checking the file is :mod:`watchdog.config`'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from watchdog.units import DAY, RETENTION_S

if TYPE_CHECKING:  # annotations only: reading a config loads no sink, job or Slurm code
    from watchdog.notify.config import NotifyConfig
    from watchdog.service.jobs import JobConfig
    from watchdog.service.slurm import SlurmConfig
    from watchdog.untyped import JsonDoc


@dataclass(frozen=True, slots=True)
class Record:
    """Continuous recording: ``dir`` for the hourly ``.wdrec`` files, ``keep_s`` (s)."""

    dir: str
    keep_s: float = 7 * DAY


@dataclass(frozen=True, slots=True)
class Config:
    """Daemon settings. ``interval`` is the sampling period in seconds of the clock.

    ``path`` is the file it came from (None: built-in defaults, no config given).
    ``lines`` maps each top-level key to its line in the file (for later errors).
    ``model`` is the file's ``model:`` value as written (checked at load; the agent turns
    it into the anomaly model's settings, :func:`watchdog.anomaly.auto.parse`).
    """

    source: str = "nvml"
    interval: float = 1.0
    rules: tuple[str, ...] = ()
    host: str | None = None
    state_dir: str | None = None
    speed: float = 1.0
    sim_gpus: int = 8
    sim_model: str = "h100-sxm"
    sim_seed: int = 0
    metrics_listen: str | None = None
    record: Record | None = None
    retention_s: float = RETENTION_S
    call_timeout: float = 2.0
    notify: NotifyConfig | None = None
    model: str | JsonDoc | None = None
    runbook_url: str | None = None
    job: JobConfig | None = None  # overrides the job the node reads
    slurm: SlurmConfig | None = None  # drain and resume the node
    path: str | None = None
    lines: dict[str, int] = field(default_factory=dict)
