"""The condition language: parsing, errors with columns, scope checks, NaN semantics."""

from __future__ import annotations

import numpy as np
import pytest

from watchdog.detect.evaluate import Evaluator
from watchdog.detect.lang import Binary, Call, LangError, Name, Num, compile_expr, parse
from watchdog.detect.learned import PowerLevels
from watchdog.detect.signals import Block
from watchdog.records import DeviceInfo


def test_precedence_and_units() -> None:
    node = parse("a.b + 2 * 3 > 80% and not x or y")
    assert node.key == "((((a.b + (2.0 * 3.0)) > 80.0) and (not x)) or y)"
    assert parse("5m").value == 300.0  # type: ignore[attr-defined]
    assert parse("250ms").value == 0.25  # type: ignore[attr-defined]
    assert parse("0x48").value == 72.0  # type: ignore[attr-defined]


def test_window_call_carries_its_duration() -> None:
    node = compile_expr("mean(utilization.gpu, 60s) >= 95")
    assert isinstance(node, Binary) and isinstance(node.left, Call)
    assert node.left.fn == "mean" and node.left.window == 60.0
    assert isinstance(node.left.args[0], Name) and isinstance(node.right, Num)


@pytest.mark.parametrize(("src", "col", "words"), [
    ("utilization.gpu >", 18, "end of expression"),
    ("mean(power.draw 60s)", 17, "'60s'"),
    ("utilization.gpu > 5 5", 21, "expected an operator"),
    ("power.draw $ 3", 12, "unexpected character '$'"),
    ("(power.draw > 3", 16, "expected ')'"),
])
def test_parse_errors_name_the_token_and_column(src: str, col: int, words: str) -> None:
    with pytest.raises(LangError) as e:
        parse(src)
    assert e.value.col == col
    assert words in str(e.value)


@pytest.mark.parametrize(("src", "scope", "words", "col"), [
    ("utilisation.gpu > 5", "gpu", "unknown metric or signal 'utilisation.gpu'", 1),
    ("medain(power.draw, 60s) > 5", "gpu", "unknown function 'medain'", 1),
    ("mean(power.draw, 60) > 5", "gpu", "must be a duration", 18),
    ("mean(power.draw) > 5", "gpu", "takes (expression, duration)", 1),
    ("mean(power.draw, 2h) > 5", "gpu", "out of range", 18),
    ("count(lost) >= 2", "gpu", "only in scope: node", 1),
    ("mean(count(lost), 10s) > 1", "node", "inside a window", 6),
    ("count(count(lost) > 1) > 1", "node", "nested", 7),
    ("coalesce(power.draw) > 1", "gpu", "at least 2", 1),
])
def test_compile_errors(src: str, scope: str, words: str, col: int) -> None:
    with pytest.raises(LangError) as e:
        compile_expr(src, scope)
    assert words in str(e.value)
    assert e.value.col == col


def test_tokens_do_not_allow_attribute_tricks() -> None:
    with pytest.raises(LangError):
        compile_expr("__import__('os')")
    with pytest.raises(LangError):
        compile_expr("power.draw.__class__ > 1")  # a dotted name that is no metric


def _block(values: dict[str, list[float]], mask: list[float] | None = None) -> Block:
    n = len(next(iter(values.values())))
    metrics = {k: np.array(v, dtype=float) for k, v in values.items()}
    if mask is not None:
        metrics["clocks_event_reasons.active"] = np.array(mask, dtype=float)
    ts = np.arange(n, dtype=float)
    d = np.r_[0.0, np.ones(n - 1)]
    dev = DeviceInfo(index=0, uuid="g", power_limit_enforced_w=700.0)
    return Block(ts, d, np.array([n]), [dev], metrics, np.zeros(n, bool),
                 np.full(n, np.nan), np.zeros(n), PowerLevels())


def ev(src: str, blk: Block) -> list[float]:
    return list(Evaluator(30.0).sample(compile_expr(src), blk))


def test_nan_comparisons_are_false_and_present_coalesce_work() -> None:
    blk = _block({"power.draw": [np.nan, 100.0, 350.0]})
    assert ev("power.draw < 200", blk) == [0.0, 1.0, 0.0]
    assert ev("power.draw >= 200", blk) == [0.0, 0.0, 1.0]
    assert ev("not (power.draw < 200)", blk) == [1.0, 0.0, 1.0]
    assert ev("present(power.draw)", blk) == [0.0, 1.0, 1.0]
    assert ev("coalesce(power.draw, 7)", blk) == [7.0, 100.0, 350.0]
    assert ev("power_pct", blk)[1:] == [100 / 7, 50.0]


def test_flags_decode_reason_bits_and_are_nan_when_unknown() -> None:
    blk = _block({"power.draw": [1.0, 1.0, 1.0]}, mask=[0x4, 0x48, np.nan])
    assert ev("hw_slowdown", blk)[:2] == [0.0, 1.0]
    assert np.isnan(ev("hw_slowdown", blk)[2])
    assert ev("hw_thermal and sw_power_cap", blk) == [0.0, 0.0, 0.0]
    assert ev("throttle_bad", blk)[:2] == [0.0, 1.0]
    assert ev("not hw_slowdown", blk) == [1.0, 0.0, 1.0]  # unknown counts as false
    assert ev("clocks_event_reasons.active in (72, 4)", blk) == [1.0, 1.0, 0.0]


def test_division_by_zero_is_missing() -> None:
    blk = _block({"power.draw": [0.0, 5.0]})
    got = ev("10 / power.draw", blk)
    assert np.isnan(got[0]) and got[1] == 2.0
