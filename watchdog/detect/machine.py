"""Prometheus-style alert states, with learned ``for:`` durations (:mod:`learned`).

For each rule and entity (a GPU, or the node for ``scope: node`` rules) the state goes
``inactive → pending`` (condition true) ``→ firing`` (held for ``for``) ``→ inactive``
(resolved: the clear test held for ``keep_firing_for``); a pending whose condition turns
false is forgotten and, for a learned ``for``, its duration is recorded.

A block is processed with one Python step per state transition (never per sample): the
next transition of each entity is found with ``searchsorted`` over the indices where the
condition / clear test is true or false. Entities are advanced in global time order
(ties: forget, resolve, fire, start; then entity order), because a learned ``for`` read
at one GPU's pending start depends on episodes other GPUs finished earlier. This makes
the result independent of how the samples are split into blocks.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from watchdog.detect.waits import LearnedWait, WaitLearner
from watchdog.incident import Incident
from watchdog.untyped import Array

INF = math.inf
_PRIO = {"forget": 0, "resolve": 1, "fire": 2, "start": 3}


@dataclass
class EntityState:
    """Where one entity is in the state machine, carried across blocks."""

    phase: str = "inactive"  # inactive | pending | firing
    since: float = math.nan  # pending start (s)
    for_used: float = 0.0
    clear_since: float | None = None
    incident: Incident | None = None


class _Cursor:
    """One entity's block and position; index arrays are computed when first needed."""

    def __init__(self, key: str, ts: Array, cond: Array, clr: Array,
                 st: EntityState) -> None:
        self.key, self.ts, self.cond, self.clr, self.st = key, ts, cond, clr, st
        self.i = 0
        self._idx: dict[str, Array] = {}

    def idx(self, what: str) -> Array:
        """Sorted indices where cond/clear is true/false (``what``: ct, cf, rt, rf)."""
        got = self._idx.get(what)
        if got is None:
            arr = self.cond if what[0] == "c" else self.clr
            got = self._idx[what] = np.flatnonzero(arr if what[1] == "t" else ~arr)
        return got


def _next(idx: Array, i: int, n: int) -> int:
    """First element of sorted ``idx`` that is >= i, else n."""
    p = int(np.searchsorted(idx, i))
    return int(idx[p]) if p < len(idx) else n


FireFn = Callable[[str, int, EntityState], Incident]
ResolveFn = Callable[[str, float, EntityState], None]


class Machine:
    """The alert states of one rule over all its entities."""

    def __init__(self, for_s: float, keep_firing_for: float,
                 learned: LearnedWait | None) -> None:
        self.for_s = for_s
        self.keep = keep_firing_for
        self.learner = WaitLearner(learned) if learned else None
        self.states: dict[str, EntityState] = {}

    def run(self, inputs: list[tuple[str, Array, Array, Array]],
            on_fire: FireFn, on_resolve: ResolveFn) -> dict[str, list[tuple[float, float]]]:
        """Advance every entity through its block ``(key, ts, cond, clear_test)``.

        ``on_fire(key, index, state)`` returns the new incident; ``on_resolve(key, t, state)``
        closes it. Returns each entity's active (pending or firing) intervals
        ``[start, end)`` touching this block, ``end = inf`` while still open.
        """
        intervals: dict[str, list[tuple[float, float]]] = {}
        heap: list[tuple[float, int, int, str, int]] = []
        cursors: list[_Cursor] = []
        for key, ts, cond, clr in inputs:
            st = self.states.setdefault(key, EntityState())
            intervals[key] = []
            if st.phase == "inactive" and not cond.any():
                continue  # nothing starts: no transition in this block
            c = _Cursor(key, ts, cond, clr, st)
            cursors.append(c)
            self._push(heap, c, len(cursors) - 1)
        while heap:
            _, _, order, what, idx = heapq.heappop(heap)
            c = cursors[order]
            st, ts = c.st, c.ts
            t = float(ts[idx])
            if what == "start":
                st.phase, st.since = "pending", t
                st.for_used = self.learner.effective() if self.learner else self.for_s
                c.i = idx
            elif what == "fire":
                st.phase, st.clear_since = "firing", None
                st.incident = on_fire(c.key, idx, st)
                c.i = idx + 1
            elif what == "forget":
                if self.learner:
                    self.learner.record(t - st.since)
                intervals[c.key].append((st.since, t))
                st.phase, st.since = "inactive", math.nan
                c.i = idx
            else:  # resolve
                on_resolve(c.key, t, st)
                intervals[c.key].append((st.since, t))
                st.phase, st.since, st.incident, st.clear_since = "inactive", math.nan, None, None
                c.i = idx + 1
            self._push(heap, c, order)
        for c in cursors:
            if c.st.phase != "inactive":
                intervals[c.key].append((c.st.since, INF))
        return intervals

    def _push(self, heap: list, c: _Cursor, order: int) -> None:  # (t, prio, order, …)
        ev = self._peek(c)
        if ev is not None:
            what, idx = ev
            heapq.heappush(heap, (float(c.ts[idx]), _PRIO[what], order, what, idx))

    def _peek(self, c: _Cursor) -> tuple[str, int] | None:
        """The entity's next transition in this block, or None."""
        n = len(c.ts)
        st = c.st
        while c.i < n:
            if st.phase == "inactive":
                j = _next(c.idx('ct'), c.i, n)
                return ("start", j) if j < n else None
            if st.phase == "pending":
                k = _next(c.idx('cf'), c.i, n)
                f = max(c.i, int(np.searchsorted(c.ts, st.since + st.for_used, side="left")))
                if f < k and f < n:
                    return ("fire", f)
                return ("forget", k) if k < n else None
            # firing: the clear test must hold continuously for keep_firing_for
            if st.clear_since is None:
                m = _next(c.idx('rt'), c.i, n)
                if m >= n:
                    return None
                st.clear_since, c.i = float(c.ts[m]), m
            q = _next(c.idx('rf'), c.i, n)
            r = max(c.i, int(np.searchsorted(c.ts, st.clear_since + self.keep, side="left")))
            if r < q and r < n:
                return ("resolve", r)
            if q >= n:
                return None
            st.clear_since, c.i = None, q
        return None
