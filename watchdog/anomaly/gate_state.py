"""What the gate remembers, per GPU and for the node; the decision modules work over it.

Each GPU's state is a :class:`GpuState`, the one place a GPU's gate state lives; the
node's is a :class:`GateState` (the model, the learned normals, the consensus count, a
re-learning under way).

Times are seconds of data time; powers fractions of the GPU's power limit.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from watchdog.anomaly.gate_limits import ACTIVITIES_KEPT, LAG_WINDOWS, PHASES_KEPT
from watchdog.untyped import Array

if TYPE_CHECKING:
    from watchdog.anomaly.model import Model

# A learned normal: each GPU's feature offsets (uuid -> (F,)), the job's as a whole: a
# workload change re-learns every GPU of the job together, and a node back on a job it
# ran before takes that job's offsets for all of its GPUs at once
Normal = dict[str, Array]


@dataclass
class Work:
    """One activity of a GPU's work (levels in :data:`~.gate_limits.ACTIVITY` order) and
    the power it drew there: the most, and the mean and variance of its judged-normal
    windows (exponentially weighted, :data:`~.gate_limits.ACTIVITY_ALPHA`)."""

    act: Array
    most: float
    mean: float
    var: float = 0.0


@dataclass
class GpuState:
    """What the gate remembers of one GPU."""

    # grace (grace.py)
    seen: bool = False
    idle_since: float | None = None  # first not-busy window of the current idle spell
    grace_from: float | None = None
    grace_min: float = 0.0
    grace_fixed: bool = False  # a checkpoint's grace ends at grace_min, settled or not
    grace_why: str = ""
    engaged: bool = False
    after_gap: bool = False  # the current busy spell followed an idle gap (a new process)
    # idle with its memory released since it last worked: the process ended, and what comes
    # next is another (a job 72 s after the last one, at its activity and memory and 0.73
    # of the limit where the last drew 0.93, paged 10 times as a slowdown on the job stream)
    freed: bool = False
    drift_from: float = -math.inf  # its last grace began here: the drift's look-back is stale
    powers: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=LAG_WINDOWS))  # (t, power) lately
    # its normal and its own evidence (consensus.py)
    ref: tuple[float, float, float] | None = None  # (util %, memory, power) of its normal
    spread: tuple[float, float] = (0.0, 0.0)  # mean |util|, |memory| off the ref lately
    moved: int = 0  # windows in a row over the threshold with its own work changed
    # phases of its work (phases.py)
    stay: tuple[float, float] | None = None  # (power, since): the level it holds now
    phases: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=PHASES_KEPT))  # (power, s) held and left
    # what it drew at each activity of its work (alone.py)
    works: deque[Work] = field(default_factory=lambda: deque(maxlen=ACTIVITIES_KEPT))
    # re-learning (relearn.py): part of the change under way, and its windows there
    settling: bool = False
    early: list[Array] | None = None  # its job's first busy windows
    last: deque[Array] | None = None  # its last busy windows, grace or not
    steady: deque[Array] | None = None  # its last steady windows (no grace)
    fell: bool = False  # fell from its peers while its job settled: peer_power judged shifted

    def new_work(self, t: float) -> None:
        """Another process or job from ``t``: the drift's look-back, the phases, the power
        drawn at each activity and a fall are the old work's."""
        self.drift_from, self.stay, self.fell = t, None, False
        self.phases.clear()
        self.works.clear()

    def stop_settling(self) -> None:
        self.settling, self.early, self.last, self.steady = False, None, None, None


@dataclass
class Relearn:
    """A workload change under way: since when (its GPUs are the ones
    :attr:`GpuState.settling`; why is :attr:`GateState.workload_change`)."""

    since: float


@dataclass
class GateState:
    """The node's gate: its GPUs' states and what the node as a whole remembers."""

    model: Model | None  # None: not fitted yet (the daemon collecting its baseline)
    gpus: dict[str, GpuState] = field(default_factory=dict)
    normals: list[Normal] = field(default_factory=lambda: [{}])  # the fitted model's first
    current: Normal = field(default_factory=dict)
    relearn: Relearn | None = None
    consensus: int = 0  # windows in a row with a node-wide departure
    last_t: float | None = None
    members: frozenset[str] = frozenset()  # the GPUs of the node's job
    drift_from: float = -math.inf  # the job's GPUs changed here
    workload_changed_at: float | None = None
    workload_change: str | None = None
    events: list[tuple[float, str]] = field(default_factory=list)  # (t, line) for the log

    @property
    def fitted(self) -> Model:
        """The model the gate judges with: set whenever a window is judged (the
        transitions stepped before a fit read no model)."""
        if self.model is None:
            raise RuntimeError("the anomaly gate judges only with a fitted model")
        return self.model

    def gpu(self, u: str) -> GpuState:
        """GPU ``u``'s state (a new one the first time it is seen)."""
        return self.gpus.setdefault(u, GpuState())

    def settling(self) -> set[str]:
        """The GPUs of the workload change under way (empty when none)."""
        if self.relearn is None:
            return set()
        return {u for u, st in self.gpus.items() if st.settling}
