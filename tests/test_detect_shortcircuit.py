"""``and``/``or`` skip their right side for a whole block when it cannot change the result.

What must not change with it: learned levels (they advance in every block) and the
windows on the skipped side (carried, so later blocks see the skipped samples). Each test
feeds the same frame in one block and in blocks of 20 rows (where the right side is
skipped in the early blocks) and expects the same incident.
"""

from __future__ import annotations

from tests.test_detect_engine import T0, devices, steady
from watchdog.detect import Detector, RuleSet
from watchdog.detect.loader import parse_rules_text


def rule(condition: str) -> RuleSet:
    return RuleSet(parse_rules_text(f"""
rules:
  - name: r
    kind: stall
    severity: warning
    condition: {condition}
    for: 0s
"""))


def incidents(rules: RuleSet, rows: int, frame) -> list[tuple[float, float | None]]:  # type: ignore[no-untyped-def]
    det = Detector(rules, "h", devices(1))
    for a in range(0, len(frame), rows):
        det.feed_frame(frame.iloc[a:a + rows])
    return [(i.started_at - T0, None if i.resolved_at is None else i.resolved_at - T0)
            for i in det.finish()]


# busy (100 %) at 400 W until 60 s, half busy (50 %) at 350 W until 100 s (no level is
# learned there), then idle (0 % util) at 300 W
FRAME = steady(1, 170,
               utilization__gpu=lambda g, t: 100.0 if t < 60 else (50.0 if t < 100 else 0.0),
               power__draw=lambda g, t: 400.0 if t < 60 else (350.0 if t < 100 else 300.0))


def test_a_learned_level_on_a_skipped_side_still_learns() -> None:
    """The busy level (400 W) is learned in the busy blocks, where ``util < 1`` is false
    and the right side is never evaluated; 300 W is above half of it once idle at 100 s.
    Without learning there the busy level would be the limit (700 W): nothing would fire."""
    rules = rule("utilization.gpu < 1 and power.draw > 0.5 * power_busy_w")
    whole, small = incidents(rules, 1000, FRAME), incidents(rules, 20, FRAME)
    assert whole == small
    assert [start for start, _ in small] == [100.0]


def test_a_window_on_a_skipped_side_keeps_the_skipped_samples() -> None:
    """The 60 s mean of power from 100 s still holds the 400 W samples of blocks where
    the right side was skipped: above 350 W at 100 s, below after about 10 s of idle."""
    rules = rule("utilization.gpu < 1 and mean(power.draw, 60s) > 350")
    whole, small = incidents(rules, 1000, FRAME), incidents(rules, 20, FRAME)
    assert whole == small
    ((start, end),) = small
    assert start == 100.0 and end is not None and 100.0 < end < 120.0


def test_or_with_a_true_left_side_skips_and_agrees() -> None:
    """``or`` skips its right side where the left holds throughout; same incidents."""
    rules = rule("not utilization.gpu < 1 or mean(power.draw, 60s) > 350")
    assert incidents(rules, 1000, FRAME) == incidents(rules, 20, FRAME)
    assert incidents(rules, 20, FRAME)[0][0] == 0.0
