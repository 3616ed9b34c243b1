"""The healthy simulated node: inventory, determinism, interval independence, plausibility
and the realistic behaviour a detector must not alarm on."""

from __future__ import annotations

import itertools
import re
import statistics

import pytest

from watchdog import catalogue
from watchdog import reasons as R
from watchdog.sources.sim import MODELS, SCENARIOS, SimSource
from watchdog.sources.sim.models import H100_SXM

START = 1_750_000_000.0
UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def trace(spec="sim", *, gpus=4, model="h100-sxm", seed=0, duration=600.0, interval=1.0):
    src = SimSource.from_spec(spec, gpus=gpus, model=model, seed=seed, start=START)
    return src, list(src.run(duration, interval))


def as_tuple(s):
    return (s.ts, s.uuid, s.index, s.lost, tuple(sorted(s.values.items())), s.processes,
            s.xids)


# --- inventory ---------------------------------------------------------------------------


def test_inventory_has_real_h100_and_a100_numbers_and_well_formed_uuids():
    h = SimSource.from_spec("sim", gpus=8, start=START).devices()
    a = SimSource.from_spec("sim", gpus=2, model="a100-pcie", start=START).devices()
    assert all(UUID.match(d.uuid) for d in h + a)
    assert len({d.uuid for d in h}) == 8
    assert [d.pci_bus_id for d in h][:2] == ["00000000:18:00.0", "00000000:2A:00.0"]
    d = h[0]
    assert (d.name, d.power_limit_enforced_w, d.power_limit_min_w, d.clocks_max_sm_mhz,
            d.clocks_max_mem_mhz, d.memory_total_mib, d.pcie_max_gen, d.pcie_max_width,
            d.gpm_supported) == ("NVIDIA H100 80GB HBM3", 700.0, 200.0, 1980.0, 2619.0,
                                 81559.0, 5, 16, True)
    assert 87 <= d.temp_slowdown_c <= 90 and d.temp_shutdown_c > d.temp_slowdown_c
    d = a[0]
    assert (d.power_limit_enforced_w, d.clocks_max_sm_mhz, d.memory_total_mib,
            d.pcie_max_gen, d.gpm_supported) == (250.0, 1410.0, 40960.0, 4, False)


def test_uuids_depend_on_seed_and_index_only():
    a = [d.uuid for d in SimSource.from_spec("sim", seed=1, start=0.0).devices()]
    b = [d.uuid for d in SimSource.from_spec("sim:stall", seed=1, start=9.0).devices()]
    c = [d.uuid for d in SimSource.from_spec("sim", seed=2, start=0.0).devices()]
    assert a == b and set(a).isdisjoint(c)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_catalogue_metric_is_reported_and_missing_ones_are_none(model):
    _src, ticks = trace(model=model, duration=5.0)
    s = ticks[-1][1][0]
    assert set(s.values) == set(catalogue.SOURCE_NAMES)
    gpm = [s.values[k] for k in catalogue.NAMES if k.startswith("gpm.")]
    if MODELS[model].gpm:
        assert all(isinstance(v, float) for v in gpm)
    else:
        assert gpm == [None] * 4
    assert s.values["fan.speed"] is None and s.values["power.draw"] > 0


# --- determinism -------------------------------------------------------------------------


def test_same_seed_same_trace_and_another_seed_differs():
    _, a = trace("sim:comm_hang", seed=7, duration=400.0, interval=2.0)
    _, b = trace("sim:comm_hang", seed=7, duration=400.0, interval=2.0)
    _, c = trace("sim:comm_hang", seed=8, duration=400.0, interval=2.0)
    flat = [[as_tuple(s) for s in ss] for _, ss in a]
    assert flat == [[as_tuple(s) for s in ss] for _, ss in b]
    assert flat != [[as_tuple(s) for s in ss] for _, ss in c]


@pytest.mark.parametrize(("spec", "fine_s", "coarse_s", "duration"), [
    ("sim", 0.5, 5.0, 400.0),
    ("sim:thermal_throttle@200", 0.5, 5.0, 400.0),
    ("sim:pcie_degraded@100", 1.0, 5.0, 400.0),
    ("sim:thermal_throttle@30", 0.1, 1.0, 90.0),
])
def test_state_at_t_does_not_depend_on_the_sampling_interval(spec, fine_s, coarse_s, duration):
    _, fine = trace(spec, duration=duration, interval=fine_s)
    _, coarse = trace(spec, duration=duration, interval=coarse_s)
    by_ts = {ts: ss for ts, ss in fine}
    assert len(coarse) == round(duration / coarse_s)
    for ts, ss in coarse:
        # XID delivery is per sample (events since the last one); everything else matches
        assert [as_tuple(s)[:6] for s in ss] == [as_tuple(s)[:6] for s in by_ts[ts]], ts


def test_a_fresh_source_sampled_sparsely_matches_a_dense_run():
    _, dense = trace("sim:thermal_throttle@100", duration=300.0, interval=1.0)
    sparse = SimSource.from_spec("sim:thermal_throttle@100", gpus=4, start=START)
    for t in (17.5, 123.25, 299.0):
        got = sparse.sample(START + t)
        if t == int(t):
            want = dict(dense)[START + t]
            assert [as_tuple(s) for s in got] == [as_tuple(s) for s in want]
    assert int(got[3].values["clocks_event_reasons.active"]) & R.THERMAL


def test_time_going_backwards_is_refused():
    src = SimSource.from_spec("sim", start=START)
    src.sample(START + 10)
    with pytest.raises(ValueError, match="before the previous sample"):
        src.sample(START + 9)


# --- plausibility --------------------------------------------------------------------------

COUNTERS = ("energy.total", "violation.power", "violation.thermal", "violation.sync_boost",
            "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
            "pcie.replay_counter", "nvlink.errors.crc_flit", "nvlink.errors.replay")


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_model_and_scenario_stays_physically_plausible(model, scenario):
    m = MODELS[model]
    if scenario == "nvlink_errors" and not m.nvlink:
        pytest.skip(f"{model} has no NVLink")
    _src, ticks = trace(f"sim:{scenario}", model=model, duration=900.0, interval=3.0)
    last: dict[tuple[int, str], float] = {}
    for _, ss in ticks:
        for s in ss:
            if s.lost:
                assert s.values == {} and s.processes is None
                continue
            v = s.values
            assert 0.95 * m.idle_w <= v["power.draw"] <= m.power_limit_w
            assert 0 <= v["utilization.gpu"] <= 100 and 0 <= v["utilization.memory"] <= 100
            assert m.idle_sm_mhz <= v["clocks.sm"] <= m.max_sm_mhz
            assert 0 <= v["memory.used"] <= v["memory.total"] == m.memory_total_mib
            assert 20 <= v["temperature.gpu"] < m.temp_shutdown_c
            assert v["pcie.link.width.current"] <= m.pcie_max_width
            for p in s.processes:
                assert p.used_memory_mib <= v["memory.used"] and p.job_id
            for k in COUNTERS:
                if v[k] is None:  # e.g. NVLink on a PCIe board: missing, never 0
                    assert k.startswith("nvlink.") and not m.nvlink
                    continue
                assert v[k] >= last.get((s.index, k), 0.0), (k, s.ts)
                last[(s.index, k)] = v[k]


def test_temperature_follows_power_with_a_time_constant():
    _, ticks = trace(duration=1800.0, interval=1.0, gpus=2)
    temps = [ss[0].values["temperature.gpu"] for _, ss in ticks]
    power = [ss[0].values["power.draw"] for _, ss in ticks]
    # no jumps: a 60 s time constant moves at most a few degrees per second
    assert max(abs(b - a) for a, b in itertools.pairwise(temps)) <= 3
    hi = [t for t, p in zip(temps[300:], power[300:], strict=True) if p > 600]
    lo = [t for t, p in zip(temps[300:], power[300:], strict=True) if 300 < p < 450]
    assert hi and lo and statistics.mean(hi) > statistics.mean(lo) + 5


# --- the healthy job -------------------------------------------------------------------------


def test_startup_shows_idle_util_at_raised_power_with_memory_climbing():
    src, ticks = trace(duration=58.0, interval=1.0)
    assert src.job.startup_s >= 60
    for _, ss in ticks:
        for s in ss:
            assert s.values["utilization.gpu"] <= 1
            assert 105 <= s.values["power.draw"] <= 155
    mem = [ticks[i][1][0].values["memory.used"] for i in (5, 30, 57)]
    assert mem[0] < mem[1] < mem[2]


def test_training_has_two_busy_power_levels_with_normal_limiter_bits():
    _, ticks = trace(duration=3600.0, interval=2.0, gpus=2)
    busy = [s.values for _, ss in ticks[100:] for s in ss if s.values["utilization.gpu"] == 100]
    low = [v for v in busy if 360 <= v["power.draw"] <= 430]
    high = [v for v in busy if 660 <= v["power.draw"] <= 700]
    assert len(low) > 0.1 * len(busy) and len(high) > 0.1 * len(busy)
    capped = [v for v in high if int(v["clocks_event_reasons.active"]) & R.SW_POWER_CAP]
    assert len(capped) > 0.5 * len(high)
    synced = [v for v in busy if int(v["clocks_event_reasons.active"]) & R.SYNC_BOOST]
    assert len(synced) > 0.2 * len(busy)
    assert all(not int(v["clocks_event_reasons.active"]) & ~R.BENIGN for _, ss in ticks
               for v in (s.values for s in ss))
    for _, ss in ticks:  # GPU idle exactly when nothing runs
        for s in ss:
            idle_bit = bool(int(s.values["clocks_event_reasons.active"]) & R.GPU_IDLE)
            assert idle_bit == (s.values["utilization.gpu"] == 0)


def test_node_wide_micro_dips_recur_every_20_to_22_seconds():
    src, ticks = trace(duration=400.0, interval=0.5, gpus=4)
    dips = [ts - START for ts, ss in ticks if ts - START > src.job.startup_s
            and all(80 <= s.values["utilization.gpu"] <= 93 for s in ss)]
    starts = [t for i, t in enumerate(dips) if i == 0 or t - dips[i - 1] > 5]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) >= 8 and all(19.5 <= g <= 22.5 for g in gaps)


VARIANTS = {"checkpoint_rank0_writes", "checkpoint_remote_writer", "checkpoint_all_pause"}


def _seed_with_every_checkpoint_variant() -> SimSource:
    for seed in range(200):
        src = SimSource.from_spec("sim", gpus=4, seed=seed, start=START)
        if {v for _, _, v in src.legit_waits(3600.0)} == VARIANTS:
            return src
    raise AssertionError("no seed below 200 shows every checkpoint variant in an hour")


def test_checkpoints_look_like_hangs_or_stalls_for_30_to_120_seconds():
    src = _seed_with_every_checkpoint_variant()
    waits = src.legit_waits(3600.0)
    assert all(30 <= b - a <= 120 for a, b, _ in waits)
    assert 600 <= waits[0][0] - START - src.job.startup_s <= 1200
    for a, b, variant in waits:
        t = a + 1.0
        while t < b - 1.0:
            ss = src.sample(t)
            assert min(s.values["memory.used"] / s.values["memory.total"] for s in ss) > 0.85
            if variant == "checkpoint_all_pause":
                assert all(s.values["utilization.gpu"] == 0 for s in ss)
            else:
                spinning = ss[1:] if variant == "checkpoint_rank0_writes" else ss
                if variant == "checkpoint_rank0_writes":
                    assert ss[0].values["utilization.gpu"] <= 3
                for s in spinning:  # the trap: pinned util at near-idle power, clocks up
                    v = s.values
                    assert v["utilization.gpu"] == 100 and v["power.draw"] < 0.2 * 700
                    assert v["clocks.sm"] == 1980 and v["clocks_event_reasons.active"] == 0
                    assert v["gpm.sm_activity"] < 5
            t += 5.0


def test_allocator_holds_most_memory_and_one_gpu_runs_hotter():
    src, ticks = trace(duration=1200.0, interval=5.0, gpus=8)
    late = ticks[40:]
    for _, ss in late:
        for s in ss:
            if s.values["utilization.gpu"] == 100:
                assert 0.87 <= s.values["memory.used"] / s.values["memory.total"] <= 0.94
    mean_t = [statistics.mean(ss[g].values["temperature.gpu"] for _, ss in late)
              for g in range(8)]
    hot = src.job.hot_gpu
    assert all(mean_t[hot] >= t + 8 for g, t in enumerate(mean_t) if g != hot)


def test_one_python_process_per_gpu_with_the_slurm_job_id():
    src, ticks = trace(duration=200.0, interval=50.0)
    for _, ss in ticks:
        pids = set()
        for s in ss:
            (p,) = s.processes
            assert p.name == "python" and p.job_id == src.job.slurm_job_id
            pids.add(p.pid)
        assert len(pids) == len(ss)


def test_bulk_generation_covers_the_requested_span():
    src, ticks = trace(duration=120.0, interval=0.25, gpus=2)
    assert len(ticks) == 480 and ticks[0][0] == START and ticks[-1][0] == START + 119.75
    more = list(src.run(10.0, 0.25))
    assert more[0][0] == START + 120.0


def test_h100_levels_match_the_real_log():
    assert (H100_SXM.busy_low_w, H100_SXM.busy_high_w) == (390.0, 690.0)
    assert 70 <= H100_SXM.idle_w <= 85 and 110 <= H100_SXM.startup_w <= 150
