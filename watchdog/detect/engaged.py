"""When each GPU was *engaged*: a rule pending or firing on it, as a function of data time.

The anomaly model stays quiet on an engaged GPU (what a rule is about to name is the
rule's) and does not learn from it. Asked "engaged at time t?", the answer must be the
same whether the detector ran tick by tick (live, its healthy ticks evaluated a few
seconds late) or over a whole recording in blocks (replay), or ``replay`` would not say
what the agent would have paged. So the detector records every episode as an interval of
data time, block by block (blocks never change what happened at a tick: block == tick):

* a ``scope: gpu`` rule: the GPU's pending-or-firing interval ``[since, end)``;
* a ``scope: node`` rule: while the node's state is pending or firing, each GPU whose own
  condition holds, and every member of the node incident while it fires.

:meth:`EngagedTimeline.at` answers for any time up to the last one evaluated
(:attr:`EngagedTimeline.until`); an episode still open covers everything after its start.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from watchdog.untyped import Array

INF = math.inf


class EngagedTimeline:
    """Engaged intervals by GPU UUID. Episodes are keyed ``(rule, uuid, since)``: the
    same episode reported again by a later block (its end now known) replaces itself."""

    def __init__(self) -> None:
        self._episodes: dict[tuple[str, str, float], float] = {}  # -> end (inf: open)
        self._open_runs: dict[tuple[str, str], float] = {}  # node rules: run start
        self.until = -INF  # data time of the last evaluated tick

    @classmethod
    def of_incidents(cls, incidents: Iterable[object]) -> EngagedTimeline:
        """What rule incidents alone imply: each of their GPUs engaged from the incident's
        start (its pending included) to its end; every time evaluated. For a caller that
        has only the incidents (a benchmark, a test), not the detector that ran."""
        out = cls()
        for inc in incidents:
            if getattr(inc, "kind", None) == "anomaly":
                continue
            end = inc.resolved_at if inc.resolved_at is not None else INF  # type: ignore[attr-defined]
            for uuid in inc.uuids:  # type: ignore[attr-defined]
                out.episode(inc.rule, uuid, float(inc.started_at), end)  # type: ignore[attr-defined]
        out.until = INF
        return out

    # --- recording (the rule runner) -------------------------------------------------------
    def episode(self, rule: str, uuid: str, since: float, end: float) -> None:
        """``uuid`` engaged by ``rule`` from ``since`` to ``end`` (inf: still)."""
        if math.isnan(since):
            return
        self._episodes[(rule, uuid, since)] = end

    def node_runs(self, rule: str, ticks: Array, on: Array,
                  uuids: list[str]) -> None:
        """``on`` (ticks x GPUs): whether each GPU counts as engaged by node rule ``rule``
        at each of the block's ``ticks`` (the node is pending or firing and the GPU's own
        condition holds). Runs are carried from block to block."""
        if len(ticks) == 0:
            return
        open_here = [k for k in self._open_runs if k[0] == rule]
        if not on.any() and not open_here:
            return  # the common case: nothing engaged, nothing carried
        col = {u: j for j, u in enumerate(uuids)}
        for key in open_here:  # a GPU that left the node: its run ends
            if key[1] not in col:
                self._episodes[(rule, key[1], self._open_runs.pop(key))] = float(ticks[0])
        for j in np.flatnonzero(on.any(axis=0) | np.array(
                [(rule, u) in self._open_runs for u in uuids], dtype=bool)):
            uuid = uuids[j]
            flags = on[:, j].astype(np.int8)
            edges = np.diff(np.concatenate(([0], flags, [0])))
            starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
            carried = self._open_runs.pop((rule, uuid), None)
            for a, b in zip(starts, ends, strict=True):
                since = float(ticks[a]) if not (a == 0 and carried is not None) else carried
                end = float(ticks[b]) if b < len(ticks) else INF
                self._episodes[(rule, uuid, since)] = end
                if end == INF:
                    self._open_runs[(rule, uuid)] = since
            if carried is not None and (len(starts) == 0 or starts[0] != 0):
                self._episodes[(rule, uuid, carried)] = float(ticks[0])  # ended at once

    def carries(self, rule: str) -> bool:
        """Whether node rule ``rule`` has a GPU's run open from an earlier block."""
        return any(k[0] == rule for k in self._open_runs)

    def evaluated(self, t: float) -> None:
        """Every tick up to ``t`` has been through the rules."""
        self.until = max(self.until, t)

    # --- reading (the anomaly stage) -------------------------------------------------------
    def at(self, t: float) -> set[str]:
        """GPUs engaged at data time ``t`` (``since <= t < end``)."""
        return {uuid for (_rule, uuid, since), end in self._episodes.items()
                if since <= t < end}

    def forget_before(self, t: float) -> int:
        """Drop episodes that ended before ``t`` (the live pipeline's, which asks only
        about recent times, every ``ENGAGED_KEEP_S``); returns how many."""
        gone = [k for k, end in self._episodes.items() if end <= t]
        for k in gone:
            del self._episodes[k]
        return len(gone)
