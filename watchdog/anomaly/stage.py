"""The one scoring stage of the anomaly model, for the agent and for replay.

What ``watchdog replay --model`` says must be what the agent would have paged, so both go
through this stage with the same rules for *when* to judge, *whom* to judge and *how*:

* **When.** The readings of every tick are kept (a window's worth, plus the drift's
  look-back); a window is judged at the first tick of every :data:`EVERY_S` bucket of data
  time (``floor(t / 10 s)`` changes) once a full window is in: the same ticks whether the
  readings arrive one by one (live) or a recording at a time (replay). A window that is
  not judged (the agent has no model yet; ``--model auto`` fitted on it) still steps the
  gate's transitions, so judging does not begin with a start-up on a busy node.
* **Whom.** Not a GPU on which a rule is pending or firing at that tick: the detector's
  :class:`~watchdog.detect.engaged.EngagedTimeline`, which gives the same answer for a
  time in live and in replay. A judgement waits until the detector has evaluated its tick
  (live, the detector evaluates healthy ticks a few seconds at a time).
* **How.** The window's features (:mod:`features`), completed by the model, scored in one
  call for every GPU; then the :class:`~watchdog.anomaly.gate.Gate` (start-up,
  warm-up, checkpoints and the recovery after a rule are not judged; a workload change
  is not a fault: the node re-learns its normal) and the
  :class:`~watchdog.anomaly.runner.Runner`'s persistence (k of n) and words.

Only the arithmetic that computes the features differs: live computes the last window of
its ring of readings (:func:`features.last_window`), replay every window of a recording at
once (:func:`features.compute`); the two give the same values (``tests/
test_anomaly_features.py``), so the incidents are the same (``tests/test_anomaly_stage.py``).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly.gate import Gate
from watchdog.anomaly.runner import EVERY_S, Runner
from watchdog.incident import Incident
from watchdog.untyped import Array

if TYPE_CHECKING:
    from watchdog.anomaly.model import Model
    from watchdog.records import Sample

# What the stage keeps per tick, in this order: the feature metrics, then the per-GPU
# ceilings as of that tick (power W, SM and memory clock MHz; see features.ceilings).
ROW = (*F.METRICS, "_power_ceil", "_sm_ceil", "_mem_ceil")
ROW_AT = {name: k for k, name in enumerate(ROW)}
log = logging.getLogger("watchdog.records")


class Engagement(Protocol):
    """When GPUs were engaged by a rule (:class:`~watchdog.detect.engaged.EngagedTimeline`)."""

    until: float

    def at(self, t: float) -> set[str]: ...


class _Never:
    """No rules ran: no GPU is ever engaged, every tick is evaluated."""

    until = math.inf

    def at(self, t: float) -> set[str]:
        return set()


NEVER = _Never()


class AnomalyStage:
    """The model's judgement of one node. ``model`` (None: readings are kept, nothing is
    judged until :meth:`set_model`); ``start``: ticks before it are not judged (``replay
    --model auto`` fits on them)."""

    def __init__(self, model: Model | None, host: str, interval: float, *,
                 every_s: float = EVERY_S, start: float | None = None) -> None:
        self.model = model
        self.host = host
        self.interval = interval
        self.every_s = every_s
        self.start = start
        self.runner = Runner(model, host) if model is not None else None
        self.gate = Gate(model)
        self.w = F.window_ticks(interval)
        self.rows: deque[tuple[float, Array]] = deque(maxlen=F.history_ticks(interval))
        self.uuids: list[str] = []
        self.index: list[int] = []
        self._ceil: dict[str, Array] = {}
        self._bucket: int | None = None
        # windows judged once the detector has evaluated their tick: (t, uuids, index, feats)
        self._due: deque[tuple[float, list[str], list[int], Array]] = deque()
        self.latest: tuple[float, Array | None] | None = None  # the last window due
        self.scored_ms = 0.0

    def set_model(self, model: Model) -> None:
        """A new model (fitted or refitted): incidents in flight stay with the old runner."""
        self.model = model
        self.runner = Runner(model, self.host)
        self.gate.set_model(model)

    def set_host(self, host: str) -> None:
        self.host = host
        if self.runner is not None:
            self.runner.host = host

    # --- readings, tick by tick (the agent) ----------------------------------------------
    def add_samples(self, now: float, samples: Sequence[Sample]) -> None:
        """One tick's readings (:class:`~watchdog.records.Sample`, one per GPU)."""
        if not samples:
            return
        uuids = [s.uuid for s in samples]
        if uuids != self.uuids:  # GPUs changed: start the window again
            self.uuids, self.index = uuids, [s.index for s in samples]
            self.rows.clear()
            self._ceil = {}
        lost = [math.nan] * len(F.METRICS)  # one 2-D conversion (None -> NaN) per tick
        vals = np.array([lost if s.lost else list(map(s.values.get, F.METRICS))
                         for s in samples], dtype=np.float64).T
        self.rows.append((now, self._with_ceilings(vals)))
        if self._judge_now(now, len(self.rows)):
            feats = self.window()
            assert feats is not None  # a full window: _judge_now said so
            self.latest = (now, feats)
            self._due.append((now, self.uuids, self.index, feats))

    def _with_ceilings(self, vals: Array) -> Array:
        """``(len(ROW), G)``: the readings of :data:`F.METRICS`, then the running ceilings."""
        n = vals.shape[1]
        for key, metric in (("power", "power.draw"), ("sm", "clocks.sm"), ("mem", "clocks.mem")):
            prev = self._ceil.get(key, np.full(n, np.nan))
            self._ceil[key] = np.fmax(prev, vals[ROW_AT[metric]])
        limit = vals[ROW_AT["enforced.power.limit"]]
        power = np.where(np.isnan(limit), self._ceil["power"], limit)
        return np.vstack([vals, power, self._ceil["sm"], self._ceil["mem"]])

    def window(self) -> Array | None:
        """``(G, F)`` features of the window ending at the last tick, or None.

        Only the rows that window needs are stacked: its own (:func:`F.tail_ticks`) and
        those ending :data:`F.LOOKBACK_S` earlier for the drift (``F.last_window``)."""
        n = len(self.rows)
        if n < self.w:
            return None
        now, before = F.tail_spans(n, self.interval)
        return F.last_window(self._grid(*now), self._grid(*before, F.LAGGED)
                             if before is not None else None)

    def _grid(self, lo: int, hi: int, metrics: tuple[str, ...] = F.METRICS) -> F.Grid:
        rows = list(itertools.islice(self.rows, lo, hi))
        block = np.stack([r for _, r in rows], axis=1)  # (len(ROW), T, G), one copy
        data = {m: block[ROW_AT[m]] for m in metrics}
        ceil = {k: block[ROW_AT[f"_{k}_ceil"]] for k in ("power", "sm", "mem")
                } if metrics == F.METRICS else {}
        return F.Grid(np.array([t for t, _ in rows]), self.interval, self.uuids,
                      self.index, data, ceil)

    # --- readings, a recording at a time (replay) -------------------------------------------
    def add_grid(self, grid: F.Grid, feats: Array | None = None) -> None:
        """A whole recording on its tick grid (``feats``: :func:`F.compute` of it, when the
        caller has them). The windows due are queued as if the ticks came one by one."""
        if len(grid.t) == 0:
            return
        self.uuids, self.index = list(grid.uuids), list(grid.index)
        ticks = [i for i, t in enumerate(grid.t) if self._judge_now(float(t), i + 1)]
        if not ticks:
            return
        feats = F.compute(grid, self.model.window if self.model is not None else F.WINDOW_S) \
            if feats is None else feats
        for i in ticks:
            self._due.append((float(grid.t[i]), self.uuids, self.index, feats[i]))

    def _judge_now(self, t: float, n_rows: int) -> bool:
        """Whether the window ending at ``t`` is judged: the first tick of its
        :attr:`every_s` bucket, with a full window."""
        bucket = math.floor(t / self.every_s + 1e-9)
        if bucket == self._bucket:
            return False
        self._bucket = bucket
        return n_rows >= self.w

    # --- judging ------------------------------------------------------------------------------
    def judge(self, engaged: Engagement = NEVER) -> list[tuple[str, Incident]]:
        """Judge every queued window whose tick the detector has evaluated (``engaged``
        knows up to when); returns the anomaly transitions, oldest first."""
        ready = []
        while self._due and self._due[0][0] <= engaged.until:
            ready.append(self._due.popleft())
        if self.runner is None or self.start is not None:
            # not judged (no model yet, or the part --model auto fits on): the gate
            # still follows the GPUs' transitions, so a node busy for an hour is not in
            # a start-up when judging begins
            start = math.inf if self.start is None or self.runner is None else self.start
            seen = [r for r in ready if r[0] < start]  # the queue is in time order
            for t, uuids, _index, f in seen:
                if f is not None:
                    self.gate.observe(t, uuids, f, engaged.at(t))
            ready = ready[len(seen):]
        if not ready:
            return []
        assert self.runner is not None
        t0 = time.perf_counter()
        out: list[tuple[str, Incident]] = []
        model = self.model
        assert model is not None  # a runner is set with its model
        done = [(t, uuids, index, model.complete(f[None], uuids)[0])
                for t, uuids, index, f in ready if f is not None]
        if done:
            stack = np.stack([f for *_, f in done])  # (E, G, F): one scoring call
            flat = stack.reshape(-1, stack.shape[-1])
            ok = F.valid_rows(stack).reshape(-1)
            scores = np.full(len(flat), np.nan)
            if ok.any():
                scores[ok] = model.scores(flat[ok])
            per_gpu = scores.reshape(stack.shape[:2])
            for (t, uuids, index, f), s in zip(done, per_gpu, strict=True):
                judged, s, skip = self.gate.step(t, uuids, f, s, engaged.at(t))
                out += self.runner.step(t, uuids, index, judged, skip, s, raw=f)
            for at, line in self.gate.events:
                log.info("anomaly model at %s: %s", time.strftime(
                    "%Y-%m-%d %H:%M:%S", time.gmtime(at)), line)
            self.gate.events.clear()
        self.scored_ms = (time.perf_counter() - t0) * 1000.0
        return out

    def __call__(self, now: float, samples: Sequence[Sample],
                 engaged: Engagement = NEVER) -> list[tuple[str, Incident]]:
        """The live pipeline's hook with a fixed model: one tick in, what is due judged."""
        self.add_samples(now, samples)
        return self.judge(engaged)

    @property
    def incidents(self) -> list[Incident]:
        """Every anomaly incident the current runner raised."""
        return list(self.runner.incidents) if self.runner is not None else []
