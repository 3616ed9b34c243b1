"""Rules that cannot fire on a recording's metrics are left out, with the same incidents."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.test_detect_engine import METRICS, RULES, devices, random_frame, summary_of
from watchdog.detect import Detector, RuleSet, load_rules
from watchdog.detect.lang import compile_expr
from watchdog.detect.prune import never_true, simplify

SHIPPED = load_rules(None)
BOTH = RuleSet([*SHIPPED, *RULES])


@pytest.mark.parametrize(("expr", "present", "never"), [
    ("delta(pcie.replay_counter, 2m) >= 10", [], True),
    ("delta(pcie.replay_counter, 2m) >= 10", ["pcie.replay_counter"], False),
    ("mean(pcie.link.width.current, 30s) < peer_max(mean(pcie.link.width.current, 30s))",
     ["utilization.gpu"], True),
    ("min(utilization.gpu, 30s) > 50 and max(pcie.link.gen.current, 30s) < 4",
     ["utilization.gpu"], True),
    ("min(utilization.gpu, 30s) > 50 or max(pcie.link.gen.current, 30s) < 4",
     ["utilization.gpu"], False),
    ("not present(sm_activity) or mean(sm_activity, 15s) < 15", [], False),  # true!
    ("frac(hw_slowdown or hw_power_brake, 10s) >= 50%", ["power.draw"], True),
    ("frac(hw_slowdown, 10s) >= 50%", ["clocks_event_reasons.active"], False),
    ("mem_pct > 98", ["memory.total"], True),
    ("xid in (48, 79)", ["xid"], False),  # XID events can come
    ("frac(xid in (48, 79), 5m) > 0", ["power.draw"], True),  # a log without XIDs
    ("xid_count > 0 or xid > 0", [], True),
    ("lost > 0", [], False),
    ("count(ecc.errors.uncorrected.volatile.total > 0) >= 1", ["power.draw"], True),
    ("frac_gpus(clocks.sm > 0) < 50", [], False),  # 0 or NaN: not folded
    ("coalesce(clocks.sm, 5) > 3", [], False),  # the fallback holds
    ("2 * power_pct - 1 > 10", ["utilization.gpu"], True),  # NaN arithmetic
    ("2 * 3 - 1 > 4 and 8 / 0 > 1 or lost", [], False),  # x / 0 is missing, lost unknown
    ("10 / 4 + 1 > 3 and not 6 - 2 * 3 > 0", [], False),  # constants: true
])
def test_folding(expr: str, present: list[str], never: bool) -> None:
    assert never_true(compile_expr(expr, scope="node"), present) is never


def test_shipped_rules_pruned_on_a_plain_nvidia_smi_log() -> None:
    plain = ["utilization.gpu", "utilization.memory", "memory.used", "memory.total",
             "power.draw", "enforced.power.limit", "temperature.gpu", "clocks.sm",
             "clocks.mem", "pstate", "clocks_event_reasons.active"]
    det = Detector(SHIPPED, "h", devices(2), metrics=plain)
    # a log has no agent-side NVML error count: nvml_calls_failing cannot fire on it
    assert det._pruned == {"pcie_degraded", "nvlink_errors", "ecc_uncorrectable", "ecc_worn_out",
                           "xid_critical", "xid_application", "xid_other", "nvml_calls_failing"}
    with_xids = Detector(SHIPPED, "h", devices(2), metrics=[*plain, "xid"])
    assert with_xids._pruned == {"pcie_degraded", "nvlink_errors", "ecc_uncorrectable",
                                 "ecc_worn_out", "nvml_calls_failing"}
    assert not Detector(SHIPPED, "h", devices(2))._pruned  # live: nothing is pruned


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.sets(st.sampled_from(METRICS)))
# a frame without temperatures where the reason bits fire thermal_throttle: the live
# detector named the temperature-only fallback there too
@example(seed=1102, dropped=set())
def test_pruned_detector_finds_the_same_incidents(seed: int, dropped: set[str]) -> None:
    frame, xids = random_frame(seed, n_gpus=3, n_ticks=120)
    frame = frame.drop(columns=sorted(dropped))
    present = [c for c in frame.columns if c in METRICS] + ["xid"]
    full = Detector(BOTH, "h", devices(4))
    pruned = Detector(BOTH, "h", devices(4), metrics=present)
    for det in (full, pruned):
        det.feed_frame(frame, xids)
    assert summary_of(pruned) == summary_of(full)


def test_every_metric_subset_prunes_something_and_agrees() -> None:
    """Not vacuous: some rules are pruned for each subset without ECC counters."""
    frame, xids = random_frame(3, n_gpus=3, n_ticks=120)
    for k in range(len(METRICS)):
        for keep in itertools.combinations(METRICS, k):
            part = frame.drop(columns=[m for m in METRICS if m not in keep])
            pruned = Detector(BOTH, "h", devices(4), metrics=[*keep, "xid"])
            assert "ecc_uncorrectable" in pruned._pruned or \
                "ecc.errors.uncorrected.volatile.total" in keep
            full = Detector(BOTH, "h", devices(4))
            for det in (full, pruned):
                det.feed_frame(part, xids)
            assert summary_of(pruned) == summary_of(full), keep


def test_feeding_a_metric_that_was_not_announced_is_a_bug() -> None:
    frame, xids = random_frame(4, n_gpus=2, n_ticks=30)
    det = Detector(BOTH, "h", devices(4), metrics=["utilization.gpu", "xid"])
    with pytest.raises(ValueError, match="not among the announced"):
        det.feed_frame(frame, xids)
    det = Detector(BOTH, "h", devices(4), metrics=list(METRICS))
    with pytest.raises(ValueError, match="XID events were not announced"):
        det.feed_frame(frame, xids)


def test_without_xid_events_the_xid_rules_go_and_nothing_changes() -> None:
    frame, _ = random_frame(5, n_gpus=3, n_ticks=120)
    full = Detector(BOTH, "h", devices(4))
    pruned = Detector(BOTH, "h", devices(4), metrics=list(METRICS))
    assert {"xid", "xid_critical", "xid_application", "xid_other"} <= pruned._pruned
    for det in (full, pruned):
        det.feed_frame(frame)
    assert summary_of(pruned) == summary_of(full)


def test_constant_tests_are_folded_out_of_conditions() -> None:
    hang = next(r for r in SHIPPED if r.name == "comm_hang")
    plain = ["utilization.gpu", "utilization.memory", "power.draw", "clocks.sm",
             "clocks_event_reasons.active"]
    folded = simplify(hang.condition, plain)
    assert "sm_activity" in hang.condition.key and "tensor_activity" in hang.condition.key
    assert "sm_activity" not in folded.key and "tensor_activity" not in folded.key
    assert "utilization.memory" in folded.key  # present: its test stays
    assert simplify(hang.condition, [*plain, "gpm.sm_activity", "gpm.tensor_activity"]) \
        .key == hang.condition.key
    # a test that folds to a constant becomes that constant; numbers are left alone
    assert simplify(compile_expr("not present(sm_activity)"), []).key == "1.0"
    assert simplify(compile_expr("mean(pcie.link.width.current, 30s)"), []).key == \
        "mean(pcie.link.width.current, 30.0s)"
    # `x and 1` keeps x only when x is itself a test (its truth, not its number, counts)
    assert simplify(compile_expr("lost and not present(clocks.sm)"), []).key == \
        "(lost and 1.0)"
    assert simplify(compile_expr("lost > 0 and not present(clocks.sm)"), []).key == \
        "(lost > 0.0)"
