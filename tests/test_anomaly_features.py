"""Feature functions against values computed by hand on tiny grids."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from watchdog import reasons as R
from watchdog.anomaly import features as F


def grid(**cols: list[list[float]]) -> F.Grid:
    """A grid of T ticks x G GPUs, 1 s apart, from metric=rows (T lists of G values)."""
    data = {("clocks_event_reasons.active" if k == "reasons" else k.replace("_", ".")):
            np.array(v, dtype=float) for k, v in cols.items()}
    t, g = next(iter(data.values())).shape
    return F.Grid(np.arange(t, dtype=float), 1.0, [f"u{i}" for i in range(g)],
                  list(range(g)), data)


def col(feats: np.ndarray, name: str) -> np.ndarray:
    return feats[:, :, F.INDEX[name]]


def test_levels_variability_and_window_not_full_yet() -> None:
    util = [[100, 50], [100, 50], [40, 50], [100, 50], [100, 50], [100, 50]]
    f = F.compute(grid(utilization_gpu=util), window=3.0)
    assert np.isnan(col(f, "util_mean")[:2]).all()  # the window (3 ticks) is not full
    # ticks 2..4 of GPU 0: 40, 100, 100 -> mean 80, population std sqrt(800)
    assert col(f, "util_mean")[4, 0] == pytest.approx(80.0)
    assert col(f, "util_std")[4, 0] == pytest.approx(np.sqrt(((40 - 80) ** 2 + 2 * 20 ** 2) / 3))
    assert col(f, "util_mean")[5, 0] == pytest.approx(100.0)
    # peers: GPU 0 minus the median of (GPU 0, GPU 1) at the same tick
    assert col(f, "peer_util")[4, 0] == pytest.approx(80.0 - (80.0 + 50.0) / 2)


def test_power_against_its_own_limit_and_clock_against_its_running_max() -> None:
    power = [[350.0]] * 6
    limit = [[700.0]] * 6
    sm = [[1980.0], [1980.0], [990.0], [990.0], [990.0], [990.0]]
    f = F.compute(grid(power_draw=power, enforced_power_limit=limit, clocks_sm=sm), 3.0)
    assert col(f, "power_frac")[5, 0] == pytest.approx(0.5)
    assert col(f, "sm_clock_frac")[5, 0] == pytest.approx(0.5)  # 990 of the 1980 seen
    assert col(f, "peer_power")[5, 0] == 0.0  # one GPU: no peers, no deviation


def test_temperature_slope_in_c_per_minute() -> None:
    temp = [[50.0 + 0.5 * i] for i in range(9)]  # +0.5 C per 1 s tick = 30 C/min
    f = F.compute(grid(temperature_gpu=temp, power_draw=[[300.0]] * 9), window=9.0)
    assert col(f, "temp_slope")[8, 0] == pytest.approx(30.0)
    assert col(f, "power_slope")[8, 0] == pytest.approx(0.0)


def test_clock_event_reason_fractions() -> None:
    m = [[R.SW_POWER_CAP], [R.SW_POWER_CAP | R.SYNC_BOOST], [0], [R.HW_SLOWDOWN]]
    f = F.compute(grid(reasons=m, utilization_gpu=[[100]] * 4), 4.0)
    assert col(f, "frac_power_cap")[3, 0] == pytest.approx(0.5)
    assert col(f, "frac_sync_boost")[3, 0] == pytest.approx(0.25)
    assert col(f, "frac_hw_slowdown")[3, 0] == pytest.approx(0.25)
    assert col(f, "frac_thermal")[3, 0] == 0.0


def test_sm_clock_below_max_counts_only_where_no_reason_explains_it() -> None:
    """GPU 0: 1980 MHz max, then 1782 (90 %) with no reason bit: 10 points short at
    those ticks. GPU 1: the same clocks under a power cap (and idle at the start): a
    reason explains them, 0. GPU 2: reasons not read: NaN (unknown, scored as normal)."""
    sm = [[1980.0, 1980.0, 1980.0]] + [[1782.0, 1782.0, 1782.0]] * 3
    reasons = [[0, R.GPU_IDLE, np.nan]] + [[0, R.SW_POWER_CAP, np.nan]] * 3
    f = F.compute(grid(clocks_sm=sm, reasons=reasons, utilization_gpu=[[100] * 3] * 4), 4.0)
    got = col(f, "sm_clock_unexplained")[3]
    assert got[0] == pytest.approx(0.1 * 3 / 4)  # 3 of the window's 4 ticks 10 % short
    assert got[1] == 0.0
    assert np.isnan(got[2])
    f = F.compute(grid(clocks_sm=sm, reasons=reasons, utilization_gpu=[[100] * 3] * 4), 3.0)
    assert col(f, "sm_clock_unexplained")[3, 0] == pytest.approx(0.1)


def test_a_missed_reading_is_held_and_a_gpu_never_read_is_not_scored() -> None:
    util = [[100, np.nan], [np.nan, np.nan], [100, np.nan], [100, np.nan]]
    f = F.compute(grid(utilization_gpu=util), window=3.0)
    assert col(f, "util_mean")[3, 0] == pytest.approx(100.0)
    assert not F.valid_rows(f)[:, 1].any()


def test_frame_to_grid_resamples_fast_logs_onto_one_second_ticks() -> None:
    frame = pd.DataFrame({"ts": [0.0, 0.3, 0.6, 1.0, 1.4], "uuid": ["a"] * 5,
                          "index": [0] * 5, "utilization.gpu": [1.0, 2.0, 3.0, 4.0, 5.0]})
    g = F.grid_from_frame(frame)
    assert g.step == 1.0
    assert g.col("utilization.gpu")[:, 0].tolist() == [3.0, 5.0]  # the last reading wins


def _random_grid(rng: np.random.Generator, T: int, G: int, with_ceil: bool) -> F.Grid:
    """A noisy node: holes of every length, a GPU that goes unread for a while (its
    temperature still read), reason bits, and per-row ceilings or none."""
    data = {m: rng.normal(60.0, 15.0, (T, G)) for m in F.METRICS}
    data["clocks_event_reasons.active"] = rng.choice([0.0, 4.0, 16.0, 32.0], (T, G))
    data["memory.total"] = np.full((T, G), 81559.0)
    for a in data.values():
        a[rng.random((T, G)) < 0.08] = np.nan  # single misses, held by the 5 s fill
    # GPU 0's utilization and power unread for 45 ticks (its temperature still read):
    # dead windows, placed to end where the drift looks back to when the grid is long
    lag = F.lag_ticks(1.0)
    hole = T - lag - 45 if lag + 45 < T else int(rng.integers(0, max(1, T - 20)))
    for m in ("utilization.gpu", "power.draw"):
        data[m][hole:hole + 45, 0] = np.nan
    ceil = None
    if with_ceil:
        ceil = {k: np.maximum.accumulate(np.abs(rng.normal(500.0, 50.0, (T, G))), axis=0)
                for k in ("power", "sm", "mem")}
    return F.Grid(1_700_000_000.0 + np.arange(T, dtype=float), 1.0,
                  [f"u{i}" for i in range(G)], list(range(G)), data, ceil)


@pytest.mark.parametrize("T", [3, 59, 60, 61, 66, 600, 661, 667, 668, 900])
@pytest.mark.parametrize("with_ceil", [True, False])
@pytest.mark.parametrize("G", [1, 5])
def test_last_window_equals_the_last_row_of_compute(T: int, with_ceil: bool, G: int) -> None:
    """The daemon's short path (two slices: the window and the one LOOKBACK_S earlier,
    of which only the temperature is read) gives exactly the last row of the
    whole-history computation, drift, holds, dead windows and running-maximum ceilings
    included; on one GPU as on several."""
    rng = np.random.default_rng(T * 2 + with_ceil + 10 * G)
    g = _random_grid(rng, T, G, with_ceil)
    want = F.compute(g)[-1]
    got = F.compute_last(g)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)
    if F.lag_ticks(1.0) + F.window_ticks(1.0) < T:
        assert not np.isnan(got[:, F.INDEX["peer_temp_drift"]]).all()


def test_live_window_stacks_only_what_it_needs_and_matches_the_whole_history() -> None:
    from watchdog.anomaly.stage import ROW_AT, AnomalyStage
    from watchdog.records import Sample

    rng = np.random.default_rng(7)
    live = AnomalyStage(None, "node", 1.0)
    checked = 0
    for k in range(F.history_ticks(1.0) + 40):
        samples = []
        for i in range(4):
            values: dict[str, float | None] = {
                m: float(v) for m, v in zip(F.METRICS, rng.normal(60.0, 15.0, len(F.METRICS)),
                                        strict=True)}
            values["clocks_event_reasons.active"] = float(rng.choice([0, 4, 32]))
            if rng.random() < 0.1:
                values["utilization.gpu"] = None
            if rng.random() < 0.02:  # a lost GPU: nothing read, whatever values it holds
                samples.append(Sample(1_700_000_000.0 + k, f"u{i}", i, values, lost=True))
                continue
            samples.append(Sample(1_700_000_000.0 + k, f"u{i}", i, values))
        live.add_samples(1_700_000_000.0 + k, samples)
        row = live.rows[-1][1]
        for s in samples:  # a lost GPU's row is unread; a None reading is NaN
            for m in F.METRICS:
                want = np.nan if s.lost or s.values[m] is None else s.values[m]
                np.testing.assert_equal(row[ROW_AT[m], s.index], want)
        if k % 97 == 0 or k > F.history_ticks(1.0) + 30:
            got = live.window()
            if got is None:
                assert len(live.rows) < live.w
                continue
            whole = F.compute(live._grid(0, len(live.rows)))[-1]
            np.testing.assert_allclose(got, whole, rtol=1e-9, atol=1e-9, equal_nan=True)
            checked += 1
    assert checked > 10


def test_util_drops_count_only_deep_drops_against_the_peers_median() -> None:
    """A drop counts when utilization falls by more than DROP_POINTS (25) from one tick to
    the next: 26 points counts, exactly 25 does not, so a GPU's shallow jitter is not a
    burst. The rate is per minute over the window, minus the peers' median."""
    assert F.DROP_POINTS == 25.0
    util = [[100, 100, 100],
            [74, 100, 100],   # GPU 0 drops 26: counted
            [100, 75, 100],   # GPU 1 drops 25: not counted
            [100, 100, 40],   # GPU 2 drops 60: counted
            [70, 100, 100],   # GPU 0 drops 30: counted
            [100, 100, 100]]
    f = F.compute(grid(utilization_gpu=util), window=6.0)
    # window of 6 ticks; tick 0 compares with itself (no drop)
    rate = np.array([2, 0, 1]) / 6 * 60.0  # drops per minute
    assert col(f, "peer_util_drops")[5] == pytest.approx(rate - np.median(rate))


def test_row_median_is_numpys_nanmedian_value_for_value() -> None:
    """The peers' median (every ``peer_*`` feature) equals ``np.nanmedian`` bit for bit:
    odd and even counts, NaN holes, rows with no value, one GPU, 256 GPUs."""
    rng = np.random.default_rng(5)
    for g in (1, 2, 3, 7, 8, 9, 64, 256):
        x = rng.normal(50.0, 30.0, (400, g))
        x[rng.random(x.shape) < 0.2] = np.nan
        x[:5] = np.nan  # rows where no GPU was read
        x[5:10, : max(1, g // 2)] = 7.25  # ties
        with np.errstate(all="ignore"), F._quiet():
            want = np.nanmedian(x, axis=1, keepdims=True)
        got = F.row_median(x)
        assert got.shape == want.shape
        assert np.array_equal(got, want, equal_nan=True), g


def test_the_drift_is_read_only_at_the_power_of_its_look_back() -> None:
    """``peer_temp_drift`` compares a GPU with its peers at the same power. After a
    node-wide step of power, a healthy GPU whose thermal line is flatter than its peers'
    moves against them (nanoGPT's GPU 1: +7.7 C over its peers at 99 % of its limit,
    +15.5 C at 56 %), so there the drift is not read (NaN); at one power a GPU warming
    against its peers (a fan) reads its climb, before and after the step."""
    T, G, step_at = 1500, 5, 800
    t = np.arange(T, dtype=float)
    power = np.where(t < step_at, 690.0, 390.0)[:, None].repeat(G, axis=1)
    temp = 30.0 + 0.05 * power
    temp[:, 1] = 50.0 + 0.02 * power[:, 1]  # flatter: +10.7 C over its peers, then +16.7
    fan = np.clip(t - 100.0, 0.0, None) / 60.0 * 0.5  # GPU 2: +0.5 C/min from tick 100
    temp[:, 2] += fan
    g = grid(power_draw=power.tolist(), enforced_power_limit=[[700.0] * G] * T,
             temperature_gpu=temp.tolist(), utilization_gpu=[[100.0] * G] * T)
    drift = col(F.compute(g), "peer_temp_drift")
    before, across, after = 750, step_at + 500, T - 1  # look-back 600 ticks
    assert np.isnan(drift[across]).all()  # 690 W then, 390 W now: every GPU moved
    assert drift[before, 2] == pytest.approx(5.0, abs=0.3)  # the fan, 600 s at 0.5 C/min
    assert drift[after, 2] == pytest.approx(5.0, abs=0.3)
    assert abs(drift[after, 1]) < 0.5  # at 390 W then and now: GPU 1 holds its place
    for n in (before + 1, across + 1, after + 1):  # the live path says the same
        np.testing.assert_allclose(F.compute_last(F.rows(g, 0, n)), F.compute(g)[n - 1],
                                   rtol=1e-9, atol=1e-9, equal_nan=True)
