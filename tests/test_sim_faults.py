"""Each injected fault is visible in the samples at/after its onset, absent before it and
on the other GPUs, and the ground truth says where and when it is."""

from __future__ import annotations

import itertools
import statistics

import pytest

from watchdog import reasons as R
from watchdog.errors import InputError
from watchdog.incident import KINDS
from watchdog.sources.sim import MODELS, SimSource

START = 1_750_000_000.0
ONSET = 300


def bits(s) -> int:
    return int(s.values["clocks_event_reasons.active"])


def hang(s, m) -> bool:
    v = s.values
    return (not s.lost and v["utilization.gpu"] == 100 and v["power.draw"] < 0.25 * m.power_limit_w
            and v["clocks.sm"] >= 0.95 * m.max_sm_mhz and bits(s) == 0
            and (v["gpm.sm_activity"] is None or v["gpm.sm_activity"] < 5)
            and v["memory.used"] > 0.8 * v["memory.total"] and bool(s.processes))


def stall(s, m) -> bool:
    v = s.values
    return (not s.lost and v["utilization.gpu"] == 0 and v["clocks.sm"] == m.idle_sm_mhz
            and v["memory.used"] > 0.8 * v["memory.total"] and bool(s.processes))


def thermal(s, m) -> bool:
    return not s.lost and bool(bits(s) & R.THERMAL)


def hw_slowdown(s, m) -> bool:
    v = s.values
    return (not s.lost and bits(s) & (R.HW_POWER_BRAKE | R.HW_SLOWDOWN) == 0x88
            and not bits(s) & R.THERMAL and v["clocks.sm"] < 0.4 * m.max_sm_mhz
            and v["temperature.gpu"] < m.temp_max_operating_c - 10)


def lost(s, m) -> bool:
    return s.lost


def xid(s, m) -> bool:
    return bool(s.xids)


def ecc(s, m) -> bool:
    v = s.values
    return (not s.lost and v["ecc.errors.uncorrected.volatile.total"] >= 1
            and v["remapped_rows.pending"] == 1)


def pcie(s, m) -> bool:
    return not s.lost and s.values["pcie.link.width.current"] < m.pcie_max_width


def nvlink(s, m) -> bool:
    return not s.lost and s.values["nvlink.errors.crc_flit"] > 0


VISIBLE = {  # scenario -> (predicate, seconds after onset by which it must show)
    "comm_hang": (hang, 0.0), "stall": (stall, 0.0), "thermal_throttle": (thermal, 15.0),
    "hw_slowdown": (hw_slowdown, 0.0),
    "gpu_lost": (lost, 0.0), "ecc": (ecc, 0.0), "pcie_degraded": (pcie, 0.0),
    "nvlink_errors": (nvlink, 0.0),
}


def run(spec, model="h100-sxm", gpus=4, duration=480.0, interval=1.0, seed=0):
    src = SimSource.from_spec(spec, gpus=gpus, model=model, seed=seed, start=START)
    return src, list(src.run(duration, interval))


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("scenario", sorted(VISIBLE))
def test_fault_shows_on_its_gpus_from_onset_and_nowhere_else(scenario, model):
    m = MODELS[model]
    pred, lag = VISIBLE[scenario]
    if scenario == "nvlink_errors" and not m.nvlink:
        with pytest.raises(InputError, match="no NVLink"):
            run(f"sim:{scenario}", model=model)
        return
    src, ticks = run(f"sim:{scenario}", model=model)
    (gt,) = src.ground_truth()
    assert gt.kind == scenario and gt.kind in KINDS and gt.onset == START + ONSET
    assert gt.uuids == tuple(src.devices()[g].uuid for g in gt.gpus)
    for ts, ss in ticks:
        for s in ss:
            shown = pred(s, m)
            if s.index not in gt.gpus or ts < gt.onset:
                assert not shown, (s.index, ts - START)
            elif ts >= gt.onset + lag:
                assert shown, (s.index, ts - START)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_thermal_throttle_climbs_to_the_slowdown_threshold_and_trades_clocks_and_power(model):
    m = MODELS[model]
    src, ticks = run("sim:thermal_throttle", model=model, duration=480.0)
    (g,) = src.ground_truth()[0].gpus
    before = [ss[g].values for ts, ss in ticks if ONSET - 60 <= ts - START < ONSET]
    after = [ss[g].values for ts, ss in ticks if ts - START >= ONSET + 120]
    assert max(v["temperature.gpu"] for v in before) < m.temp_max_operating_c - 10
    for v in after:
        assert m.temp_slowdown_c - 1 <= v["temperature.gpu"] < m.temp_shutdown_c
        assert int(v["clocks_event_reasons.active"]) & 0x68 == 0x68  # SW+HW thermal, HW slowdown
        assert v["utilization.gpu"] >= 80  # still working, only slower
    assert statistics.mean(v["clocks.sm"] for v in after) < 0.8 * m.max_sm_mhz
    assert (statistics.mean(v["power.draw"] for v in after)
            < 0.8 * statistics.mean(v["power.draw"] for v in before))


def test_gpu_lost_reports_xid_79_once_on_the_first_lost_sample_even_when_sampled_coarsely():
    src, ticks = run("sim:gpu_lost@301.5", duration=400.0, interval=7.0)
    (gt,) = src.ground_truth()
    (g,) = gt.gpus
    events = [(ts, x) for ts, ss in ticks for x in ss[g].xids]
    first_lost = min(ts for ts, ss in ticks if ss[g].lost)
    assert [(ts, x.code, x.ts, x.uuid) for ts, x in events] == [
        (first_lost, 79, START + 301.5, gt.uuids[0])]
    assert first_lost - 7.0 < gt.onset <= first_lost


@pytest.mark.parametrize("code", [79, 48, 13])
def test_xid_code_is_selectable_and_delivered_once(code):
    src, ticks = run(f"sim:xid(code={code},gpus=1)", duration=420.0, interval=2.0)
    (gt,) = src.ground_truth()
    assert gt.params["code"] == code and gt.gpus == (1,) and gt.end == gt.onset
    got = [(ts, s.index, x.code) for ts, ss in ticks for s in ss for x in s.xids]
    assert got == [(gt.onset, 1, code)]


def test_comm_hang_with_a_dead_rank():
    m = MODELS["h100-sxm"]
    src, ticks = run("sim:comm_hang(dead=2)", duration=420.0)
    (gt,) = src.ground_truth()
    assert gt.gpus == (0, 1, 3) and gt.params == {"dead": 2}
    for ts, ss in ticks:
        if ts >= gt.onset:
            dead = ss[2]
            assert dead.values["utilization.gpu"] == 0 and dead.processes == ()
            assert dead.values["memory.used"] < 100
            assert all(hang(ss[i], m) for i in gt.gpus)
        else:
            assert ss[2].processes


def test_partial_hang_leaves_the_other_ranks_training():
    m = MODELS["h100-sxm"]
    _, ticks = run("sim:comm_hang(gpus=0-1)", duration=420.0)
    after = [ss for ts, ss in ticks if ts >= START + ONSET]
    assert all(hang(ss[0], m) and hang(ss[1], m) for ss in after)
    assert statistics.mean(ss[3].values["power.draw"] for ss in after) > 300


def test_pcie_replays_grow_while_degraded():
    src, ticks = run("sim:pcie_degraded(width=4,gen=3,rate=60)", duration=420.0)
    (g,) = src.ground_truth()[0].gpus
    at = {round(ts - START): ss[g].values for ts, ss in ticks}
    assert at[ONSET + 60]["pcie.replay_counter"] - at[ONSET]["pcie.replay_counter"] == 60
    assert at[ONSET - 1]["pcie.replay_counter"] == at[0]["pcie.replay_counter"]
    assert (at[ONSET]["pcie.link.width.current"], at[ONSET]["pcie.link.gen.current"]) == (4, 3)


def test_straggler_is_persistently_slower_than_its_peers():
    src, ticks = run("sim:straggler", duration=600.0)
    (g,) = src.ground_truth()[0].gpus
    after = [ss for ts, ss in ticks if ts >= START + ONSET]
    before = [ss for ts, ss in ticks if START + 150 <= ts < START + ONSET]
    for window, slower in ((after, True), (before, False)):
        mine = statistics.mean(ss[g].values["utilization.gpu"] for ss in window)
        peers = statistics.mean(s.values["utilization.gpu"] for ss in window for s in ss
                                if s.index != g)
        slow_clock = sum(ss[g].values["clocks.sm"] < 0.9 * min(
            s.values["clocks.sm"] for s in ss if s.index != g) for ss in window)
        assert (mine < peers - 10) is slower
        assert (slow_clock > 0.9 * len(window)) is slower
    assert not any(int(ss[g].values["clocks_event_reasons.active"]) & ~R.BENIGN
                   for ss in after)  # no limiter explains it


@pytest.mark.parametrize("model", sorted(MODELS))
def test_memory_leak_grows_steadily_from_the_onset_to_the_limit_then_the_job_dies(model):
    src, ticks = run("sim:memory_pressure(ramp=20m)", model=model, duration=1800.0,
                     interval=10.0)
    (gt,) = src.ground_truth()
    (g,) = gt.gpus
    assert gt.kind == "memory_pressure" and gt.onset == START + ONSET
    full = {round(ts - START): ss[g].values["memory.used"] / ss[g].values["memory.total"]
            for ts, ss in ticks}
    # before the onset (after start-up) the job's own hold, 88-93 %; from it, up every 3 min
    assert all(0.87 <= full[t] <= 0.935 for t in range(ONSET - 100, ONSET, 10))
    climb = [full[t] for t in range(ONSET, ONSET + 1200, 180)]
    assert all(b > a for a, b in itertools.pairwise(climb))
    assert full[ONSET + 1190] >= 0.99
    # then the job dies of out-of-memory: idle, memory freed, no process
    for ts, ss in ticks:
        if ts - START >= ONSET + 1200:
            v = ss[g].values
            assert v["memory.used"] <= 1.0 and v["utilization.gpu"] == 0.0
    others = [ss[k].values["memory.used"] / ss[k].values["memory.total"]
              for _, ss in ticks for k in range(len(ss)) if k != g]
    assert max(others) <= 0.935  # the other GPUs keep their hold


def test_a_fault_with_for_ends():
    m = MODELS["h100-sxm"]
    src, ticks = run("sim:hw_slowdown(for=60)@100", duration=300.0)
    (gt,) = src.ground_truth()
    assert gt.end == START + 160
    for ts, ss in ticks:
        assert hw_slowdown(ss[gt.gpus[0]], m) == (START + 100 <= ts < START + 160)


def test_combined_faults_each_show_on_their_own_gpus():
    m = MODELS["h100-sxm"]
    src, ticks = run("sim:comm_hang,thermal_throttle", gpus=8, duration=1000.0, interval=2.0)
    truth = {gt.kind: gt for gt in src.ground_truth()}
    last = ticks[-1][1]
    assert all(hang(last[i], m) for i in truth["comm_hang"].gpus)
    assert thermal(last[truth["thermal_throttle"].gpus[0]], m)
    assert not any(hang(s, m) for ts, ss in ticks if ts < truth["comm_hang"].onset for s in ss)


def test_nvlink_errors_grow_at_the_given_rate_with_replays_and_a_recovery():
    _, ticks = run("sim:nvlink_errors(rate=120,gpus=2)", duration=400.0)
    at = {round(ts - START): ss[2].values for ts, ss in ticks}
    assert at[ONSET - 1]["nvlink.errors.crc_flit"] == 0
    assert at[ONSET + 30]["nvlink.errors.crc_flit"] - at[ONSET]["nvlink.errors.crc_flit"] == 60
    assert at[ONSET + 30]["nvlink.errors.replay"] > 0
    assert at[ONSET + 30]["nvlink.errors.recovery"] == 1
