"""From scores to ``anomaly`` incidents: persistence, suppression by the rules, words.

Every ``every_s`` (default 10 s) the runner scores all GPUs of the node in one call. A
GPU is *above* when its score exceeds the model's threshold. An incident fires when a
GPU was above in ``k`` of its last ``n`` evaluations (default 4 of 6: the pattern held
for most of a minute, so one odd window never pages) and resolves after ``n``
evaluations in a row below. One odd *reading* never pages either: where a window holds
fewer than :data:`FEW_READINGS` readings and a reading stays in ``k`` checks or more
(sampled every 5-15 s), one reading moves its features by a sixth and stays in every
window for a minute, 6 checks at 10 s, and ``k`` of ``n`` holds for 40 s. There ``k``
of ``n`` must also have held a window (60 s) earlier: 60 s later at 10 s sampling than
at 1 s.
A single dip of utilization, sampled every 10 s, paged nanoGPT's healthy GPUs.
A GPU where any rule is pending or firing is not judged (its history is cleared): a
hang is the rules' to name even while its ``for:`` runs.

:class:`Runner` works on features the caller computed: the scoring stage
(:mod:`watchdog.anomaly.stage`) feeds it, for the agent and for ``watchdog replay
--model`` alike.

What reaches people: the incident's ``summary`` is the explanation sentence (with the
score and the persistence after it) and its ``evidence`` starts with the top features as
flat ``feature: "observed (normal …)"`` strings, the form the alerting code
(``watchdog.notify.render.evidence``) shows; ``evidence["features"]`` keeps them
structured (z, distance outside the training range) for JSON readers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from watchdog.anomaly import explain
from watchdog.anomaly import features as F
from watchdog.incident import Incident
from watchdog.untyped import Array

if TYPE_CHECKING:
    from watchdog.anomaly.model import Model

K_OF = 4
N_OF = 6
FEW_READINGS = 12  # a window of fewer readings than this moves with one of them
EVERY_S = 10.0
RULE = "anomaly_model"


class Runner:
    """Persistence and incidents for one node; see the module docs."""

    def __init__(self, model: Model, host: str, *, k: int = K_OF, n: int = N_OF) -> None:
        self.model = model
        self.host = host
        self.k, self.n = k, n
        self._hist: dict[str, deque[tuple[float, bool]]] = {}
        self._held: dict[str, deque[float]] = {}  # checks where k of n held (few readings)
        self._below: dict[str, int] = {}
        self.active: dict[str, Incident] = {}
        self.incidents: list[Incident] = []
        self.last_max: float | None = None
        self.evaluations = 0

    def step(self, now: float, uuids: Sequence[str], index: Sequence[int],
             feats: Array, engaged: set[str] | frozenset[str] = frozenset(),
             scores: Array | None = None, raw: Array | None = None
             ) -> list[tuple[str, Incident]]:
        """One evaluation at ``now`` of features ``(G, F)``; returns transitions.
        ``raw``: the window as read, where ``feats`` are the gate's (a re-learned job's
        offsets taken off): the page shows what the GPU reads and its job's normal."""
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
                self._held.pop(uuid, None)
                continue
            above = bool(scores[g] > self.model.threshold)
            hist.append((now, above))
            inc = self.active.get(uuid)
            if inc is not None and inc.resolved_at is not None:
                del self.active[uuid]  # a rule's incident took it over (anomaly/handover.py)
                inc = None
            if inc is not None:
                self._below[uuid] = 0 if above else self._below.get(uuid, 0) + 1
                if above and scores[g] > inc.evidence["score"]:
                    inc.evidence["score"] = round(float(scores[g]), 4)
                if self._below[uuid] >= self.n:
                    inc.resolved_at = now
                    del self.active[uuid]
                    out.append(("resolved", inc))
                continue
            if sum(a for _, a in hist) >= self.k and self._apart(uuid, now):
                first = next(t for t, a in hist if a)
                seen = feats if raw is None else raw
                peers = np.delete(seen, g, axis=0) if len(uuids) > 1 else None
                inc = self._incident(uuid, int(index[g]), first, now, feats[g],
                                     float(scores[g]), peers, seen[g])
                self.active[uuid] = inc
                self._below[uuid] = 0
                self.incidents.append(inc)
                out.append(("firing", inc))
        return out

    def _apart(self, uuid: str, now: float) -> bool:
        """Whether ``k`` of ``n`` (which holds at ``now``) rests on more than one reading:
        always where a window holds :data:`FEW_READINGS` or more or a reading stays in
        fewer than ``k`` checks (sampled every 20 s or slower); else it also held 60-120 s
        ago (one reading keeps it for 40 s at 10 s sampling)."""
        window = float(getattr(self.model, "window", F.WINDOW_S))
        step = float(getattr(self.model, "step", 1.0))
        if step <= 0 or window / step >= FEW_READINGS or window / max(step, EVERY_S) < self.k:
            return True  # a reading weighs little, or stays in fewer than k checks
        held = self._held.setdefault(uuid, deque(maxlen=2 * self.n))
        held.append(now)
        return any(now - 2 * window <= t <= now - window + 1e-6 for t in held)

    def _incident(self, uuid: str, index: int, started: float, now: float,
                  row: Array, score: float, peers: Array | None,
                  raw: Array) -> Incident:
        top = explain.as_read(self.model, explain.top_features(self.model, row), row, raw)
        text = explain.sentence(index, raw, top, peers)
        return Incident(
            kind="anomaly", severity="warning", host=self.host, gpus=[str(index)],
            uuids=[uuid], started_at=started, fired_at=now, resolved_at=None, rule=RULE,
            summary=f"{text} (anomaly score {score:.2f} over {self.model.threshold:.2f} "
                    f"in {self.k} of {self.n} checks)",
            evidence={**{item["feature"]: explain.observed_vs_normal(item) for item in top},
                      "score": round(score, 4), "threshold": round(self.model.threshold, 4),
                      "features": top, "method": "robust z against training"})


def engaged_mask(t: Array, uuids: Sequence[str], incidents: Sequence[Incident],
                 pad: float = 0.0) -> Array:
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
