"""What the schedulers are told: which incident kinds take a node out of service, and
which Kubernetes NodeCondition each kind belongs to.

One vocabulary for the three places that speak to a scheduler, so they never disagree:
the agent's Slurm drains (:mod:`watchdog.service.slurm`), ``watchdog check``'s Slurm and
node-problem-detector modes (:mod:`watchdog.check.modes`), and the shipped
node-problem-detector plugin config (``config/kubernetes/``, tested against this table).

**Drain.** A node is drained for a *critical* incident of a kind in :data:`DRAIN_KINDS`:
the GPU is gone (``gpu_lost``, also a GPU missing from the count), its memory returned
an uncorrectable error or waits for a remap (``ecc``), or the driver reported a fault
that needs a reset (``xid``, only the critical codes: an application's XID 13/31/43 is
a warning and its job's own fault). Not drained by default:

* ``comm_hang``/``stall``: a hung collective or a stalled job is usually another rank's
  or another node's fault (the fleet rules name the culprit node); draining every node of
  a hung job takes a healthy cluster out of service.
* ``nvml_error``: NVML calls failing or timing out mean the agent *cannot judge* that
  GPU; a failure to judge changes nothing in a scheduler.
* ``hw_slowdown``/``thermal_throttle``: the node is slow, not broken; a power brake is
  often the chassis' and passes.
* warnings of any kind.

**Conditions.** node-problem-detector gets one NodeCondition per category,
``GpuWatchdog<Category>``: ``True`` while a critical incident of its kinds is active,
``False`` when none is, ``Unknown`` when the agent cannot judge (not running, stale, GPUs
unreadable). Everything else active (warnings, and the critical ``comm_hang`` a node is
usually not to blame for) is an Event (:data:`EVENTS`).
"""

from __future__ import annotations

DRAIN_KINDS: frozenset[str] = frozenset({"gpu_lost", "ecc", "xid"})
"""Kinds whose critical incidents drain a node by default (see the module docs)."""

NEVER_DRAIN: frozenset[str] = frozenset({"agent"})
"""Kinds that never drain, whatever the config says: the agent's own trouble (its state
database) says nothing about the GPUs."""

CONDITIONS: dict[str, tuple[str, ...]] = {
    "Lost": ("gpu_lost",),
    "Ecc": ("ecc",),
    "Xid": ("xid",),
    "Driver": ("nvml_error",),
    "Slowdown": ("hw_slowdown", "thermal_throttle"),
}
"""NodeCondition ``GpuWatchdog<key>`` -> the incident kinds whose critical incidents set
it ``True``."""

CONDITION_PREFIX = "GpuWatchdog"
EVENTS = "events"
"""The pseudo-category of node-problem-detector's Event rule: any active incident that
sets no condition."""

PROBE_KINDS: dict[str, str] = {"gpu_count": "gpu_lost", "nvml_timeout": "nvml_error"}
"""``watchdog check``'s own check names that are not incident kinds -> the kind they
stand for (a GPU missing from the count is a lost GPU; an NVML call that timed out is the
driver wedged)."""


def kind_of_check(check: str) -> str:
    """The incident kind a probe finding (``Problem.check``) stands for."""
    return PROBE_KINDS.get(check, check)


def condition_name(category: str) -> str:
    """``"Ecc"`` -> ``"GpuWatchdogEcc"``."""
    return f"{CONDITION_PREFIX}{category}"


def category_of(kind: str) -> str | None:
    """The condition category of a kind (None: its incidents are Events)."""
    for category, kinds in CONDITIONS.items():
        if kind in kinds:
            return category
    return None
