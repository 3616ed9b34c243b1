"""What the live pipeline needs of its collaborators, as small Protocols.

The agent (:mod:`watchdog.service.agent`) builds each of them before the pipeline and
hands them in; tests hand in their own. Nothing here is implemented: the alerting facade is
:class:`watchdog.notify.notifier.Notifier`, the anomaly hook
:class:`watchdog.anomaly.auto.DaemonModel`, the recorder
:class:`watchdog.service.recorder.Recorder`.
"""

from __future__ import annotations

from typing import Any, Protocol

from watchdog.incident import Incident
from watchdog.records import Sample


class Alerting(Protocol):
    """The alerting facade (:class:`watchdog.notify.notifier.Notifier`)."""

    def observe(self, changes: list[tuple[str, Incident]]) -> None: ...
    def tick(self, now: float) -> None: ...
    def status(self) -> dict[str, Any]: ...
    def drain(self, seconds: float | None = None) -> int: ...
    def close(self) -> None: ...


class AnomalyHook(Protocol):
    """The anomaly model as the live pipeline runs it (:mod:`watchdog.anomaly.auto`):
    called each tick with the samples and the detector's engaged timeline (when a rule
    was pending or firing on which GPU, up to the last tick it evaluated), returns anomaly
    transitions."""

    def __call__(self, now: float, samples: list[Sample],
                 engaged: Any) -> list[tuple[str, Incident]]: ...
    def status(self) -> dict[str, Any]: ...
    def open(self, host: str, devices: list[Any]) -> None: ...


class Recording(Protocol):
    """Continuous recording (:class:`watchdog.service.recorder.Recorder`): opened for the
    source's host and GPUs once they are known, then written every tick."""

    def open(self, host: str, devices: list[Any]) -> None: ...
    def write(self, now: float, samples: list[Sample]) -> None: ...
    def close(self) -> None: ...
