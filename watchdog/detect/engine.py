"""The Detector: samples in, incidents out, identically in block (replay) and tick (live) mode.

A facade over four parts, each in its own module:

* :mod:`intake`: frames and live samples → per-GPU blocks (out-of-order rows dropped, the
  last tick of a frame held, vanished GPUs, XID events placed);
* :mod:`rules_run`: each block → derived signals and windows (:mod:`signals`,
  :mod:`windows`) → every rule's condition, vectorised (:mod:`evaluate`) → inhibition →
  alert states (:mod:`state`) → incidents (:mod:`grouping`);
* :mod:`ledger`: the incidents and the transitions not drained yet;
* :mod:`learned`: what is learned from the data (each GPU's power levels, each rule's
  learned ``for:``), persisted by the live agent.

Time comes only from the data. See ``docs/rules.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from watchdog.detect.engaged import EngagedTimeline
from watchdog.detect.intake import Columns, Intake, frame_columns, tick_columns
from watchdog.detect.learned import PowerLevels
from watchdog.detect.ledger import Ledger
from watchdog.detect.loader import Rule, RuleSet
from watchdog.detect.rules_run import RuleRunner
from watchdog.detect.waits import load_waits, waits_to_dict
from watchdog.incident import Incident
from watchdog.records import DeviceInfo, Sample, XidEvent
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    import pandas as pd

# Live agent: seconds of data time between evaluations of healthy ticks (feed_tick). Five
# 1 s ticks in one block cost about a quarter of five single-tick evaluations (numpy's fixed
# cost per rule per window); alerts come at most this much later, urgent ticks at once.
LIVE_TICK_BATCH_S = 5.0


@dataclass(frozen=True)
class DetectorConfig:
    """Engine settings. ``max_gap`` (s): longest interval a sample's weight covers, and
    how old a GPU's latest sample may be before node rules treat it as missing.
    ``learn_power_levels``: learn each GPU's idle and busy power from the data (False: the
    fallbacks only, for a burst too short to hold any history; see
    :class:`~watchdog.detect.learned.PowerLevels`). ``interval`` (s): the input's
    sampling interval when known (a replayed log's): rule windows too short to hold two
    samples widen (:data:`~watchdog.detect.rules_run.MIN_WINDOW_SAMPLES`), and each
    incident says so."""

    max_gap: float = 30.0
    learn_power_levels: bool = True
    interval: float | None = None


class Detector:
    """Runs a :class:`RuleSet` over samples of one host's GPUs. See ``docs/rules.md``."""

    def __init__(self, rules: RuleSet | Sequence[Rule], host: str,
                 devices: Sequence[DeviceInfo], config: DetectorConfig | None = None,
                 metrics: Iterable[str] | None = None, *, tick_batch_s: float = 0.0) -> None:
        """``tick_batch_s``: live evaluation batching, see :meth:`feed_tick`.

        ``metrics``: the only catalogue metrics that will ever be fed (a recording's
        columns, plus ``"xid"`` when it has XID events), or None (live: any). With them,
        rules that cannot fire without the others are left out
        (:mod:`~watchdog.detect.prune`): same incidents, less work."""
        self.rules = rules if isinstance(rules, RuleSet) else RuleSet(list(rules))
        self.host = host
        self.config = config or DetectorConfig()
        announced = None if metrics is None else frozenset(metrics)
        self._ledger = Ledger({r.name: i for i, r in enumerate(self.rules)})
        self._rules = RuleRunner(self.rules, host, self.config.max_gap, announced,
                                 self._ledger, self.config.interval)
        self._pruned = self._rules.pruned  # rules left out for the announced metrics
        self._levels = PowerLevels(self.config.learn_power_levels, self.config.interval)
        self._intake = Intake(devices, self.config.max_gap, announced, self._levels)
        # live batching (feed_tick): seconds of data time between evaluations; 0 = every tick
        self.tick_batch_s = tick_batch_s
        self._pending: list[Sample] = []
        self._evaluated_at = -math.inf

    # --- input --------------------------------------------------------------------------
    def feed_frame(self, frame: pd.DataFrame, xids: Iterable[XidEvent] = (), *,
                   complete: bool = False) -> None:
        """A block of ticks (the replay frame contract; see the module docs of replay).

        The rows of the frame's last timestamp are held back until later input arrives,
        unless the caller says the frame is ``complete``: it ends on a tick boundary (any
        later frame starts at a later time), as replay cuts its blocks. The incidents are
        the same either way; holding costs a copy of the whole next block.
        """
        cols = frame_columns(frame)
        xids = list(xids)
        if xids:
            self._intake.check_xids_announced()
        self._intake.add_xids(xids)
        self._feed(cols, hold=not complete)

    def feed_tick(self, ts: float, samples: Sequence[Sample]) -> None:
        """One live reading of every GPU at time ``ts`` (s); XIDs ride on the samples.

        With ``tick_batch_s`` > 0 healthy ticks are buffered and evaluated together once
        ``tick_batch_s`` seconds of data time have passed since the last evaluation (one
        block of several ticks: the same incidents as tick by tick, since block == tick,
        at a fraction of the per-tick numpy overhead). A tick with an XID, a lost GPU, an
        NVML error or a GPU not seen before is evaluated at once, with what is buffered.
        """
        if any(s.xids for s in samples):
            self._intake.check_xids_announced()
        if not samples:
            return
        self._pending.extend(samples)
        urgent = any(s.xids or s.lost or s.errors or s.uuid not in self._intake.gpus
                     for s in samples)
        if urgent or ts >= self._evaluated_at + self.tick_batch_s:
            self.flush_ticks()
            self._evaluated_at = ts

    @property
    def pending_ticks(self) -> int:
        """Samples fed with :meth:`feed_tick` and not evaluated yet (see ``tick_batch_s``)."""
        return len(self._pending)

    def flush_ticks(self) -> None:
        """Evaluate every buffered live sample now (one block)."""
        samples, self._pending = self._pending, []
        if not samples:
            return
        cols = tick_columns(samples)
        for s in samples:
            self._intake.add_xids(s.xids)
        self._feed(cols, hold=False)

    @property
    def widened_to(self) -> float:
        """The width (s) rule windows shorter than it were widened to for the input's
        sampling interval (0: none was)."""
        return max(self._rules.widened.values(), default=0.0)

    @property
    def dropped_samples(self) -> int:
        """Rows dropped so far: time going backwards, or repeated for their GPU."""
        return self._intake.dropped_samples

    # --- incidents ----------------------------------------------------------------------
    @property
    def incidents(self) -> list[Incident]:
        """Every incident that fired so far, by ``started_at``."""
        return self._ledger.incidents()

    def drain(self) -> list[tuple[str, Incident]]:
        """Transitions since the last drain, in time order: ("firing"|"resolved", inc)."""
        return self._ledger.drain()

    @property
    def engaged(self) -> EngagedTimeline:
        """When each GPU had a rule pending or firing, by data time, up to the last tick
        evaluated (:mod:`watchdog.detect.engaged`): the anomaly model's answer to "is a
        rule about to name this?", the same in live and replay."""
        return self._rules.engaged

    def engaged_gpus(self) -> set[str]:
        """UUIDs where any rule is pending or firing now (the anomaly model stays quiet
        there: what a rule is about to name is the rule's)."""
        return self._rules.engaged_gpus()

    def finish(self) -> list[Incident]:
        """End of input: process held rows; active incidents keep ``resolved_at=None``."""
        self.flush_ticks()
        held = self._intake.take_held()
        if held is not None:
            self._process(held)
        return self.incidents

    def forget_resolved(self) -> int:
        """Drop resolved incidents from memory (a daemon running for months keeps only
        what is active; the state database has the history). Returns how many."""
        return self._ledger.forget_resolved()

    # --- learned state (:mod:`learned`) -------------------------------------------------
    def learned_state(self) -> dict[str, JsonDoc]:
        """Learned ``for:`` state per rule (JSON-ready), for persistence (buffered live
        ticks are evaluated first)."""
        self.flush_ticks()
        return waits_to_dict(self._rules.learners())

    def load_learned_state(self, state: dict[str, JsonDoc]) -> None:
        """Restore :meth:`learned_state` output (unknown rules are ignored)."""
        load_waits(self._rules.learners(), state)

    def learned_levels(self) -> dict[str, dict[str, float | None]]:
        """Each GPU's learned idle and busy power (W) and highest SM clock seen (MHz), by
        UUID (None where nothing was learned yet), for persistence."""
        self.flush_ticks()
        return self._levels.to_dict([g.uuid for g in self._intake.slots])

    def learned_since(self) -> dict[str, dict[str, float]]:
        """Per GPU (by UUID): its ``index``, when its idle and busy power levels and its
        temperature-while-working reference were first known (POSIX s; NaN: never) and
        when it was first seen (``seen``) and its latest sample (``last``), for the coverage notes
        (:func:`watchdog.detect.coverage.late`)."""
        self.flush_ticks()
        lv = self._levels
        lv.grow(len(self._intake.slots))
        return {g.uuid: {"index": float(g.index), "idle": float(lv.since["idle"][g.slot]),
                         "busy": float(lv.since["busy"][g.slot]),
                         "temp": float(lv.since["temp"][g.slot]),
                         "work": float(lv.since["work"][g.slot]),
                         "seen": float(lv.since["seen"][g.slot]), "last": g.last_ts}
                for g in self._intake.slots}

    def load_learned_levels(self, levels: dict[str, dict[str, float | None]]) -> None:
        """Restore :meth:`learned_levels` output for the GPUs this detector knows (by UUID;
        others are ignored). Call before the first sample: learning goes on from there."""
        self._levels.load(levels, [g.uuid for g in self._intake.slots])

    # --- evaluation ---------------------------------------------------------------------
    def _feed(self, cols: Columns, hold: bool) -> None:
        for part in self._intake.rows(cols, hold):
            self._process(part)

    def _process(self, cols: Columns) -> None:
        """One block: intake, then every rule over it."""
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            block = self._intake.block(cols)
            if block is not None:
                self._rules.run(block, self._intake.gpus, self._intake.dropped_samples)
