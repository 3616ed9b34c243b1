"""Alert states (inactive → pending → firing → resolved) and learned ``for:``."""

from __future__ import annotations

import math

import numpy as np

from watchdog.detect.machine import EntityState, Machine
from watchdog.detect.waits import LearnedWait, WaitLearner


def run(machine: Machine, cond: list[int], clear: list[int] | None = None,
        start: float = 0.0, key: str = "g") -> list[tuple[str, float]]:
    """Feed one block (1 s apart); returns the transitions as (what, time)."""
    events: list[tuple[str, float]] = []
    ts = start + np.arange(len(cond), dtype=float)
    c = np.array(cond, bool)
    clr = ~c if clear is None else np.array(clear, bool)

    def fire(_k: str, i: int, st: EntityState) -> str:
        events.append(("firing", float(ts[i])))
        assert st.since <= ts[i]
        return "incident"

    def resolve(_k: str, t: float, _st: EntityState) -> None:
        events.append(("resolved", t))

    machine.run([(key, ts, c, clr)], fire, resolve)
    return events


def test_pending_that_clears_is_forgotten() -> None:
    m = Machine(5.0, 0.0, None)
    assert run(m, [0, 1, 1, 1, 0, 0]) == []
    assert m.states["g"].phase == "inactive"


def test_fires_when_held_for_and_resolves_when_false() -> None:
    m = Machine(3.0, 0.0, None)
    assert run(m, [0, 1, 1, 1, 1, 1, 0, 1]) == [("firing", 4.0), ("resolved", 6.0)]
    assert m.states["g"].phase == "pending" and m.states["g"].since == 7.0


def test_for_zero_fires_on_the_first_true_sample() -> None:
    assert run(Machine(0.0, 0.0, None), [0, 0, 1, 0]) == [("firing", 2.0), ("resolved", 3.0)]


def test_keep_firing_for_rides_out_short_dips() -> None:
    m = Machine(0.0, 3.0, None)
    # a 2 s dip does not resolve; a 3 s one does, at the third false evaluation + 0
    got = run(m, [1, 1, 0, 0, 1, 1, 0, 0, 0, 0])
    assert got == [("firing", 0.0), ("resolved", 9.0)]


def test_clear_condition_gives_hysteresis() -> None:
    m = Machine(0.0, 0.0, None)
    cond = [1, 1, 0, 0, 0, 0]
    clear = [0, 0, 0, 0, 1, 1]  # condition false at 2 s, but clear only holds from 4 s
    assert run(m, cond, clear) == [("firing", 0.0), ("resolved", 4.0)]


def test_state_carries_across_blocks() -> None:
    m = Machine(4.0, 0.0, None)
    assert run(m, [1, 1, 1], start=0.0) == []
    assert run(m, [1, 1, 1], start=3.0) == [("firing", 4.0)]
    assert run(m, [0], start=6.0) == [("resolved", 6.0)]


def test_learned_for_uses_default_then_longest_legitimate_wait() -> None:
    m = Machine(0.0, 0.0, LearnedWait(default=10.0, min=4.0, margin=2.0))
    assert m.learner is not None and m.learner.effective() == 10.0
    # a 6 s episode that ends on its own: legitimate; for becomes 6 + 2 = 8 s
    assert run(m, [1] * 6 + [0]) == []
    assert m.learner.longest == 6.0 and m.learner.effective() == 8.0
    # a 7 s wait stays quiet, and raises the learned for to 9 s
    assert run(m, [1] * 7 + [0], start=100.0) == []
    assert m.learner.effective() == 9.0
    # a real hang fires 9 s after it began, not at the 10 s default
    assert run(m, [1] * 20, start=200.0) == [("firing", 209.0)]


def test_learned_for_never_below_min() -> None:
    lr = WaitLearner(LearnedWait(default=60.0, min=30.0, margin=5.0))
    lr.record(2.0)
    assert lr.effective() == 30.0
    d = lr.to_dict()
    other = WaitLearner.from_dict(LearnedWait(default=60.0, min=30.0, margin=5.0), d)
    assert other.longest == 2.0 and other.episodes == 1 and other.effective() == 30.0


def test_learning_is_in_time_order_across_entities() -> None:
    """GPU b's episode ends at 3 s, before GPU a's pending starts at 5 s: a must use it."""
    m = Machine(0.0, 0.0, LearnedWait(default=100.0, min=0.0, margin=1.0))
    ts = np.arange(12, dtype=float)
    a = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1], bool)
    b = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], bool)
    fired: list[tuple[str, float]] = []
    m.run([("a", ts, a, ~a), ("b", ts, b, ~b)],
          lambda k, i, st: fired.append((k, float(ts[i]))) or k, lambda *_: None)
    assert fired == [("a", 9.0)]  # 3 s legitimate wait + 1 s margin = 4 s after 5 s
    assert math.isclose(m.states["a"].for_used, 4.0)
