"""What the live pipeline needs of its collaborators, as small Protocols: the types of its
fields and of what the agent hands it.

The agent (:mod:`watchdog.service.agent`) builds each of them before the pipeline and
hands them in; tests hand in their own. Nothing here is implemented: the alerting facade is
:class:`watchdog.notify.notifier.Notifier`, the anomaly hook
:class:`watchdog.anomaly.auto.DaemonModel` (or a bare
:class:`watchdog.anomaly.stage.AnomalyStage`), the sample recorder
:class:`watchdog.service.recorder.Recorder` behind the job tracker's
:class:`watchdog.service.jobs.SampleTee`, a listener
:class:`watchdog.notify.console.IncidentLog` or :class:`watchdog.service.slurm.SlurmActor`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from watchdog.incident import Incident
from watchdog.records import DeviceInfo, Sample
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:  # the detector (numpy) stays off `check --agent --config`'s path
    from watchdog.detect.engaged import EngagedTimeline

#: ``(transition, incident)``: ``firing``, ``updated`` (GPUs joined or left), ``resolved``
Transition = tuple[str, Incident]
#: called with every transition, in order (the console log, the Slurm actor)
Listener = Callable[[str, Incident], None]


class Alerting(Protocol):
    """The alerting facade (:class:`watchdog.notify.notifier.Notifier`)."""

    def observe(self, changes: list[Transition]) -> None: ...
    def tick(self, now: float) -> None: ...
    def status(self) -> JsonDoc: ...
    def down(self) -> dict[str, tuple[str, str]]: ...
    def drain(self, seconds: float | None = None) -> int: ...
    def close(self) -> None: ...


class AnomalyHook(Protocol):
    """The anomaly model as the live pipeline runs it: called each tick with the samples
    and the detector's engaged timeline (when a rule was pending or firing on which GPU,
    up to the last tick it evaluated), returns anomaly transitions."""

    def __call__(self, now: float, samples: list[Sample],
                 engaged: EngagedTimeline) -> list[Transition]: ...


@runtime_checkable
class OpensOnDevices(Protocol):
    """A collaborator that wants the source's host and GPUs once they are known (the
    daemon's anomaly hook, a recorder)."""

    def open(self, host: str, devices: list[DeviceInfo]) -> None: ...


@runtime_checkable
class Reports(Protocol):
    """A collaborator with a part of its own in ``watchdog status``."""

    def status(self) -> JsonDoc: ...


class Progress(Protocol):
    """Progress on long work (a replay's rows): the command decides how it shows."""

    def update(self, rows: int) -> None: ...
    def set_total(self, total: int) -> None: ...


class ProgressBar(Progress, Protocol):
    """A :class:`Progress` that is also a context manager (closed at its end)."""

    def __enter__(self) -> ProgressBar: ...
    def __exit__(self, *exc: object) -> None: ...


class SampleRecorder(Protocol):
    """Continuous recording (:class:`watchdog.service.recorder.Recorder`): opened for the
    source's host and GPUs once they are known, then written every tick."""

    def open(self, host: str, devices: list[DeviceInfo]) -> None: ...
    def write(self, now: float, samples: list[Sample]) -> None: ...
    def close(self) -> None: ...
