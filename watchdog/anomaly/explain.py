"""Explanations: the few features furthest from normal, in words a person can act on.

Method: **per-feature deviation from the training distribution**: first how far a
feature lies outside the range seen in training (the part of the score that pages),
then a robust z-score ``|x - median| / (IQR / 1.349)`` with a floor per feature (so a
feature that never moved in training is not "infinitely" far off for a rounding step). Why not a
depth-based attribution (DIFFI): DIFFI ranks the features the trees *split on* to
isolate the point, which says which feature mattered to the forest but gives no normal
value to show; an operator needs "81 C where 66 C is normal", which the deviation gives
directly, in the feature's own unit, deterministically and at no cost per tree. The
forest decides *whether*; the deviation says *what*.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from watchdog.anomaly import features as F
from watchdog.untyped import Array, JsonDoc

if TYPE_CHECKING:
    from watchdog.anomaly.model import Model

TOP = 3

# feature -> (what, unit, scale to display, format)
WORDS: dict[str, tuple[str, str, float, str]] = {
    "util_mean": ("utilization", "%", 1.0, ".0f"),
    "util_std": ("utilization swings (std)", "%", 1.0, ".0f"),
    "power_frac": ("power", "% of its limit", 100.0, ".0f"),
    "power_slope": ("power trend", "% of limit/min", 100.0, "+.1f"),
    "sm_active": ("SM activity", "%", 1.0, ".0f"),
    "tensor_active": ("tensor activity", "%", 1.0, ".0f"),
    "temp_mean": ("temperature", " C", 1.0, ".0f"),
    "temp_slope": ("temperature trend", " C/min", 1.0, "+.1f"),
    "sm_clock_frac": ("SM clock", "% of max", 100.0, ".0f"),
    "sm_clock_std": ("SM clock swings (std)", "% of max", 100.0, ".1f"),
    "mem_clock_frac": ("memory clock", "% of max", 100.0, ".0f"),
    "mem_ratio": ("memory used", "%", 100.0, ".0f"),
    "mem_slope": ("memory trend", "% of total/min", 100.0, "+.1f"),
    "frac_idle": ("time flagged idle", "%", 100.0, ".0f"),
    "frac_locked": ("time with locked clocks", "%", 100.0, ".0f"),
    "frac_power_cap": ("time at the power cap", "%", 100.0, ".0f"),
    "frac_sync_boost": ("time in sync boost", "%", 100.0, ".0f"),
    "frac_thermal": ("time thermally throttled", "%", 100.0, ".0f"),
    "frac_hw_slowdown": ("time in HW slowdown", "%", 100.0, ".0f"),
    "peer_util": ("utilization against its peers", " points", 1.0, "+.0f"),
    "peer_power": ("power against its peers", " points of limit", 100.0, "+.0f"),
    "peer_temp": ("temperature against its peers", " C", 1.0, "+.1f"),
    "peer_sm_clock": ("SM clock against its peers", " points of max", 100.0, "+.1f"),
    "peer_mem_clock": ("memory clock against its peers", " points of max", 100.0, "+.1f"),
    "peer_sm_active": ("SM activity against its peers", " points", 1.0, "+.0f"),
    "peer_util_std": ("utilization swings against its peers", " points", 1.0, "+.0f"),
    "peer_temp_slope": ("temperature trend against its peers", " C/min", 1.0, "+.1f"),
    "peer_temp_drift": ("temperature against its peers, change over 10 min", " C", 1.0,
                        "+.1f"),
    "peer_util_drops": ("utilization drops against its peers", "/min", 1.0, "+.1f"),
    "own_temp": ("temperature above its own normal at this power (beyond its peers')",
                 " C", 1.0, "+.1f"),
    "sm_clock_unexplained": ("SM clock below its maximum with no throttle reason",
                             " points of max", 100.0, ".1f"),
    "mem_util": ("memory bandwidth utilization", "%", 1.0, ".0f"),
    "own_power": ("power against what it drew at the same activity in this job",
                  " points of limit", 100.0, "+.0f"),
}
HINTS = {"temp": "check the fan, airflow or coolant of this GPU",
         "power": "power does not match the work: check the board and its power delivery",
         "sm_clock": "the GPU runs slower with no throttle reason: reset it or drain it",
         "mem_clock": "the memory runs slower: check HBM health (ECC, remapping) and reset",
         "util": "the GPU's work comes in bursts: check its host, data loader and link"}


def deviations(model: Model, x: Array) -> Array:
    """Robust z of each feature of rows ``x`` (N, F) against the training data."""
    x = np.where(np.isnan(x), model.center, x)
    return (x - model.center) / model.scale


def _fmt(name: str, value: float) -> str:
    _what, unit, k, spec = WORDS[name]
    return f"{format(value * k, spec)}{unit}"


def exceedance(model: Model, row: Array) -> Array:
    """Per feature: how far outside its training range, in the model's units (0 inside)."""
    if model.lo is None or model.hi is None or model.unit is None:
        return np.zeros(len(row))
    x = np.where(np.isnan(row), model.center, row)
    return np.maximum(np.maximum(model.lo - x, x - model.hi), 0.0) / model.unit


def top_features(model: Model, row: Array, n: int = TOP) -> list[JsonDoc]:
    """The ``n`` features furthest from normal: name, observed, normal (both in the
    feature's unit), z, and ``outside`` (units beyond the training range).

    Order: features outside everything seen in training first, by how far (the part of
    the score that pages), then the rest by robust z. A fault's cause leaves the range
    furthest; its consequences (a GPU drawing less power also cools) follow."""
    z = deviations(model, row[None, :])[0]
    out = exceedance(model, row)
    order = np.lexsort((-np.abs(z), -np.round(out, 1)))
    # a GPU drawing less power than its peers for the same work also sits above its own
    # thermal line at that power: the power (the cause) is named just before own_temp
    # (its consequence; a line fitted on still windows only made own_temp lead on 2 of
    # 6 power faults)
    k, p = F.INDEX["own_temp"], F.INDEX["peer_power"]
    rank = list(order)
    lo = model.lo  # set wherever exceedance is non-zero
    if (out[k] > 0 and out[p] > 0 and lo is not None and row[p] < lo[p]
            and rank.index(k) < rank.index(p)):
        rank.remove(p)
        rank.insert(rank.index(k), p)
    order = np.array(rank[:n])
    return [{"feature": F.FEATURES[i], "observed": float(row[i]),
             "normal": float(model.center[i]), "z": round(float(z[i]), 1),
             "outside": round(float(out[i]), 1)} for i in order]


def as_read(model: Model, top: list[JsonDoc], row: Array, raw: Array
            ) -> list[JsonDoc]:
    """``top`` (ranked on ``row``, the window as the model judged it) with each level the
    gate moved by a re-learned job's offset shown as the GPU reads it (``raw``), against
    that job's normal (the training's normal plus the offset), marked ``job``.

    Why: after a workload change the model judges a GPU less its new job's offsets, and
    a page said "power 23% of its limit (normal 41%)" for a GPU reading 64 %: true of the
    judged window, and no use to a person looking at ``nvidia-smi``. Peer features are
    shown as judged (the gate takes them among the job's GPUs)."""
    out = []
    for item in top:
        i = F.INDEX[item["feature"]]
        off = raw[i] - row[i]
        if item["feature"].startswith("peer_") or np.isnan(off) or abs(off) < 1e-9:
            out.append(item)
            continue
        out.append({**item, "observed": float(raw[i]),
                    "normal": float(model.center[i] + off), "job": True})
    return out


def observed_vs_normal(item: JsonDoc) -> str:
    """``+5.2 C (normal +0.0 C)``: one top feature as a plain string, for the incident's
    flat evidence (the alerting code shows flat values, not the ``features`` list)."""
    name = item["feature"]
    return f"{_fmt(name, item['observed'])} ({_normal(item)} {_fmt(name, item['normal'])})"


def _normal(item: JsonDoc) -> str:
    return "this job's normal" if item.get("job") else "normal"


def _hint(name: str) -> str:
    for key, text in HINTS.items():
        if key in name:
            return text
    return "compare it with its peers and its own history"


def sentence(gpu: int, row: Array, top: list[JsonDoc],
             peers: Array | None = None) -> str:
    """One line: ``GPU 5: temperature trend +2.0 C/min (normal +0.0) at 62% of its
    power limit; its peers sit at 66 C at the same power; check the fan...``."""
    parts = []
    for item in top:
        name = item["feature"]
        parts.append(f"{WORDS[name][0]} {_fmt(name, item['observed'])} "
                     f"({_normal(item)} {_fmt(name, item['normal'])})")
    first = top[0]["feature"] if top else ""
    ctx = []
    temp, pf = row[F.INDEX["temp_mean"]], row[F.INDEX["power_frac"]]
    if "temp" in first and not np.isnan(temp):
        ctx.append(f"at {temp:.0f} C" + (f" and {pf * 100:.0f}% of its power limit"
                                         if not np.isnan(pf) else ""))
        if peers is not None and len(peers):
            with F._quiet():  # peers lagging a power step read their temperature as NaN
                pt = np.nanmedian(peers[:, F.INDEX["temp_mean"]])
                pp = np.nanmedian(peers[:, F.INDEX["power_frac"]])
            if not np.isnan(pt):
                ctx.append(f"its peers sit at {pt:.0f} C at {pp * 100:.0f}% power")
    text = f"GPU {gpu}: " + "; ".join(parts)
    if ctx:
        text += "; " + ", ".join(ctx)
    return f"{text}: {_hint(first)}"
