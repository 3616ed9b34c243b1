"""The fitted model: its trees, the training range and centre of every feature, each
GPU's own thermal line, the threshold and its calibration; and how it scores a window
(the forest's path score plus the distance beyond the training range, see
:mod:`watchdog.anomaly.train`). Fitted by :mod:`~watchdog.anomaly.train`, stored by
:mod:`~watchdog.anomaly.persist`, read by the gate and the runner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from watchdog.anomaly import baseline
from watchdog.anomaly import features as F
from watchdog.anomaly.score import Forest, prepare
from watchdog.untyped import Array, JsonDoc

EXCEED_WEIGHT = 0.05  # score per resolution unit beyond the training range
EXCEED_CAP = 20.0  # resolution units: one far-off feature cannot outweigh everything else


@dataclass
class Model:
    """A fitted, calibrated model and everything needed to trust and explain it.

    Times in epoch s; ``step``/``window`` in s; ``threshold`` on the anomaly score
    (higher = more anomalous)."""

    forest: Forest
    threshold: float
    gpu_model: str
    trained_from: float
    trained_to: float
    step: float
    window: float
    fill: Array
    center: Array
    scale: Array
    lo: Array | None = None
    hi: Array | None = None
    unit: Array | None = None
    calibration: JsonDoc = field(default_factory=dict)
    schema: int = F.FEATURE_SCHEMA
    features: tuple[str, ...] = F.FEATURES
    base_uuids: tuple[str, ...] = ()
    base_coef: Array | None = None

    def complete(self, feats: Array, uuids: Sequence[str]) -> Array:
        """``(..., G, F)`` features of GPUs ``uuids`` with the model-side ``own_temp``
        filled from each GPU's own training baseline (a copy)."""
        return baseline.complete(feats, uuids, self.base_uuids, self.base_coef)

    def scores(self, x: Array) -> Array:
        """Anomaly scores of feature rows ``x`` (N, F); NaN features read as normal."""
        xf = prepare(x, self.fill)
        return self.forest.scores(xf) + EXCEED_WEIGHT * self.exceedance(xf)

    def exceedance(self, x: Array) -> Array:
        """Largest distance beyond the training range, in resolution units (capped)."""
        if self.lo is None or self.hi is None or self.unit is None:
            return np.zeros(len(x))
        over = np.maximum(self.lo - x, x - self.hi) / self.unit
        return np.minimum(np.maximum(over, 0.0).max(axis=1), EXCEED_CAP)
