"""The contract between the notification policy, the outbox and the sinks.

Policy turns incidents into :class:`Notification` objects (one per group and sink), the
outbox stores them durably, and a per-sink worker hands them, in order, to
:meth:`Sink.send`. A sink answers with a :class:`Result`; the worker marks a notification
sent only on :class:`Accepted`, retries :class:`Retry` (honouring ``after`` to the
second), and reports :class:`Failed` (undeliverable: a 4xx) without retrying.

``memory`` is what a sink remembers about a group between notifications (Slack: channel
and message ``ts`` so it can ``chat.update`` and reply in the thread; PagerDuty: the last
action sent per dedup key). The outbox stores it with the group, so it survives restarts;
a sink returns the new memory with every result, also a partial one, so that a retry after
half a batch went out does not send that half twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from watchdog.untyped import JsonDoc

AlertStatus = Literal["firing", "resolved"]
Reason = Literal["new", "update", "resolved", "repeat", "refresh", "test", "meta"]


@dataclass(frozen=True, slots=True)
class Alert:
    """One incident as a sink sees it. Times are POSIX seconds (UTC).

    ``fingerprint`` is fixed when the incident is created (a node-level incident whose
    GPUs grow keeps it): PagerDuty's ``dedup_key``, Alertmanager's identity.
    ``gpus`` are indices as strings, ``uuids`` the matching UUIDs in the same order.
    ``job_id`` is the job the GPUs run (where the node knows it); a job-wide alert's
    fingerprint is then the job's, the same on every node (:mod:`.fingerprint`).
    """

    fingerprint: str
    status: AlertStatus
    kind: str
    severity: str
    host: str
    gpus: tuple[str, ...]
    uuids: tuple[str, ...]
    started_at: float
    fired_at: float | None
    resolved_at: float | None
    rule: str
    summary: str
    evidence: JsonDoc = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    runbook_url: str | None = None
    job_id: str | None = None
    scope: str = "node"  # "gpu": a per-GPU rule's alert on its one GPU (labelled gpu=)


@dataclass(frozen=True, slots=True)
class Notification:
    """What one sink is asked to deliver about one group at one moment.

    ``id``: the outbox row's stable id (an idempotency key where the sink takes one).
    ``group_key``: the group's stable key (host, and Slurm job id where known).
    ``alerts``: every alert of the group now (firing and just-resolved), sorted.
    ``changed``: fingerprints whose state changed since the previous notification of
    this group to this sink (new, GPUs joined, resolved). ``reason`` says why it was
    made; ``test`` notifications are clearly marked test messages.
    """

    id: str
    sink: str
    group_key: str
    reason: Reason
    created_at: float
    alerts: tuple[Alert, ...]
    changed: tuple[str, ...] = ()
    text: str | None = None  # for reason "meta" (the agent's own problems) and "test"


@dataclass(frozen=True, slots=True)
class Accepted:
    """The service accepted it. ``memory``: what to remember for the group. ``answer``:
    what the service said, in a few words, no secrets (``HTTP 200 from am.example``), for
    ``watchdog alerts test``."""

    memory: JsonDoc = field(default_factory=dict)
    answer: str = ""


@dataclass(frozen=True, slots=True)
class Retry:
    """A transient failure (429, 5xx, timeout, connection refused): try again later.

    ``after``: seconds to wait at least (``Retry-After``), None for the worker's backoff.
    ``error``: one line, no secrets. ``memory``: progress made before the failure.
    """

    error: str
    after: float | None = None
    memory: JsonDoc = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Failed:
    """Undeliverable (a 4xx other than 429, a refused payload): never retried."""

    error: str
    memory: JsonDoc = field(default_factory=dict)


Result = Accepted | Retry | Failed


class Sink(Protocol):
    """A delivery target. ``name`` is the config's sink name, ``type`` its type.

    ``rate_per_s``: the client-side limit the worker enforces (PagerDuty 2/s = 120/min
    per routing key, Slack 1/s per channel). ``resend_interval`` (s): re-send firing
    alerts this often while nothing changes (Alertmanager expects it), or None.
    ``send`` must not raise for network or service errors: it returns a Result.
    """

    name: str
    type: str
    rate_per_s: float | None
    resend_interval: float | None

    def send(self, n: Notification, memory: JsonDoc) -> Result:
        ...

    def close(self) -> None:
        ...
