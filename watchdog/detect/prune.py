"""Rules that cannot fire on a recording, found before the first block.

A log without PCIe, NVLink or ECC columns cannot show a degraded link or an ECC error:
every number those rules read is missing, so their conditions are false at every sample
whatever the other metrics do. Evaluating them anyway costs as much as a rule that can
fire (a sixth of a replay of a typical ``nvidia-smi`` log). :func:`never_true` proves it
by folding constants: the metrics the recording lacks are NaN everywhere, the others are
unknown, and the engine's own semantics give each operator's result (a comparison with
NaN is false, a window over NaN is NaN, a ``frac`` of a false condition is 0 %, a
counter ``delta`` with no reading is 0). Only a condition that folds to false (0 or NaN)
whatever the unknowns is pruned, so the incidents are exactly those of a full evaluation
(tested on random frames).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable

from watchdog import catalogue
from watchdog.detect.lang import Binary, Call, In, Name, Node, Num, Unary
from watchdog.detect.signal_names import FLAG_SIGNALS

UNKNOWN = None  # a value that depends on data
Value = float | None

# signals that are NaN at every sample when their one source metric is missing
SIGNAL_SOURCE = {
    "power_pct": "power.draw", "power_rel": "power.draw", "mem_pct": "memory.used",
    "sm_clock_pct": "clocks.sm", "sm_activity": "gpm.sm_activity",
    "tensor_activity": "gpm.tensor_activity", "throttle_bad": "clocks_event_reasons.active",
    "temp_work_max_c": "temperature.gpu", "work_before_idle": "utilization.gpu",
    "power_idle_learned_w": "power.draw",
}
FLAG_SOURCE = "clocks_event_reasons.active"
XID_SIGNALS = {"xid": math.nan, "xid_count": 0.0}  # their value at a sample with no XID


def _truth(v: float) -> bool:
    return not math.isnan(v) and v != 0.0


def _falsy(v: Value) -> bool:
    return v is not None and not _truth(v)


def _truthy(v: Value) -> bool:
    return v is not None and _truth(v)


BOOLEAN_OPS = ("and", "or", "<", "<=", ">", ">=", "==", "!=")


def is_boolean(node: Node) -> bool:
    """Whether ``node``'s value is always 0 or 1 (a test, not a number)."""
    return ((isinstance(node, Binary) and node.op in BOOLEAN_OPS)
            or (isinstance(node, Unary) and node.op == "not") or isinstance(node, In)
            or (isinstance(node, Call) and node.fn in ("present", "any_gpu", "all_gpus")))


def simplify(node: Node, present: Iterable[str]) -> Node:
    """``node`` with the tests that are constant on these metrics folded away: a test
    that is always true or false becomes 1 or 0, and ``x and 1``, ``x or 0`` become ``x``
    when ``x`` is a test too. Only for conditions (whose truth is all that is used):
    ``not present(sm_activity) or mean(sm_activity, 15s) < 15%`` on a log without GPM
    is simply true, and its window is never declared."""
    return _simplify(node, frozenset(present))


def _simplify(node: Node, present: frozenset[str]) -> Node:
    if is_boolean(node):
        v = fold(node, present)
        if v is not None:
            return Num(node.col, 1.0 if _truth(v) else 0.0)
    if isinstance(node, Unary) and node.op == "not":
        return Unary(node.col, "not", _simplify(node.arg, present))
    if not (isinstance(node, Binary) and node.op in ("and", "or")):
        return node
    left, right = _simplify(node.left, present), _simplify(node.right, present)
    keep = 1.0 if node.op == "and" else 0.0  # the neutral constant of the operator
    if isinstance(left, Num) and left.value == keep and is_boolean(right):
        return right
    if isinstance(right, Num) and right.value == keep and is_boolean(left):
        return left
    return Binary(node.col, node.op, left, right)


def with_presence(node: Node, present: Callable[[str], bool | None]) -> Node:
    """``node`` with each ``present(NAME)`` replaced by 1 or 0 where ``present(NAME)``
    says (None: left as it is), for what a rule reads when those are known: at one sample
    of a firing (which branch decided), or on a log whose columns are filled."""
    if isinstance(node, Call):
        if node.fn == "present" and isinstance(node.args[0], Name):
            got = present(node.args[0].name)
            if got is not None:
                return Num(node.col, 1.0 if got else 0.0)
        return Call(node.col, node.fn, tuple(with_presence(a, present) for a in node.args),
                    node.window)
    if isinstance(node, Binary):
        return Binary(node.col, node.op, with_presence(node.left, present),
                      with_presence(node.right, present))
    if isinstance(node, Unary):
        return Unary(node.col, node.op, with_presence(node.arg, present))
    if isinstance(node, In):
        return In(node.col, with_presence(node.arg, present), node.values)
    return node


def never_true(node: Node, present: Iterable[str]) -> bool:
    """Whether ``node`` is false (0 or NaN) at every sample when only the catalogue
    metrics in ``present`` are ever fed (and XID events only if ``"xid"`` is in it)."""
    return _falsy(fold(node, frozenset(present)))


def fold(node: Node, present: frozenset[str]) -> Value:
    """The constant value of ``node`` at every sample, or None when it depends on data."""
    if isinstance(node, Num):
        return float(node.value)
    if isinstance(node, Name):
        if node.name in XID_SIGNALS:  # events: "xid" in present when any can come
            return UNKNOWN if "xid" in present else XID_SIGNALS[node.name]
        source = node.name if node.name in catalogue.BY_NAME else SIGNAL_SOURCE.get(
            node.name, FLAG_SOURCE if node.name in FLAG_SIGNALS else None)
        return math.nan if source is not None and source not in present else UNKNOWN
    if isinstance(node, Unary):
        a = fold(node.arg, present)
        if a is None:
            return UNKNOWN
        return (0.0 if _truth(a) else 1.0) if node.op == "not" else -a
    if isinstance(node, In):
        a = fold(node.arg, present)
        if a is None:
            return UNKNOWN
        return 1.0 if a in node.values else 0.0  # NaN is in nothing
    if isinstance(node, Binary):
        return _binary(node, fold(node.left, present), fold(node.right, present))
    if isinstance(node, Call):
        return _call(node, [fold(a, present) for a in node.args])
    return UNKNOWN  # pragma: no cover - every node kind is handled above


def _binary(node: Binary, a: Value, b: Value) -> Value:
    op = node.op
    if op == "and":
        if _falsy(a) or _falsy(b):
            return 0.0
        return 1.0 if _truthy(a) and _truthy(b) else UNKNOWN
    if op == "or":
        if _truthy(a) or _truthy(b):
            return 1.0
        return 0.0 if _falsy(a) and _falsy(b) else UNKNOWN
    nan_side = (a is not None and math.isnan(a)) or (b is not None and math.isnan(b))
    if op in ("<", "<=", ">", ">=", "==", "!="):
        if nan_side:
            return 0.0  # a comparison with NaN is false (!= too, in the engine)
        if a is None or b is None:
            return UNKNOWN
        return float({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b,
                      "!=": a != b}[op])
    if nan_side:
        return math.nan  # arithmetic with NaN
    if a is None or b is None:
        return UNKNOWN
    if op == "/":
        return a / b if b != 0 else math.nan  # as the engine: x / 0 is missing
    return {"+": operator.add, "-": operator.sub, "*": operator.mul}[op](a, b)


def _call(node: Call, args: list[Value]) -> Value:
    fn = node.fn
    a = args[0] if args else UNKNOWN
    if node.window is not None:
        if fn in ("mean", "min", "max", "last", "slope"):
            return math.nan if a is not None and math.isnan(a) else UNKNOWN
        if fn in ("delta", "rate"):  # no valid reading, no rise
            return 0.0 if a is not None and math.isnan(a) else UNKNOWN
        if fn == "frac":  # a condition that never holds held 0 % of any window
            return 0.0 if _falsy(a) else UNKNOWN
        return UNKNOWN
    if fn == "present":
        return UNKNOWN if a is None else float(not math.isnan(a))
    if fn == "abs":
        return UNKNOWN if a is None else abs(a)
    if fn == "coalesce":
        for v in args:
            if v is None:
                return UNKNOWN
            if not math.isnan(v):
                return v
        return math.nan
    if fn in ("count", "any_gpu", "all_gpus"):
        return 0.0 if _falsy(a) else UNKNOWN
    if fn.startswith("peer_"):
        return math.nan if a is not None and math.isnan(a) else UNKNOWN
    return UNKNOWN  # frac_gpus: 0 or NaN, depending on which GPUs report
