"""Verdict logic of ``watchdog check``: each check fires on its condition and stays quiet on
the normal look-alikes real nodes show (power-cap bits, caching allocators, PCIe gen 1 at
idle, locked clocks)."""

from __future__ import annotations

import pytest

from watchdog import reasons
from watchdog.check import judge as J
from watchdog.check.judge import Status
from watchdog.records import DeviceInfo, Sample, XidEvent

H100 = DeviceInfo(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3",
                  power_limit_enforced_w=700.0, clocks_max_sm_mhz=1980.0,
                  memory_total_mib=81559.0, temp_slowdown_c=89.0, pcie_max_gen=5,
                  pcie_max_width=16, driver_version="565.57.01")

BUSY = {  # a busy H100 in its high phase, as in the real nanoGPT log
    "utilization.gpu": 100.0, "utilization.memory": 45.0, "memory.used": 76000.0,
    "memory.total": 81559.0, "power.draw": 690.0, "enforced.power.limit": 700.0,
    "temperature.gpu": 62.0, "clocks.sm": 1755.0,
    "clocks_event_reasons.active": float(reasons.SW_POWER_CAP | reasons.SYNC_BOOST),
    "pcie.link.gen.current": 5.0, "pcie.link.width.current": 16.0,
    "ecc.errors.uncorrected.volatile.total": 0.0, "ecc.errors.corrected.volatile.total": 3.0,
    "remapped_rows.pending": 0.0, "remapped_rows.failure": 0.0,
}
IDLE = {**BUSY, "utilization.gpu": 0.0, "utilization.memory": 0.0, "memory.used": 500.0,
        "power.draw": 72.0, "clocks.sm": 345.0, "temperature.gpu": 30.0,
        "clocks_event_reasons.active": float(reasons.GPU_IDLE), "pcie.link.gen.current": 1.0}
HUNG = {**BUSY, "power.draw": 98.0, "clocks.sm": 1980.0, "utilization.memory": 0.0,
        "clocks_event_reasons.active": 0.0}


def burst(values: dict, n: int = 4, *, uuid: str = "GPU-0", index: int = 0,
          per_reading: list[dict] | None = None, **extra) -> list[Sample]:
    """``n`` readings 0.5 s apart with ``values``; ``per_reading`` overrides by position."""
    out = []
    for k in range(n):
        v = dict(values)
        if per_reading and k < len(per_reading):
            v.update(per_reading[k])
        out.append(Sample(ts=1000.0 + 0.5 * k, uuid=uuid, index=index, values=v, **extra))
    return out


def verdict(samples: list[Sample], device: DeviceInfo | None = H100, **kw) -> J.Verdict:
    devices = [device] if device else []
    return J.judge(devices, {samples[0].uuid: samples}, host="n1", checked_at=1002.0, **kw)


def checks(v: J.Verdict) -> dict[str, Status]:
    return {p.check: p.severity for p in v.problems}


class TestHealthy:
    def test_busy_gpu_with_power_cap_and_sync_boost_is_ok(self):
        """SW power cap and sync boost are on most of the time on a busy H100: normal."""
        v = verdict(burst(BUSY))
        assert v.problems == [] and v.status is Status.OK and v.exit_code == 0

    def test_idle_gpu_with_gen1_link_and_idle_bit_is_ok(self):
        """PCIe drops to gen 1 and the idle bit is set at idle by design."""
        assert verdict(burst(IDLE)).problems == []

    def test_caching_allocator_at_92_percent_is_ok(self):
        assert verdict(burst({**BUSY, "memory.used": 0.92 * 81559})).problems == []

    def test_locked_clocks_at_full_util_and_low_power_is_not_a_problem(self):
        """nvidia-smi -lgc: 100 % util at low power with the applications-clocks bit."""
        locked = {**HUNG, "clocks_event_reasons.active": float(reasons.APPLICATIONS_CLOCKS)}
        assert verdict(burst(locked)).problems == []

    def test_low_locked_clock_without_reason_bits_is_not_a_hang(self):
        """The real 525 MHz locked-clock log carries no reason column: the clock tells."""
        assert verdict(burst({**HUNG, "clocks.sm": 525.0,
                              "clocks_event_reasons.active": None})).problems == []

    def test_missing_values_are_not_read_as_zero(self):
        """A GPU that reports almost nothing is not flagged for what it did not report."""
        v = verdict(burst({"utilization.gpu": None, "power.draw": None}))
        assert v.problems == []


class TestCount:
    def test_zero_gpus_is_critical_even_without_expectation(self):
        v = J.judge([], {}, host="n1", checked_at=0.0)
        assert checks(v) == {"gpu_count": Status.CRITICAL} and v.exit_code == 2

    @pytest.mark.parametrize(("found", "expected", "status"), [
        (7, 8, Status.CRITICAL), (8, 8, None), (9, 8, Status.WARNING), (3, None, None)])
    def test_count_against_expectation(self, found, expected, status):
        problems = J.check_count(found, expected)
        assert [p.severity for p in problems] == ([status] if status else [])

    def test_missing_gpu_in_judge_is_counted(self):
        devices = [H100, DeviceInfo(index=1, uuid="GPU-1")]
        v = J.judge(devices, {"GPU-0": burst(BUSY)}, host="n", checked_at=0.0,
                    expected_gpus=3)
        assert "found 2 GPUs, expected 3" in [p.message for p in v.problems]


class TestLostAndErrors:
    def test_lost_gpu_is_critical(self):
        v = verdict(burst({}, lost=True))
        assert checks(v) == {"gpu_lost": Status.CRITICAL} and v.exit_code == 2

    def test_gpu_with_no_reading_is_critical(self):
        v = J.judge([H100], {}, host="n", checked_at=0.0)
        assert checks(v) == {"gpu_lost": Status.CRITICAL}

    @pytest.mark.parametrize("error", ["nvmlDeviceGetPowerUsage: timed out after 2.0 s",
                                       "nvmlDeviceGetPowerUsage did not return within 2 s"])
    def test_nvml_timeout_is_critical(self, error):
        assert checks(verdict(burst(BUSY, errors=(error,)))) == {"nvml_timeout": Status.CRITICAL}

    def test_other_nvml_error_is_unknown(self):
        v = verdict(burst(BUSY, errors=("nvmlDeviceGetTemperature: Unknown Error",)))
        assert checks(v) == {"nvml_error": Status.UNKNOWN} and v.exit_code == 3

    def test_known_fault_outranks_unknown(self):
        """CRITICAL > WARNING > UNKNOWN > OK when aggregating (not exit-code order)."""
        assert J.worst([Status.UNKNOWN, Status.WARNING]) is Status.WARNING
        assert J.worst([Status.OK, Status.UNKNOWN]) is Status.UNKNOWN
        assert J.worst([Status.UNKNOWN, Status.CRITICAL, Status.WARNING]) is Status.CRITICAL
        assert J.worst([]) is Status.OK


class TestXid:
    @pytest.mark.parametrize("code", [48, 79, 94, 95, 119, 120, 140])
    def test_hardware_xids_are_critical(self, code):
        s = burst(BUSY)
        s[2].xids = (XidEvent(ts=1001.0, uuid="GPU-0", index=0, code=code),)
        p = verdict(s).problems
        assert [(x.check, x.severity) for x in p] == [("xid", Status.CRITICAL)]
        assert f"XID {code}" in p[0].message

    @pytest.mark.parametrize("code", [13, 31, 43, 999])
    def test_application_and_unclassified_xids_are_warnings(self, code):
        s = burst(BUSY)
        s[1].xids = (XidEvent(ts=1000.5, uuid="GPU-0", index=0, code=code),)
        assert checks(verdict(s)) == {"xid": Status.WARNING}

    def test_repeated_xid_is_one_problem_with_a_count(self):
        s = burst(BUSY)
        ev = XidEvent(ts=1000.0, uuid="GPU-0", index=0, code=79)
        s[0].xids = (ev,)
        s[3].xids = (ev,)
        (p,) = verdict(s).problems
        assert p.message.endswith("x2") and "fallen off the bus" in p.message


class TestEcc:
    @pytest.mark.parametrize(("metric", "value", "status"), [
        ("ecc.errors.uncorrected.volatile.total", 1.0, Status.CRITICAL),
        ("remapped_rows.failure", 1.0, Status.CRITICAL),
        ("retired_pages.count", 63.0, Status.CRITICAL),
        ("remapped_rows.pending", 1.0, Status.CRITICAL),
        ("retired_pages.pending", 1.0, Status.CRITICAL),
        ("remapped_rows.uncorrectable", 512.0, Status.CRITICAL),
    ])
    def test_memory_errors(self, metric, value, status):
        """Every ECC finding is CRITICAL, the severity of the ``ecc`` kind in the rules."""
        assert checks(verdict(burst({**BUSY, metric: value}))) == {"ecc": status}

    def test_corrected_errors_and_few_retired_pages_are_normal(self):
        v = verdict(burst({**BUSY, "ecc.errors.corrected.volatile.total": 5000.0,
                           "retired_pages.count": 2.0}))
        assert v.problems == []


class TestClockEvents:
    """Judged by rules/throttle.yaml over the burst: one severity per kind everywhere."""

    @pytest.mark.parametrize("mask", [0x1, 0x2, 0x4, 0x10, 0x14, 0x100])
    def test_benign_bits_are_ok(self, mask):
        assert verdict(burst({**BUSY, "clocks_event_reasons.active": float(mask)})).problems == []

    @pytest.mark.parametrize("mask", [0x20 | 0x4, 0x8 | 0x40, 0x40])
    def test_thermal_slowdown_is_the_rules_warning(self, mask):
        v = verdict(burst({**BUSY, "clocks_event_reasons.active": float(mask)}))
        assert checks(v) == {"thermal_throttle": Status.WARNING}
        assert "thermal slowdown" in v.problems[0].message

    @pytest.mark.parametrize("mask", [0x8 | 0x80, 0x8])
    def test_hw_slowdown_without_thermal_is_the_rules_critical(self, mask):
        v = verdict(burst({**BUSY, "clocks_event_reasons.active": float(mask)}))
        assert checks(v) == {"hw_slowdown": Status.CRITICAL}
        assert "HW slowdown" in v.problems[0].message

    def test_hw_slowdown_in_less_than_half_the_burst_is_ok(self):
        """The rule's frac(..., 10s) >= 50 %, over the burst: one reading of four is a blip."""
        s = burst(BUSY, per_reading=[{}, {}, {}, {"clocks_event_reasons.active": 0x88}])
        assert verdict(s).problems == []
        half = burst(BUSY, per_reading=[{}, {}, {"clocks_event_reasons.active": 0x88},
                                        {"clocks_event_reasons.active": 0x88}])
        assert checks(verdict(half)) == {"hw_slowdown": Status.CRITICAL}

class TestPcie:
    """Judged by rules/pcie.yaml over the burst (its `for:` rides out a retraining blip
    in the daemon; a condition holding through the whole burst is a finding here)."""

    def test_narrow_link_is_a_warning(self):
        v = verdict(burst({**BUSY, "pcie.link.width.current": 8.0}))
        assert checks(v) == {"pcie_degraded": Status.WARNING}
        assert "x8 gen5" in v.problems[0].message

    def test_slow_generation_while_busy_is_a_warning(self):
        v = verdict(burst({**BUSY, "pcie.link.gen.current": 3.0}))
        assert checks(v) == {"pcie_degraded": Status.WARNING}
        assert "x16 gen3" in v.problems[0].message

    def test_slow_generation_at_idle_is_normal(self):
        assert verdict(burst({**IDLE, "pcie.link.gen.current": 1.0})).problems == []

    def test_slow_generation_when_busy_only_part_of_the_burst_is_normal(self):
        s = burst({**BUSY, "pcie.link.gen.current": 2.0},
                  per_reading=[{"utilization.gpu": 0.0}])
        assert verdict(s).problems == []


class TestLinkErrors:
    """PCIe replays and NVLink errors: the thresholds of rules/pcie.yaml and
    rules/nvlink.yaml, the same in the probe as in the daemon."""

    def test_ten_pcie_replays_are_a_warning_nine_are_not(self):
        s = burst(BUSY, per_reading=[{"pcie.replay_counter": 100.0 + 15 * k} for k in range(4)])
        v = verdict(s)
        assert checks(v) == {"pcie_degraded": Status.WARNING}
        assert "replays in 2 min" in v.problems[0].message
        ten = burst(BUSY, per_reading=[{"pcie.replay_counter": 100.0 + 10 * (k == 3)}
                                       for k in range(4)])
        assert checks(verdict(ten)) == {"pcie_degraded": Status.WARNING}
        nine = burst(BUSY, per_reading=[{"pcie.replay_counter": 100.0 + 9 * (k == 3)}
                                        for k in range(4)])
        assert verdict(nine).problems == []

    def test_a_replay_counter_reset_is_normal(self):
        reset = burst(BUSY, per_reading=[{"pcie.replay_counter": 9e6 if k < 2 else 0.0}
                                         for k in range(4)])
        assert verdict(reset).problems == []

    def test_nvlink_errors_past_the_rules_thresholds_are_a_warning(self):
        rec = burst(BUSY, per_reading=[{"nvlink.errors.recovery": float(k > 1)}
                                       for k in range(4)])
        assert checks(verdict(rec)) == {"nvlink_errors": Status.WARNING}
        storm = burst(BUSY, per_reading=[{"nvlink.errors.crc_data": 500.0 * k}
                                         for k in range(4)])
        assert checks(verdict(storm)) == {"nvlink_errors": Status.WARNING}
        few = burst(BUSY, per_reading=[{"nvlink.errors.crc_flit": 10.0 + k} for k in range(4)])
        assert verdict(few).problems == []  # 3 CRC errors: the rule pages over 100

    def test_steady_nvlink_counters_are_normal(self):
        assert verdict(burst({**BUSY, "nvlink.errors.replay": 42.0,
                              "nvlink.errors.crc_flit": 7.0})).problems == []


class TestMemory:
    """rules/memory.yaml warns of memory filling for 15 minutes: a burst cannot see that,
    and memory held at the limit is what a healthy job's allocator does."""

    def test_memory_held_at_the_limit_for_the_whole_burst_is_no_problem(self):
        assert verdict(burst({**BUSY, "memory.used": 0.999 * 81559})).problems == []
        assert verdict(burst({**BUSY, "memory.used": 81000.0, "memory.total": None})
                       ).problems == []


class TestHang:
    """Judged by rules/comm_hang.yaml over the burst; never more than a WARNING here."""

    def test_hang_signature_is_a_warning_that_says_why_not_critical(self):
        v = verdict(burst(HUNG))
        assert checks(v) == {"comm_hang": Status.WARNING} and v.exit_code == 1
        msg = v.problems[0].message
        assert "98 W" in msg and "watchdog run" in msg and "unconfirmed" in msg

    def test_hang_with_gpm_sm_activity_near_zero(self):
        assert checks(verdict(burst({**HUNG, "gpm.sm_activity": 2.0}))) == {
            "comm_hang": Status.WARNING}

    def test_gpm_showing_real_work_is_not_a_hang(self):
        assert verdict(burst({**HUNG, "gpm.sm_activity": 60.0})).problems == []

    @pytest.mark.parametrize("change", [
        {"power.draw": 390.0},  # the real "low busy" phase of an H100 (nanoGPT log)
        {"clocks_event_reasons.active": float(reasons.APPLICATIONS_CLOCKS)},
        {"clocks_event_reasons.active": float(reasons.SW_THERMAL)},
        {"utilization.gpu": 60.0},
        {"utilization.memory": 30.0},
        {"gpm.tensor_activity": 40.0},
    ])
    def test_look_alikes_are_not_hangs(self, change):
        v = verdict(burst({**HUNG, **change}))
        assert "comm_hang" not in checks(v)

    def test_low_clock_against_the_inventory_maximum_is_not_a_hang(self):
        assert verdict(burst({**HUNG, "clocks.sm": 800.0})).problems == []

    def test_signature_must_hold_over_the_burst(self):
        """The rule's 15 s means, clipped to the burst: one busy reading of four pulls the
        power mean above the hang's level."""
        s = burst(HUNG, per_reading=[{}, {"power.draw": 650.0}])
        assert verdict(s).problems == []


def test_problems_carry_gpu_index_and_uuid():
    s = burst({**BUSY, "remapped_rows.pending": 1.0}, uuid="GPU-7", index=7)
    dev = DeviceInfo(index=7, uuid="GPU-7")
    (p,) = J.judge([dev], {"GPU-7": s}, host="n", checked_at=0.0).problems
    assert (p.gpu, p.uuid) == (7, "GPU-7")
