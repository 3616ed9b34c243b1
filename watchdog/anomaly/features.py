"""Window features for the anomaly model: pure functions over a node's tick grid.

Input is a :class:`Grid`: one row per tick (``step`` s apart), one column per GPU, one
``(T, G)`` float array per catalogue metric (NaN = not read). Output is ``(T, G, F)``: the
features of the window of ``window`` s that *ends* at each tick (the windows step with
the tick, as the rules' windows do). A row whose window is not yet full, or where
neither utilization nor power was read, is NaN.

Features (:data:`FEATURES`, order fixed by :data:`FEATURE_SCHEMA`; units in brackets):

* ``util_mean``, ``util_std`` [%]: level and variability of utilization;
* ``power_frac`` [fraction]: mean power over the GPU's own ceiling (its enforced
  power limit, or the highest power it has drawn so far when the limit is unknown);
  ``power_slope`` [fraction/min];
* ``sm_active``, ``tensor_active`` [%]: GPM activity where the GPU reports it;
* ``temp_mean`` [C], ``temp_slope`` [C/min]: with ``power_slope`` this is temperature
  "against power": a climb with flat power is what a failing fan looks like;
* ``sm_clock_frac``, ``sm_clock_std`` [fraction of max SM clock];
* ``mem_clock_frac`` [fraction of max memory clock];
* ``mem_ratio`` [fraction of total], ``mem_slope`` [fraction/min];
* ``frac_idle``, ``frac_locked``, ``frac_power_cap``, ``frac_sync_boost``,
  ``frac_thermal``, ``frac_hw_slowdown`` [fraction of the window]: clock-event reasons;
* ``peer_util``, ``peer_power``, ``peer_temp``, ``peer_sm_clock``, ``peer_mem_clock``,
  ``peer_sm_active``, ``peer_util_std``, ``peer_temp_slope``: the GPU's value minus the
  median of the node's GPUs at the same tick (0 on a one-GPU node). The peers are the
  strongest baseline a node has: a training job moves every GPU together, a fault
  moves one.
* ``peer_temp_drift`` [C]: ``peer_temp`` now minus ``peer_temp`` :data:`LOOKBACK_S` ago:
  a GPU warming against its peers at the same power (a failing fan) climbs here in
  minutes, while a GPU that always runs hotter (its place in the airflow) does not.
  NaN where the GPU's mean power moved by more than :data:`DRIFT_POWER` of its limit
  over the look-back: each GPU has its own thermal line, so a node-wide
  step of power moves ``peer_temp`` of a GPU whose line is flatter than its peers'
  (nanoGPT's GPU 1 reads +7.7 C over its peers at 99 % of its limit, +15.5 C at 56 %:
  "+6 C in 10 min" after the job's lighter phase began, every GPU healthy);
* ``peer_util_drops`` [per min]: drops of utilization by more than :data:`DROP_POINTS`
  (25) points from one tick to the next, minus the peers' median (node-wide dips
  cancel; a GPU whose work comes in bursts does not; a GPU alone: its own rate). A
  quarter of the GPU's work: shallower dips are the sampler catching kernel boundaries
  (up to 7 a minute more than its peers on a healthy simulated A100), and 176 of the
  209 drops of more than 10 points in the three real nanoGPT logs are of more than 25.
* ``own_temp`` [C]: the GPU's temperature against its OWN training baseline at this
  power, beyond its peers' (see :mod:`watchdog.anomaly.baseline`). It needs the model's
  per-GPU lines, so :func:`compute` leaves it NaN and the model fills it
  (``Model.complete``) before scoring.
* ``sm_clock_unexplained`` [fraction of max SM clock]: the mean over the window of the SM
  clock's shortfall from its maximum at the ticks where the GPU reports no clock-event
  reason at all (mask 0), 0 at ticks where some reason (idle, power cap, sync boost,
  thermal, HW slowdown, locked clocks…) explains a lower clock. A GPU that runs below its
  clock with nothing to say why is the "slow GPU without reason bits"; its peers under a
  power cap spread their clocks too widely for ``peer_sm_clock`` to tell (-4 to +9 points
  on a simulated A100 node), while a healthy GPU without reasons runs at its maximum.
  NaN where the reasons are not read.
* ``mem_util`` [%] (``utilization.memory``), ``own_power`` [fraction of the limit]: a GPU
  alone's power against the most it drew at the same activity (utilization, memory,
  ``mem_util``, GPM) in its work, set by the gate where it fell that far
  (:func:`~watchdog.anomaly.alone.slowed`), NaN here.

Slopes are the difference between the means of the last and the first third of the
window over the time between their centres: robust to a single odd reading and cheap
with cumulative sums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from watchdog import reasons as R
from watchdog.untyped import Array, JsonDoc

if TYPE_CHECKING:
    import pandas as pd

FEATURE_SCHEMA = 7  # bump when a feature's meaning, unit or order changes
WINDOW_S = 60.0
LOOKBACK_S = 600.0  # history of peer_temp_drift
DRIFT_POWER = 0.05  # of the power limit: peer_temp_drift only at the power of LOOKBACK_S ago
DROP_POINTS = 25.0  # a utilization drop peer_util_drops counts [points of %]
FEATURES: tuple[str, ...] = (
    "util_mean", "util_std", "power_frac", "power_slope", "sm_active", "tensor_active",
    "temp_mean", "temp_slope", "sm_clock_frac", "sm_clock_std", "mem_clock_frac",
    "mem_ratio", "mem_slope", "frac_idle", "frac_locked", "frac_power_cap",
    "frac_sync_boost", "frac_thermal", "frac_hw_slowdown", "peer_util", "peer_power",
    "peer_temp", "peer_sm_clock", "peer_mem_clock", "peer_sm_active", "peer_util_std",
    "peer_temp_slope", "peer_temp_drift", "peer_util_drops", "own_temp",
    "sm_clock_unexplained", "mem_util", "own_power")
INDEX = {name: i for i, name in enumerate(FEATURES)}
METRICS = ("utilization.gpu", "power.draw", "enforced.power.limit", "gpm.sm_activity",
           "gpm.tensor_activity", "temperature.gpu", "clocks.sm", "clocks.mem",
           "memory.used", "memory.total", "clocks_event_reasons.active",
           "utilization.memory")
LAGGED = ("temperature.gpu", "power.draw")  # all that the drift's lagged half reads
REASON_BITS = {"frac_idle": R.GPU_IDLE, "frac_locked": R.APPLICATIONS_CLOCKS,
               "frac_power_cap": R.SW_POWER_CAP, "frac_sync_boost": R.SYNC_BOOST,
               "frac_thermal": R.THERMAL, "frac_hw_slowdown": R.HARDWARE}
PEERS = {"peer_util": "util_mean", "peer_power": "power_frac", "peer_temp": "temp_mean",
         "peer_sm_clock": "sm_clock_frac", "peer_mem_clock": "mem_clock_frac",
         "peer_sm_active": "sm_active", "peer_util_std": "util_std",
         "peer_temp_slope": "temp_slope"}


@dataclass
class Grid:
    """A node's telemetry on a regular tick grid.

    ``t``: tick times (s, epoch), ``step`` s apart; ``uuids``/``index``: the GPUs
    (columns); ``data``: metric -> ``(T, G)`` array (NaN = not read); ``ceil``: per-GPU
    references (``power``: W, ``sm``/``mem``: MHz) as ``(T, G)`` arrays, or None to use
    the running maximum of the data (see :func:`ceilings`)."""

    t: Array
    step: float
    uuids: list[str]
    index: list[int]
    data: dict[str, Array]
    ceil: dict[str, Array] | None = None
    extra: JsonDoc = field(default_factory=dict)

    def col(self, name: str) -> Array:
        """The ``(T, G)`` array of ``name``, all NaN when the metric was never read."""
        got = self.data.get(name)
        if got is None:
            return np.full((len(self.t), len(self.uuids)), np.nan)
        return got


def history_ticks(step: float) -> int:
    """Ticks a live caller must keep: a window plus the look-back of the drift."""
    return window_ticks(step) + max(1, round(LOOKBACK_S / step)) + 1


def window_ticks(step: float, window: float = WINDOW_S) -> int:
    """Ticks per window: at least 3 (so a slope has a first and a last third)."""
    return max(3, round(window / step))


def _ffill(x: Array, limit: int) -> Array:
    """Forward-fill NaN along time for at most ``limit`` ticks (a missed reading)."""
    if len(x) == 0:
        return x.copy()
    valid = ~np.isnan(x)
    rows = np.arange(len(x)).reshape(-1, *([1] * (x.ndim - 1)))
    last = np.maximum.accumulate(np.where(valid, rows, -1), axis=0)
    ok = (last >= 0) & (rows - last <= limit)
    src = np.take_along_axis(x, np.maximum(last, 0), axis=0)
    return np.where(valid, x, np.where(ok, src, np.nan))


def rolling_mean(x: Array, w: int, min_frac: float = 0.5) -> Array:
    """NaN-aware mean over the last ``w`` rows ending at each row; NaN when fewer than
    ``min_frac`` of them were read or the window is not yet full."""
    valid = ~np.isnan(x)
    xs = np.where(valid, x, 0.0)
    pad = np.zeros((1, *x.shape[1:]))
    cs = np.concatenate([pad, np.cumsum(xs, axis=0)])
    cn = np.concatenate([pad, np.cumsum(valid, axis=0)])
    out = np.full(x.shape, np.nan)
    if len(x) < w:
        return out
    s = cs[w:] - cs[:-w]
    n = cn[w:] - cn[:-w]
    with np.errstate(invalid="ignore", divide="ignore"):
        m = s / n
    m[n < max(1.0, min_frac * w)] = np.nan
    out[w - 1:] = m
    return out


def rolling_std(x: Array, w: int) -> Array:
    """Population standard deviation over the last ``w`` rows (NaN-aware)."""
    m = rolling_mean(x, w)
    m2 = rolling_mean(x * x, w)
    return np.sqrt(np.maximum(m2 - m * m, 0.0))


def rolling_slope(x: Array, w: int, step: float) -> Array:
    """Change per minute over the window: (mean of its last third - mean of its first
    third) / the time between the thirds' centres."""
    k = max(1, w // 3)
    last = rolling_mean(x, k)
    first = np.full(x.shape, np.nan)
    if len(x) > w - k:
        first[w - k:] = last[: len(x) - (w - k)]
    return (last - first) / ((w - k) * step / 60.0)


def ceilings(grid: Grid) -> dict[str, Array]:
    """Per-GPU references: the power limit (enforced, else the highest power so far),
    the highest SM and memory clock so far (a running maximum: causal, as live)."""
    if grid.ceil is not None:
        return grid.ceil

    def runmax(x: Array) -> Array:
        return np.fmax.accumulate(np.where(np.isnan(x), -np.inf, x), axis=0)

    limit = _ffill(grid.col("enforced.power.limit"), 10 ** 9)
    power = np.where(np.isnan(limit), runmax(grid.col("power.draw")), limit)
    return {"power": power, "sm": runmax(grid.col("clocks.sm")),
            "mem": runmax(grid.col("clocks.mem"))}


def _ratio(a: Array, b: Array) -> Array:
    with np.errstate(invalid="ignore", divide="ignore"):
        out = a / b
    out[~np.isfinite(out)] = np.nan
    return out


def hold_ticks(step: float) -> int:
    """Ticks a missed reading is held for (5 s): see :func:`_ffill`."""
    return max(1, round(5.0 / step))


def lag_ticks(step: float) -> int:
    """Ticks between ``peer_temp`` now and the one ``peer_temp_drift`` subtracts."""
    return max(1, round(LOOKBACK_S / step))


def tail_ticks(step: float, window: float = WINDOW_S) -> int:
    """Rows :func:`compute` reads for the features of one window: the window, the held
    readings before it and the tick before it (``peer_util_drops`` compares each tick
    with the previous one)."""
    return window_ticks(step, window) + hold_ticks(step) + 1


def compute(grid: Grid, window: float = WINDOW_S, *, mask_dead: bool = True) -> Array:
    """``(T, G, F)`` features of the window ending at every tick (see module docs).

    ``mask_dead=False`` keeps the features of a GPU that was not read (neither
    utilization nor power) instead of NaN; :func:`last_window` needs them for the drift."""
    w = window_ticks(grid.step, window)
    gap = hold_ticks(grid.step)  # a reading missed for up to 5 s is held
    col = {m: _ffill(grid.col(m), gap) for m in METRICS}
    ref = ceilings(grid)
    T, G = len(grid.t), len(grid.uuids)
    out = np.full((T, G, len(FEATURES)), np.nan)

    def put(name: str, value: Array) -> None:
        out[:, :, INDEX[name]] = value

    util = col["utilization.gpu"]
    pfrac = _ratio(col["power.draw"], ref["power"])
    smf = _ratio(col["clocks.sm"], ref["sm"])
    put("util_mean", rolling_mean(util, w))
    put("util_std", rolling_std(util, w))
    put("power_frac", rolling_mean(pfrac, w))
    put("power_slope", rolling_slope(pfrac, w, grid.step))
    put("sm_active", rolling_mean(col["gpm.sm_activity"], w))
    put("tensor_active", rolling_mean(col["gpm.tensor_activity"], w))
    put("mem_util", rolling_mean(col["utilization.memory"], w))
    put("temp_mean", rolling_mean(col["temperature.gpu"], w))
    put("temp_slope", rolling_slope(col["temperature.gpu"], w, grid.step))
    put("sm_clock_frac", rolling_mean(smf, w))
    put("sm_clock_std", rolling_std(smf, w))
    mask = col["clocks_event_reasons.active"]
    have = ~np.isnan(mask)
    bits = np.where(have, mask, 0).astype(np.int64)
    put("mem_clock_frac", rolling_mean(_ratio(col["clocks.mem"], ref["mem"]), w))
    mem = _ratio(col["memory.used"], col["memory.total"])
    put("mem_ratio", rolling_mean(mem, w))
    put("mem_slope", rolling_slope(mem, w, grid.step))
    for name, bit in REASON_BITS.items():
        put(name, rolling_mean(np.where(have, (bits & bit) != 0, np.nan), w))
    with np.errstate(invalid="ignore"):
        short = np.where(bits == 0, np.maximum(1.0 - smf, 0.0), 0.0)
    put("sm_clock_unexplained", rolling_mean(np.where(have & ~np.isnan(smf), short, np.nan), w))
    for name, base in PEERS.items():
        x = out[:, :, INDEX[base]]
        if G < 2:
            put(name, np.where(np.isnan(x), np.nan, 0.0))
            continue
        put(name, x - row_median(x))
    lag = lag_ticks(grid.step)
    pt = out[:, :, INDEX["peer_temp"]]
    drift = np.full(pt.shape, np.nan)
    drift[lag:] = pt[lag:] - pt[:-lag]
    watts = rolling_mean(col["power.draw"], w)
    with np.errstate(invalid="ignore"):
        moved = np.abs(watts[lag:] - watts[:-lag]) > DRIFT_POWER * ref["power"][lag:]
    drift[lag:][moved] = np.nan
    put("peer_temp_drift", drift)
    prev = np.vstack([util[:1], util[:-1]])
    drops = np.where(np.isnan(util) | np.isnan(prev), np.nan, (prev - util) > DROP_POINTS)
    rate = rolling_mean(drops, w) * (60.0 / grid.step)
    if G < 2:  # no peers at work, whose rate is 0: its own (a 1-GPU node's bursts)
        put("peer_util_drops", rate)
    else:
        put("peer_util_drops", rate - row_median(rate))
    if mask_dead:
        _mask_dead(out)
    return out


def row_median(x: Array) -> Array:
    """``np.nanmedian(x, axis=1, keepdims=True)`` of a ``(T, G)`` array, value for value
    (the mean of the two middle values when the count is even; NaN where a row has no
    value), without numpy's masked-array path for small axes, which cost the live hook
    70 % of its features (9 calls a window, ~0.5 ms each on 8 GPUs)."""
    s = np.sort(x, axis=1)  # NaN sorts last
    n = x.shape[1] - np.isnan(x).sum(axis=1)
    rows = np.arange(len(x))
    lo = s[rows, np.maximum(n - 1, 0) // 2]
    hi = s[rows, n // 2 - (n == 0)]
    with np.errstate(invalid="ignore"):
        med = (lo + hi) / 2.0
    return np.where(n > 0, med, np.nan)[:, None]


def _mask_dead(out: Array) -> None:
    """NaN every feature of a window where neither utilization nor power was read."""
    dead = np.isnan(out[..., INDEX["util_mean"]]) & np.isnan(out[..., INDEX["power_frac"]])
    out[dead] = np.nan


def tail_spans(n: int, step: float, window: float = WINDOW_S
               ) -> tuple[tuple[int, int], tuple[int, int] | None]:
    """Of a grid of ``n`` ticks, the row spans ``(lo, hi)`` :func:`last_window` needs: the
    last window's (:func:`tail_ticks`) and the one ending :func:`lag_ticks` earlier, or
    None when the grid is not that long."""
    pad, lag = tail_ticks(step, window), lag_ticks(step)
    lagged = (max(0, n - lag - pad), n - lag) if n - 1 - lag >= 0 else None
    return (max(0, n - pad), n), lagged


def rows(grid: Grid, lo: int, hi: int, ref: dict[str, Array] | None = None) -> Grid:
    """Rows ``lo:hi`` of ``grid``, ceilings included (``ref``: :func:`ceilings` of the
    whole grid, computed here when not given, so a running maximum keeps what came
    before ``lo``)."""
    ref = ceilings(grid) if ref is None else ref
    return Grid(grid.t[lo:hi], grid.step, grid.uuids, grid.index,
                {m: a[lo:hi] for m, a in grid.data.items()},
                {k: a[lo:hi] for k, a in ref.items()})


def last_window(recent: Grid, lagged: Grid | None, window: float = WINDOW_S) -> Array:
    """``(G, F)``: the features of the window ending at ``recent``'s last tick, equal to
    ``compute(grid)[-1]`` at a fraction of the cost (the daemon evaluates one window every
    few seconds, not a whole history).

    ``recent``: at least the last :func:`tail_ticks` rows of the grid; ``lagged``: the
    rows ending :func:`lag_ticks` earlier (as many), or None when the grid is not that
    long (``peer_temp_drift`` is then NaN, as in :func:`compute`)."""
    now = compute(recent, window, mask_dead=False)[-1]
    k = INDEX["peer_temp_drift"]
    if lagged is None or len(lagged.t) == 0:
        now[:, k] = np.nan
    else:
        now[:, k] = now[:, INDEX["peer_temp"]] - peer_temp_last(lagged, window)
        watts = [_last_mean(g, "power.draw", window) for g in (recent, lagged)]
        with np.errstate(invalid="ignore"):
            moved = np.abs(watts[0] - watts[1]) > DRIFT_POWER * ceilings(recent)["power"][-1]
        now[moved, k] = np.nan
    _mask_dead(now)
    return now


def peer_temp_last(grid: Grid, window: float = WINDOW_S) -> Array:
    """``(G,)``: ``peer_temp`` of the window ending at ``grid``'s last tick, from the
    temperature alone, with :func:`compute`'s operations on the same rows (so the same
    values, bit for bit, as ``compute(grid, window, mask_dead=False)[-1]``): the drift's
    lagged half needs nothing else, and the other 30 features cost the hook 0.1 ms."""
    temp = _last_mean(grid, "temperature.gpu", window)[None]
    if temp.shape[1] < 2:
        return np.where(np.isnan(temp), np.nan, 0.0)[0]
    return (temp - row_median(temp))[0]


def _last_mean(grid: Grid, metric: str, window: float) -> Array:
    """``(G,)``: ``metric``'s mean over the window ending at ``grid``'s last tick, held
    readings filled as :func:`compute` fills them (the same values, bit for bit)."""
    held = _ffill(grid.col(metric), hold_ticks(grid.step))
    return rolling_mean(held, window_ticks(grid.step, window))[-1]


def compute_last(grid: Grid, window: float = WINDOW_S) -> Array:
    """``compute(grid, window)[-1]`` through :func:`last_window` (two short slices)."""
    ref = ceilings(grid)
    now, before = tail_spans(len(grid.t), grid.step, window)
    return last_window(rows(grid, *now, ref),
                       rows(grid, *before, ref) if before is not None else None, window)


class _quiet:
    """Silence numpy's "All-NaN slice" warning (a tick where no GPU was read)."""

    def __enter__(self) -> None:
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: object) -> None:
        self._w.__exit__(None, None, None)  # warnings' filters restored; nothing suppressed


def valid_rows(feats: Array) -> Array:
    """``(T, G)`` bool: the windows the model judges and learns from: a GPU at work
    (:func:`busy`). An idle or starting GPU's trouble (a stall, a hang) is the rules'
    to name; judging only working GPUs keeps start-up, pauses and idle servers, the
    commonest look-alikes, out of the model's way."""
    return busy(feats)


def busy(feats: Array) -> Array:
    """``(T, G)`` bool: windows where the GPU works (util >= 50 %, or power >= 40 % of
    its ceiling when utilization is not read)."""
    u = feats[:, :, INDEX["util_mean"]]
    p = feats[:, :, INDEX["power_frac"]]
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(u), p >= 0.4, u >= 50.0)


def grid_from_frame(frame: pd.DataFrame, step: float | None = None) -> Grid:
    """A recording's frame (``ts``, ``uuid``, ``index`` and metric columns) on a grid of
    ``step`` s (default: 1 s, or the log's median interval when that is longer). Several
    readings in one tick: the last one counts."""
    ts = frame["ts"].to_numpy(dtype=np.float64)
    if len(ts) == 0:
        return Grid(np.zeros(0), step or 1.0, [], [], {})
    uu = frame["uuid"].astype(str).to_numpy()
    uuids = list(dict.fromkeys(uu.tolist()))
    col_of = {u: i for i, u in enumerate(uuids)}
    g = np.fromiter((col_of[u] for u in uu), dtype=np.int64, count=len(uu))
    if step is None:
        per_gpu = np.diff(np.sort(ts[g == 0]))
        med = float(np.median(per_gpu[per_gpu > 0])) if (per_gpu > 0).any() else 1.0
        step = max(1.0, round(med))
    t0 = float(ts.min())
    k = np.floor((ts - t0) / step + 1e-9).astype(np.int64)
    T = int(k.max()) + 1
    idx_first = {u: int(frame["index"].iloc[i]) for i, u in
                 ((int(np.argmax(uu == u)), u) for u in uuids)} if "index" in frame else {}
    data: dict[str, Array] = {}
    lost = frame["lost"].to_numpy(dtype=bool) if "lost" in frame else np.zeros(len(ts), bool)
    for m in METRICS:
        if m not in frame:
            continue
        arr = np.full((T, len(uuids)), np.nan)
        v = frame[m].to_numpy(dtype=np.float64)
        v = np.where(lost, np.nan, v)
        arr[k, g] = v
        data[m] = arr
    t = t0 + step * np.arange(T)
    return Grid(t, float(step), uuids, [idx_first.get(u, i) for i, u in enumerate(uuids)],
                data)
