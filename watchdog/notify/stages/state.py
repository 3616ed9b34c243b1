"""What the notification policy keeps between ticks (and in the state database): one
:class:`AlertState` per fingerprint, one :class:`GroupState` per group and sink."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from watchdog.notify.base import Alert, AlertStatus

#: an alert's notification state: firing; resolving (its resolve held); resolved
State = Literal["firing", "resolving", "resolved"]
#: what the next write does with a group's row: nothing, save it, or delete it (the group
#: is over: the next incident opens a new one)
Write = Literal["clean", "save", "delete"]


@dataclass(slots=True)
class AlertState:
    """What the policy knows of one fingerprint. ``group``: its group key;
    ``hold_until``: when a resolving alert turns resolved (s of the policy's clock);
    ``fires``: when it fired, within the flap window; ``dirty``: its row needs writing."""

    alert: Alert
    state: State
    group: str
    hold_until: float | None = None
    fires: list[float] = field(default_factory=list)
    dirty: bool = True


#: what a group last told a sink about one fingerprint: [status, GPU indices]
Sent = list[AlertStatus | list[str]]


@dataclass(slots=True)
class GroupState:
    """One group as one sink saw it: ``instance`` (the key the sink sees: a new one for
    each incident of the group), ``sent`` maps fingerprint -> [status, gpus] as last
    notified, and ``write`` what the next write does with its row."""

    instance: str
    created_at: float
    last_sent_at: float | None = None
    sent: dict[str, Sent] = field(default_factory=dict)
    write: Write = "save"
