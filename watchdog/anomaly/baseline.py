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

Stored in the model file as the UUIDs (JSON) and a ``(U, 6)`` float array ``(a, b,
p_lo, p_hi, n_lo, n_hi)``: the line, the powers it was fitted over, and the node's mean
power (every GPU's, idle ones included) while it was: the heat of its neighbours, which
warms a GPU too (a file with ``(U, 2)`` or ``(U, 4)``, from before the spans were kept,
still loads: its lines hold at every power).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from watchdog.anomaly import features as F
from watchdog.untyped import Array

MIN_ROWS = 30  # busy windows a GPU needs for a line
MIN_SPREAD = 0.05  # power_frac range below which the slope is not fitted (flat power)
# C per unit of power_frac: a flatter line cannot say how far power lags; a line falling
# with power (fitted on a narrow span through the lag) is no physics either
MIN_SLOPE = 1.0
SETTLING_C_PER_MIN = 0.5  # a GPU this far from its line, moving back to it this fast, lags
SPAN_MARGIN = 0.05  # of the power ceiling: how far beyond its fitted powers a sloped line holds
# A GPU alone (a 1-GPU node) beyond where its line holds is still read up to one span
# further, less this much (C) per span of distance: a steep line's slope errs by about a
# degree over its own span (noise at its two ends), so its error grows with the distance
# over the span. Alone, nothing else tells a GPU drawing a third less power at the same
# temperature (its power fault) from a lighter phase of a new job.
REACH_C_PER_SPAN = 3.0
# A line holds while the node's mean power (of every GPU's limit, idle ones included) lies
# within this of what it was over the line's fit: the GPUs around it heat the air it
# draws. A real A100 fitted while 3 of its 7 neighbours idled read +4.8 C above its line
# at the same power once they worked too (real-wandb vvr2tpmc: the node's mean from about
# 0.55 to 0.8 of the limit)
NODE_MARGIN = 0.1


def fit(feats: Array, ok: Array) -> Array:
    """``(G, 6)`` lines ``(a, b, p_lo, p_hi, n_lo, n_hi)`` from ``(T, G, F)`` features,
    rows where ``ok`` (``(T, G)`` bool: busy training windows); NaN for a GPU with too few
    rows. ``p_lo..p_hi`` (fraction of the power ceiling): the powers the line was fitted
    over, where it holds (:data:`SPAN_MARGIN` beyond them: a line is not extrapolated);
    ``n_lo..n_hi``: the node's mean power over those rows (:func:`node_power`)."""
    temp = feats[:, :, F.INDEX["temp_mean"]]
    power = feats[:, :, F.INDEX["power_frac"]]
    node = node_power(feats)
    out = np.full((feats.shape[1], 6), np.nan)
    flat: dict[int, tuple[float, float]] = {}  # GPU -> (median power, median temp)
    for g in range(feats.shape[1]):
        sel = ok[:, g] & ~np.isnan(temp[:, g]) & ~np.isnan(power[:, g])
        if sel.sum() < MIN_ROWS:
            continue
        y, x = temp[sel, g], power[sel, g]
        nodes = (float(np.nanmin(node[sel])), float(np.nanmax(node[sel])))
        if np.ptp(x) < MIN_SPREAD:
            out[g] = (float(np.median(y)), 0.0, float(x.min()), float(x.max()), *nodes)
            flat[g] = (float(np.median(x)), float(np.median(y)))
            continue
        b, a = np.polyfit(x, y, 1)
        # again on the steady windows only: not settling towards that line (after a
        # power change), and not moving at SETTLING_C_PER_MIN or faster either way (a GPU
        # warming from below after a checkpoint, above a first line that the warm-ups
        # had pulled down, passed as steady: the a100 1-GPU node of seed 13 read +4.6 C
        # inside its own span, 82 false anomalies in a week)
        slope = feats[sel, g, F.INDEX["temp_slope"]]
        steady = ~_settling(y - (a + b * x), slope) & (np.abs(slope) < SETTLING_C_PER_MIN)
        span = x
        if steady.sum() >= MIN_ROWS:
            span, b0 = x[steady], b
            if np.ptp(span) >= MIN_SPREAD:
                b, a = np.polyfit(span, y[steady], 1)
            else:
                a, b = float(np.median(y[steady])), 0.0
            if b < MIN_SLOPE:  # no credible slope in the steady windows alone
                mid = (float(np.median(span)), float(np.median(y[steady])))
                flat[g] = mid
                if b0 >= MIN_SLOPE:  # the slope over every window, through their point
                    a, b = mid[1] - b0 * mid[0], b0
        out[g] = (float(a), float(b), float(span.min()), float(span.max()), *nodes)
    return _borrow(out, flat)


def _borrow(lines: Array, flat: dict[int, tuple[float, float]]) -> Array:
    """``lines`` with each one in ``flat`` (its steady windows gave no slope of
    MIN_SLOPE or more: too narrow a span of power; meanwhile flat, or on the slope over
    every window) turned about its median point to the median slope of the node's other
    sloped lines.

    Why: the GPUs of one node follow power with about the same slope (their heat sinks
    are alike); a flat line reads a GPU at the top of its own narrow span (0.44-0.49 of
    the limit, ~69 C per unit) +1.6 C above it: ``own_temp`` +1.0 C paged on the job
    stream (a100 2-GPU seed 9). With no sloped peer (a 1-GPU node) it stays
    flat, and holds only over its own span (:func:`residual`)."""
    own = np.array([g not in flat for g in range(len(lines))], bool)
    sloped = lines[own & _rising(lines), 1]
    if not flat or not len(sloped):
        return lines
    b = float(np.median(sloped))
    out = lines.copy()
    for g, (x, y) in flat.items():
        out[g, 0], out[g, 1] = y - b * x, b
    return out


def lagging(feats: Array, lines: Array) -> Array:
    """``(G,)`` bool of ``(G, F)`` features: the GPUs whose temperature is settling back
    towards their own line after a power change (:func:`_settling`), the line taken at
    any power (only its side matters here: after a step beyond the fitted span the GPU
    is still far below or above it). NaN lines, and lines not rising with power: False."""
    # only a line rising with power says which side of it a lag lies on (a flat or
    # falling one was fitted on too narrow a span)
    return _settling(_off_line(feats, lines), feats[:, F.INDEX["temp_slope"]]) & _rising(lines)


def _off_line(feats: Array, lines: Array) -> Array:
    """``temp - (a + b * power)`` (C) of ``(..., G, F)`` features against ``(G, >=2)``
    lines: how far each GPU sits from its own line."""
    return feats[..., F.INDEX["temp_mean"]] - (
        lines[:, 0] + lines[:, 1] * feats[..., F.INDEX["power_frac"]])


def _rising(lines: Array) -> Array:
    """``(G,)``: lines rising with power by MIN_SLOPE or more (NaN lines: False)."""
    return np.nan_to_num(lines[:, 1]) >= MIN_SLOPE


def _settling(r: Array, slope: Array) -> Array:
    """Where a GPU ``r`` C from its line (``(...)``) is moving back towards it at
    :data:`SETTLING_C_PER_MIN` or faster (``slope``, C/min): thermal lag after a power
    change, not a departure. A fault moves a GPU away from its line (a drift: above it
    and rising), never towards it."""
    with np.errstate(invalid="ignore"):
        return (r * slope < 0) & (np.abs(slope) >= SETTLING_C_PER_MIN)


def node_power(feats: Array) -> Array:
    """``(...)``: the node's mean ``power_frac`` over its GPUs of ``(..., G, F)`` features
    (the GPUs that read one, idle ones included): the heat the node makes."""
    with np.errstate(all="ignore"), F._quiet():
        return np.nanmean(feats[..., F.INDEX["power_frac"]], axis=-1)


def lines_for(uuids: Sequence[str], known: Sequence[str], coef: Array) -> Array:
    """``(G, 6)`` lines of ``uuids`` in the order given (NaN for one not in ``known``; a
    model file of ``(U, 2)`` or ``(U, 4)`` lines, before the spans were kept, holds at
    every power of the GPU and of the node)."""
    row = {u: i for i, u in enumerate(known)}
    if coef.shape[1] < 6:
        pad = np.tile([-np.inf, np.inf], (len(coef), (6 - coef.shape[1]) // 2))
        coef = np.column_stack([coef, pad])
    out = np.full((len(uuids), 6), np.nan)
    for g, u in enumerate(uuids):
        if u in row:
            out[g] = coef[row[u]]
    return out


def residual(feats: Array, lines: Array) -> Array:
    """``own_temp`` (C) of ``(..., G, F)`` features given ``(G, 6)`` lines (or 2 or 4 columns).

    Each GPU's distance from its own line is ``r = temp - (a + b * power)``. After a
    power change every GPU's temperature lags by the same time constant, so ``r`` is
    ``b * d`` with ``d`` (in power units) common to the node: the lag is removed by
    subtracting ``b`` times the median of ``r / b`` over the busy GPUs with a slope.
    What is left is the GPU's own departure from its line (with one GPU known or no
    slopes, ``r`` itself). NaN (scored as normal) where the GPU is settling back towards
    its line (:func:`_settling`): on a 1-GPU node nothing else tells a lag from a fault;
    0 below its line (:func:`_above`)."""
    power = feats[..., F.INDEX["power_frac"]]
    b = lines[:, 1]
    r = _off_line(feats, lines)
    if lines.shape[1] >= 6 and r.shape[-1] >= 2:  # nor beyond the node's heat it held at
        node = node_power(feats)[..., None]
        with np.errstate(invalid="ignore"):
            r = np.where((node < lines[:, 4] - NODE_MARGIN) | (node > lines[:, 5] + NODE_MARGIN),
                         np.nan, r)
    if lines.shape[1] >= 4:  # no line beyond the powers it was fitted over
        # a flat line (slope under MIN_SLOPE, or falling: fitted on a narrow span, it says
        # nothing of how temperature follows power) holds only over its own span, no
        # margin: at ~35 C per unit of power a GPU reads +1-2 C above a flat line
        # 0.03-0.05 beyond it (most false own_temp pages of the job stream)
        margin = np.where(_rising(lines), SPAN_MARGIN, 0.0)
        with np.errstate(invalid="ignore"):
            r = np.where((power < lines[:, 2] - margin) | (power > lines[:, 3] + margin),
                         np.nan, r)
            # a steep line fitted on a narrow span errs fast beyond it (+1.2 C at 0.05
            # past a 0.30-0.41 span): the GPU's own reading holds only a
            # quarter of its span beyond it; its lag still counts in the node's median
            narrow = np.minimum(margin, (lines[:, 3] - lines[:, 2]) / 4)
            beyond = (power < lines[:, 2] - narrow) | (power > lines[:, 3] + narrow)
    else:
        beyond = np.zeros(r.shape, bool)
    settling = _settling(r, feats[..., F.INDEX["temp_slope"]])
    if r.shape[-1] < 2:
        if lines.shape[1] >= 4:
            r = np.where(beyond, _reach(feats, lines), r)
            settling = _settling(r, feats[..., F.INDEX["temp_slope"]])
        return _above(np.where(settling, np.nan, r))
    busy = F.busy(feats.reshape(-1, *feats.shape[-2:])).reshape(r.shape)
    # only a line rising with power says how far power lags: one falling with it (-3.8 C
    # per unit on the job stream) turned the node's lag around and put a settling peer
    # +5 C off its line
    sloped = _rising(lines)
    with np.errstate(all="ignore"):
        each = np.where(busy & sloped, r / np.where(sloped, b, 1.0), np.nan)
    lag = F.row_median(each.reshape(-1, each.shape[-1])).reshape(*each.shape[:-1], 1)
    lag = np.where(np.isnan(lag), 0.0, lag)
    own = r - np.where(sloped, b, 0.0) * lag
    # the node's lag explains part of a GPU's warmth, never adds to it: no GPU reads
    # warmer than it sits above its own line. While a node warms up its GPUs lie below
    # their lines each by its own lag, not by one common to the node in proportion to
    # their slopes (a line fitted on a narrow span of power, 0.76-0.93 of the limit in a
    # real FSDP job, has a slope of 2 to 14 C per unit): the lag read GPUs 1 C below their
    # lines as +8 C (real-wandb xrmz2ch8, 6 min into the job), which widened the fit's
    # range of own_temp to 11 C and hid a drift of +4.8 C in 10 min
    with np.errstate(invalid="ignore"):
        own = np.minimum(own, np.maximum(r, 0.0))
    # the node's lag read mostly off lines taken beyond their own narrow span is their
    # common error, not a lag (a node at 0.44 of the limit after a fit at 0.30-0.41:
    # every line reads 1.8 C high there, and the one GPU still inside its span read
    # +1.3 C): then no GPU of the node is read against its line
    counted = ~np.isnan(each)
    with np.errstate(invalid="ignore"):
        shaky = 2 * (counted & beyond).sum(axis=-1, keepdims=True) > counted.sum(
            axis=-1, keepdims=True)
    # a GPU settling back towards its line while its peers do not (one GPU's power
    # changed: a job on part of the node) is no departure either
    return _above(np.where((settling & (own * r > 0)) | beyond | shaky, np.nan, own))


def _reach(feats: Array, lines: Array) -> Array:
    """``(..., G)``: the distance (C) above each GPU's own line of ``(..., G, F)``
    features at a power beyond the line's fitted span, less :data:`REACH_C_PER_SPAN` per
    span of distance; NaN more than one span beyond, or for a line not rising with power
    (a flat line says nothing of how temperature follows power). Concave in power (fans
    speed up as a GPU warms), a GPU's temperature lies under its line's extension on both
    sides, so what errs here is the fitted slope, by about the same on every span.

    Read for a GPU alone only: with peers, the node's common lag is read off the lines
    too, and a line beyond its span puts its error into every GPU's reading."""
    power = feats[..., F.INDEX["power_frac"]]
    lo, hi = lines[:, 2], lines[:, 3]
    span = np.maximum(hi - lo, 0.01)
    with np.errstate(invalid="ignore"):
        d = np.maximum(np.maximum(lo - power, power - hi), 0.0)
        out = _off_line(feats, lines) - REACH_C_PER_SPAN * d / span
        return np.where((d > span) | ~_rising(lines), np.nan, out)


def _above(own: Array) -> Array:
    """Only a GPU warmer than its own line departs (a fan, a cold plate, its airflow): one
    cooler than it is no fault to act on, and reads 0 (NaN stays NaN). A line fitted on
    a short span extrapolates badly to a power it never saw (the real 8x H100 log's 400 W
    phase after a fit on its 690 W phase read -15 C)."""
    return np.where(own < 0.0, 0.0, own)


def complete(feats: Array, uuids: Sequence[str], known: Sequence[str],
             coef: Array | None) -> Array:
    """A copy of ``(..., G, F)`` features with ``own_temp`` filled (NaN without lines)."""
    out = np.array(feats, dtype=np.float64, copy=True)
    i = F.INDEX["own_temp"]
    if coef is None or len(known) == 0 or out.shape[-2] == 0:
        out[..., i] = np.nan
        return out
    out[..., i] = residual(out, lines_for(uuids, known, coef))
    return out
