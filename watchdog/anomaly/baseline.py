"""Each GPU's own thermal baseline: the ``own_temp`` feature.

Why: the peer features compare a GPU with the node's median, which hides a slow warm-up
on a GPU that always runs hotter (its place in the airflow): the node's hot GPU sits
14 C above its peers and that offset moves by several C at every power phase change, so
a failing fan that adds 4-8 C before the throttle stays inside its normal swings. The
model knows more than the peers do: from the training windows it knows each GPU's own
temperature at a given power.

The baseline, per GPU UUID, is a least-squares line ``temp_mean = a + b * power_frac``
(C against the fraction of the GPU's power ceiling: a GPU's steady temperature is
linear in its power) fitted on the busy training windows. The feature is the GPU's
residual from its own line, less its share of the node's common thermal lag (C): after a
power change every GPU's temperature lags with the same time constant, so each GPU's
residual is its slope times one lag common to the node (see :func:`residual`); that
cancels, while a GPU whose cooling fails climbs away from its own line alone. A GPU the
model has no baseline for (another node, a replaced GPU) reads NaN: scored as normal,
and judged by the other features only.

Stored in the model file as the UUIDs (JSON) and a ``(U, 2)`` float array ``(a, b)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from watchdog.anomaly import features as F

MIN_ROWS = 30  # busy windows a GPU needs for a line
MIN_SPREAD = 0.05  # power_frac range below which the slope is not fitted (flat power)
MIN_SLOPE = 1.0  # C per unit of power_frac: a flatter line cannot say how far power lags


def fit(feats: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """``(G, 2)`` lines ``(a, b)`` from ``(T, G, F)`` features, rows where ``ok``
    (``(T, G)`` bool: busy training windows); NaN for a GPU with too few rows."""
    temp = feats[:, :, F.INDEX["temp_mean"]]
    power = feats[:, :, F.INDEX["power_frac"]]
    out = np.full((feats.shape[1], 2), np.nan)
    for g in range(feats.shape[1]):
        sel = ok[:, g] & ~np.isnan(temp[:, g]) & ~np.isnan(power[:, g])
        if sel.sum() < MIN_ROWS:
            continue
        y, x = temp[sel, g], power[sel, g]
        if np.ptp(x) < MIN_SPREAD:
            out[g] = (float(np.median(y)), 0.0)
            continue
        b, a = np.polyfit(x, y, 1)
        out[g] = (float(a), float(b))
    return out


def lines_for(uuids: Sequence[str], known: Sequence[str], coef: np.ndarray) -> np.ndarray:
    """``(G, 2)`` lines of ``uuids`` in the order given (NaN for one not in ``known``)."""
    row = {u: i for i, u in enumerate(known)}
    out = np.full((len(uuids), 2), np.nan)
    for g, u in enumerate(uuids):
        if u in row:
            out[g] = coef[row[u]]
    return out


def residual(feats: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """``own_temp`` (C) of ``(..., G, F)`` features given ``(G, 2)`` lines.

    Each GPU's distance from its own line is ``r = temp - (a + b * power)``. After a
    power change every GPU's temperature lags by the same time constant, so ``r`` is
    ``b * d`` with ``d`` (in power units) common to the node: the lag is removed by
    subtracting ``b`` times the median of ``r / b`` over the busy GPUs with a slope.
    What is left is the GPU's own departure from its line (with one GPU known or no
    slopes, ``r`` itself)."""
    temp = feats[..., F.INDEX["temp_mean"]]
    power = feats[..., F.INDEX["power_frac"]]
    b = lines[:, 1]
    r = temp - (lines[:, 0] + b * power)
    if r.shape[-1] < 2:
        return r
    busy = F.busy(feats.reshape(-1, *feats.shape[-2:])).reshape(r.shape)
    sloped = np.abs(np.nan_to_num(b)) >= MIN_SLOPE
    with np.errstate(all="ignore"):
        each = np.where(busy & sloped, r / np.where(sloped, b, 1.0), np.nan)
    lag = F.row_median(each.reshape(-1, each.shape[-1])).reshape(*each.shape[:-1], 1)
    lag = np.where(np.isnan(lag), 0.0, lag)
    return r - np.where(sloped, b, 0.0) * lag


def complete(feats: np.ndarray, uuids: Sequence[str], known: Sequence[str],
             coef: np.ndarray | None) -> np.ndarray:
    """A copy of ``(..., G, F)`` features with ``own_temp`` filled (NaN without lines)."""
    out = np.array(feats, dtype=np.float64, copy=True)
    i = F.INDEX["own_temp"]
    if coef is None or len(known) == 0 or out.shape[-2] == 0:
        out[..., i] = np.nan
        return out
    out[..., i] = residual(out, lines_for(uuids, known, coef))
    return out
