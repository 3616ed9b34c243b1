"""Incidents: what the detector reports, in the shape DESIGN.md fixes for ``--json``.

An incident is one event on one GPU or on several GPUs of a node at once (a whole job
hung is one incident listing every GPU, not N pages). Times are POSIX seconds inside the
program and ISO 8601 with a zone in JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from watchdog.untyped import Json, JsonDoc


@dataclass(frozen=True, slots=True)
class Kind:
    """One incident kind and how the parts of the product treat it. :data:`KIND_LIST` is
    the one list of kinds: every other list is derived from it, so a new kind is one entry
    here plus its runbook page (``docs/runbooks/<kind>.md``) and its docs."""

    name: str
    colour: str  # its shade in ``replay --plot`` (a matplotlib colour)
    hardware: bool = False  # a fault of the GPU itself: the ``watchdog_gpu_fault`` gauge
    job_wide: bool = False  # a whole job shows it at once: one page per job, not per node
    gauge: str | None = None  # its own per-GPU 0/1 gauge on /metrics (fleet rules read it)
    gauge_help: str = ""  # that gauge's HELP text
    own: bool = False  # raised by the agent about itself, never by a rule


KIND_LIST: tuple[Kind, ...] = (
    Kind("comm_hang", "#d62728", job_wide=True, gauge="watchdog_gpu_hang",
         gauge_help="1 while the GPU is in a firing comm_hang incident (a hung collective, "
                    "after the node's learned wait)."),
    Kind("stall", "#ff7f0e", job_wide=True, gauge="watchdog_gpu_stall",
         gauge_help="1 while the GPU is in a firing stall incident."),
    Kind("thermal_throttle", "#e377c2", hardware=True),
    Kind("hw_slowdown", "#9467bd", hardware=True),
    Kind("memory_pressure", "#8c564b"),
    Kind("gpu_lost", "#000000", hardware=True),
    Kind("xid", "#7f7f7f", hardware=True),
    Kind("ecc", "#bcbd22", hardware=True),
    Kind("pcie_degraded", "#17becf", hardware=True),
    Kind("nvlink_errors", "#1f77b4", hardware=True),
    Kind("straggler", "#2ca02c"),
    Kind("anomaly", "#aec7e8"),
    Kind("nvml_error", "#333333", hardware=True),
    Kind("agent", "#333333", own=True),
)
KINDS: tuple[str, ...] = tuple(k.name for k in KIND_LIST)
KIND: dict[str, Kind] = {k.name: k for k in KIND_LIST}
#: kinds the agent raises about itself, never a rule (a rule file naming one is refused)
OWN_KINDS: tuple[str, ...] = tuple(k.name for k in KIND_LIST if k.own)
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")


def iso(ts: float | None) -> str | None:
    """POSIX seconds -> ISO 8601, UTC, milliseconds: ``2026-11-21T10:00:00.000+00:00``."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


@dataclass(slots=True)
class Incident:
    """One detected event.

    ``gpus`` are indices as strings (as the JSON contract says) and ``uuids`` the matching
    UUIDs in the same order. ``started_at`` is when the condition began, ``fired_at`` when
    a live daemon would have notified (after the rule's ``for:``), ``resolved_at`` is None
    while still active. ``evidence`` holds the numbers the summary quotes.
    """

    kind: str
    severity: str
    host: str
    gpus: list[str]
    uuids: list[str]
    started_at: float
    fired_at: float | None
    resolved_at: float | None
    rule: str
    summary: str
    evidence: JsonDoc = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown incident kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def active(self) -> bool:
        return self.resolved_at is None

    def to_json(self) -> JsonDoc:
        """The JSON object DESIGN.md specifies (times as ISO 8601 strings)."""
        return {
            "kind": self.kind,
            "severity": self.severity,
            "host": self.host,
            "gpus": list(self.gpus),
            "uuids": list(self.uuids),
            "started_at": iso(self.started_at),
            "fired_at": iso(self.fired_at),
            "resolved_at": iso(self.resolved_at),
            "rule": self.rule,
            "summary": self.summary,
            "evidence": jsonable(self.evidence),
            "labels": dict(self.labels),
        }


def jsonable(v: Json) -> Json:
    """Make evidence JSON-safe: NaN -> None, numpy scalars -> Python numbers."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, float):
        return None if v != v else round(v, 6)
    if hasattr(v, "item") and callable(v.item):  # numpy scalar
        return jsonable(v.item())
    return v


# --- how incidents are written for people (tables, pages, the journal) --------------

def gpu_list(gpus: Sequence[str]) -> str:
    """Compact index list: ``["0","1","2","5"]`` -> ``"0-2,5"`` (non-numeric kept as is)."""
    try:
        nums = sorted({int(g) for g in gpus})
    except ValueError:
        return ",".join(gpus)
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts) or "-"


def duration(seconds: float) -> str:
    """``42`` -> ``"42s"``, ``125`` -> ``"2m05s"``, ``7300`` -> ``"2h01m"``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
