"""From scores to ``anomaly`` incidents: persistence, suppression by the rules, words.

Every ``every_s`` (default 10 s) the runner scores all GPUs of the node in one call. A
GPU is *above* when its score exceeds the model's threshold. An incident fires when a
GPU was above in ``k`` of its last ``n`` evaluations (default 4 of 6: the pattern held
for most of a minute, so one odd window never pages) and resolves after ``n``
evaluations in a row below. A GPU where any rule is pending or firing is not judged
(its history is cleared): a hang is the rules' to name even while its ``for:`` runs.

:class:`Runner` works on features the caller computed; :class:`LiveAnomaly` keeps the
last window of samples for the daemon; :func:`replay_incidents` runs over a whole
recording for ``watchdog replay --model``.

What reaches people: the incident's ``summary`` is the explanation sentence (with the
score and the persistence after it) and its ``evidence`` starts with the top features as
flat ``feature: "observed (normal …)"`` strings, the form the alerting code
(``watchdog.notify.render.evidence``) shows; ``evidence["features"]`` keeps them
structured (z, distance outside the training range) for JSON readers.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from watchdog.anomaly import explain
from watchdog.anomaly import features as F
from watchdog.incident import Incident

K_OF = 4
N_OF = 6
EVERY_S = 10.0
RULE = "anomaly_model"


class Runner:
    """Persistence and incidents for one node; see the module docs."""

    def __init__(self, model: Any, host: str, *, k: int = K_OF, n: int = N_OF) -> None:
        self.model = model
        self.host = host
        self.k, self.n = k, n
        self._hist: dict[str, deque[tuple[float, bool]]] = {}
        self._below: dict[str, int] = {}
        self.active: dict[str, Incident] = {}
        self.incidents: list[Incident] = []
        self.last_max: float | None = None
        self.evaluations = 0

    def step(self, now: float, uuids: Sequence[str], index: Sequence[int],
             feats: np.ndarray, engaged: set[str] | frozenset[str] = frozenset(),
             scores: np.ndarray | None = None) -> list[tuple[str, Incident]]:
        """One evaluation at ``now`` of features ``(G, F)``; returns transitions."""
        if scores is None:  # replay completes its features before scoring them all
            feats = self.model.complete(feats, uuids)
        valid = F.valid_rows(feats[None])[0]
        if scores is None:
            scores = np.full(len(uuids), np.nan)
            if valid.any():
                scores[valid] = self.model.scores(feats[valid])
        self.evaluations += 1
        self.last_max = float(np.nanmax(scores)) if valid.any() else None
        out: list[tuple[str, Incident]] = []
        for g, uuid in enumerate(uuids):
            hist = self._hist.setdefault(uuid, deque(maxlen=self.n))
            if uuid in engaged or not valid[g]:
                hist.clear()
                continue
            above = bool(scores[g] > self.model.threshold)
            hist.append((now, above))
            inc = self.active.get(uuid)
            if inc is not None:
                self._below[uuid] = 0 if above else self._below.get(uuid, 0) + 1
                if above and scores[g] > inc.evidence["score"]:
                    inc.evidence["score"] = round(float(scores[g]), 4)
                if self._below[uuid] >= self.n:
                    inc.resolved_at = now
                    del self.active[uuid]
                    out.append(("resolved", inc))
                continue
            if sum(a for _, a in hist) >= self.k:
                first = next(t for t, a in hist if a)
                peers = np.delete(feats, g, axis=0) if len(uuids) > 1 else None
                inc = self._incident(uuid, int(index[g]), first, now, feats[g],
                                     float(scores[g]), peers)
                self.active[uuid] = inc
                self._below[uuid] = 0
                self.incidents.append(inc)
                out.append(("firing", inc))
        return out

    def _incident(self, uuid: str, index: int, started: float, now: float,
                  row: np.ndarray, score: float, peers: np.ndarray | None) -> Incident:
        top = explain.top_features(self.model, row)
        text = explain.sentence(index, row, top, peers)
        return Incident(
            kind="anomaly", severity="warning", host=self.host, gpus=[str(index)],
            uuids=[uuid], started_at=started, fired_at=now, resolved_at=None, rule=RULE,
            summary=f"{text} (anomaly score {score:.2f} over {self.model.threshold:.2f} "
                    f"in {self.k} of {self.n} checks)",
            evidence={**{item["feature"]: explain.observed_vs_normal(item) for item in top},
                      "score": round(score, 4), "threshold": round(self.model.threshold, 4),
                      "features": top, "method": "robust z against training"})


def engaged_mask(t: np.ndarray, uuids: Sequence[str], incidents: Sequence[Incident],
                 pad: float = 0.0) -> np.ndarray:
    """``(T, G)`` bool: ticks where a rule incident covering the GPU ran (from its
    start, pending included, to its end, plus ``pad`` s)."""
    col = {u: i for i, u in enumerate(uuids)}
    out = np.zeros((len(t), len(uuids)), dtype=bool)
    for inc in incidents:
        if inc.kind == "anomaly":
            continue
        end = np.inf if inc.resolved_at is None else inc.resolved_at + pad
        rows = (t >= inc.started_at) & (t <= end)
        for u in inc.uuids or list(uuids):
            if u in col:
                out[rows, col[u]] = True
    return out


def replay_incidents(model: Any, grid: F.Grid, rule_incidents: Sequence[Incident], host: str,
                     *, start: float | None = None, every_s: float = EVERY_S,
                     feats: np.ndarray | None = None) -> tuple[list[Incident], Runner]:
    """Anomaly incidents over a whole grid (from ``start`` on: ticks before it are the
    training part of ``--model auto``)."""
    if feats is None:
        feats = F.compute(grid, model.window)
    feats = model.complete(feats, grid.uuids)
    engaged = engaged_mask(grid.t, grid.uuids, rule_incidents)
    runner = Runner(model, host)
    every = max(1, round(every_s / grid.step))
    ticks = np.arange(len(grid.t))
    ticks = ticks[ticks % every == every - 1]
    if start is not None:
        ticks = ticks[grid.t[ticks] >= start]
    if len(ticks) == 0:
        return [], runner
    sel = feats[ticks]  # (E, G, F): score every evaluation in one call
    flat = sel.reshape(-1, sel.shape[-1])
    ok = F.valid_rows(sel).reshape(-1)
    scores = np.full(len(flat), np.nan)
    if ok.any():
        scores[ok] = model.scores(flat[ok])
    scores = scores.reshape(sel.shape[:2])
    for e, i in enumerate(ticks):
        busy = {u for g, u in enumerate(grid.uuids) if engaged[i, g]}
        runner.step(float(grid.t[i]), grid.uuids, grid.index, sel[e], busy, scores[e])
    return runner.incidents, runner


# What the live hook keeps per tick, in this order: the feature metrics, then the
# per-GPU ceilings as of that tick (power W, SM and memory clock MHz; see F.ceilings).
ROW = (*F.METRICS, "_power_ceil", "_sm_ceil", "_mem_ceil")
ROW_AT = {name: k for k, name in enumerate(ROW)}


class LiveAnomaly:
    """The daemon's hook: keeps the last window of samples and evaluates every
    ``every_s``; ``__call__(now, samples, engaged)`` returns anomaly transitions."""

    def __init__(self, model: Any, host: str, interval: float, *,
                 every_s: float = EVERY_S) -> None:
        self.model = model
        self.interval = interval
        self.runner = Runner(model, host) if model is not None else None
        self.host = host
        self.every_s = every_s
        self.w = F.window_ticks(interval)
        self.rows: deque[tuple[float, np.ndarray]] = deque(
            maxlen=F.history_ticks(interval))
        self.uuids: list[str] = []
        self.index: list[int] = []
        self._ceil: dict[str, np.ndarray] = {}
        self._next_eval = -np.inf
        self.scored_ms = 0.0

    def set_model(self, model: Any) -> None:
        """A new model (fitted or refitted): incidents in flight stay with the old runner."""
        self.model = model
        self.runner = Runner(model, self.host)

    def _row(self, samples: Sequence[Any]) -> np.ndarray:
        """``(len(ROW), G)``: this tick's readings of :data:`ROW` (NaN = not read, and
        every metric of a lost GPU), then the per-GPU ceilings as of this tick."""
        uuids = [s.uuid for s in samples]
        if uuids != self.uuids:  # GPUs changed: start the window again
            self.uuids, self.index = uuids, [s.index for s in samples]
            self.rows.clear()
            self._ceil = {}
        lost = [math.nan] * len(F.METRICS)  # one 2-D conversion (None -> NaN) per tick
        vals = np.array([lost if s.lost else list(map(s.values.get, F.METRICS))
                         for s in samples], dtype=np.float64).T
        for key, metric in (("power", "power.draw"), ("sm", "clocks.sm"), ("mem", "clocks.mem")):
            prev = self._ceil.get(key, np.full(len(uuids), np.nan))
            self._ceil[key] = np.fmax(prev, vals[ROW_AT[metric]])
        limit = vals[ROW_AT["enforced.power.limit"]]
        power = np.where(np.isnan(limit), self._ceil["power"], limit)
        return np.vstack([vals, power, self._ceil["sm"], self._ceil["mem"]])

    def add(self, now: float, samples: Sequence[Any]) -> None:
        """Add this tick's samples to the window."""
        if samples:
            self.rows.append((now, self._row(samples)))

    def window(self) -> np.ndarray | None:
        """``(G, F)`` features of the window ending at the last tick, or None.

        Only the rows that window needs are stacked: its own (:func:`F.tail_ticks`) and
        those ending :data:`F.LOOKBACK_S` earlier for the drift (``F.last_window``); the
        same values as computing the whole history, at a fraction of the cost."""
        n = len(self.rows)
        if n < self.w:
            return None
        now, before = F.tail_spans(n, self.interval)
        return F.last_window(self._grid(*now), self._grid(*before, F.TEMPERATURE)
                             if before is not None else None)

    def _grid(self, lo: int, hi: int, metrics: tuple[str, ...] = F.METRICS) -> F.Grid:
        """Rows ``lo:hi`` of the window as a grid of ``metrics`` (with the ceilings when
        all are asked for; the drift's lagged slice needs only the temperature)."""
        rows = list(itertools.islice(self.rows, lo, hi))
        block = np.stack([r for _, r in rows], axis=1)  # (len(ROW), T, G), one copy
        data = {m: block[ROW_AT[m]] for m in metrics}
        ceil = {k: block[ROW_AT[f"_{k}_ceil"]] for k in ("power", "sm", "mem")
                } if metrics == F.METRICS else {}
        return F.Grid(np.array([t for t, _ in rows]), self.interval, self.uuids,
                      self.index, data, ceil)

    def __call__(self, now: float, samples: Sequence[Any],
                 engaged: set[str]) -> list[tuple[str, Incident]]:
        import time

        self.add(now, samples)
        if self.runner is None or now < self._next_eval:
            return []
        feats = self.window()
        if feats is None:
            return []
        self._next_eval = now + self.every_s - 1e-6
        t0 = time.perf_counter()
        out = self.runner.step(now, self.uuids, self.index, feats, engaged)
        self.scored_ms = (time.perf_counter() - t0) * 1000.0
        return out
