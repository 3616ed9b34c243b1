"""What a log lets each rule judge: which rules cannot run on it, and which run on a
fallback, said once per log (``watchdog replay`` prints it; ``--json`` carries it).

A rule cannot judge a log when its condition is false at every sample whatever the data,
with the metrics the log has and the references it can get (the folding of
:mod:`prune`, with the chained signals the log cannot feed set missing: a memory
fill with no total, no free memory and no GPU name is never known). The note names
what is missing: the metrics that alone would let the rule judge. A rule that can judge
but whose condition reads a reference the log cannot give first-hand (a power limit, a
memory total, a slowdown temperature; :mod:`fallbacks`) gets a note saying what it stands
on instead. Nothing is ever silently off.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from watchdog import catalogue
from watchdog.detect import fallbacks as fb
from watchdog.detect.lang import Binary, Call, In, Name, Node, Num, Unary
from watchdog.detect.loader import Rule
from watchdog.detect.prune import (
    FLAG_SOURCE,
    SIGNAL_SOURCE,
    never_true,
    simplify,
    with_presence,
)
from watchdog.detect.signal_names import CHAINED_SIGNALS, DEPENDS, FLAG_SIGNALS
from watchdog.records import DeviceInfo

# words for a metric a rule needs
_WHAT = {"clocks_event_reasons.active": "no clock-event reasons column",
         "xid": "no XID events in this log (NVML events or kernel log)",
         "lost": "no lost marks"}


@dataclass(frozen=True)
class Note:
    """``rule`` could not judge the log (``judged`` False) or judged it on a fallback
    (True); ``text`` says why or on what. ``since``: where what the rule needed was
    learned from the data, per GPU index the time (POSIX s) from which it could judge
    that GPU (inf: never); empty when the note holds for the whole log."""

    rule: str
    judged: bool
    text: str
    since: tuple[tuple[int, float], ...] = ()

    def judged_at(self, gpu: int, t: float) -> bool:
        """Whether the rule could judge GPU ``gpu`` at time ``t`` (POSIX s)."""
        if not self.judged:
            return False
        return all(t >= at for g, at in self.since if g == gpu)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"rule": self.rule, "judged": self.judged,
                                  "note": self.text}
        if self.since:
            from watchdog.incident import iso

            out["since"] = {str(g): (None if math.isinf(t) else iso(t))
                            for g, t in self.since}
        return out


def _sources(metrics: frozenset[str], devices: Sequence[DeviceInfo]) -> dict[str, tuple]:
    """Per chained signal: ``(code, value, name)`` of the first source this log offers
    (code NaN when none; the first GPU that has one decides)."""
    out: dict[str, tuple] = {}

    def pick(sig: str, steps: list[tuple[int, bool, float]]) -> None:
        for code, ok, value in steps:
            if ok:
                out[sig] = (float(code), value, name)
                return
        out.setdefault(sig, (math.nan, math.nan, name))

    for d in devices or [DeviceInfo(index=0, uuid="?")]:
        name = d.name
        model = catalogue.gpu_model(name)

        def fig(field: str, m: catalogue.GpuFigures | None = model) -> float:
            v = getattr(m, field) if m is not None else None
            return math.nan if v is None else float(v)

        dev = [(fb.LIMIT_DRIVER, d.power_limit_enforced_w), (fb.LIMIT_DEFAULT,
               d.power_limit_default_w), (fb.LIMIT_MAX, d.power_limit_max_w)]
        pick("power_limit_w", [(fb.LIMIT_COLUMN, "enforced.power.limit" in metrics, math.nan),
                               *[(c, bool(v), float(v or 0)) for c, v in dev],
                               (fb.LIMIT_CATALOGUE, not math.isnan(fig("tdp_w")),
                                fig("tdp_w"))])
        pick("mem_total_mib", [(fb.TOTAL_COLUMN, "memory.total" in metrics, math.nan),
                               (fb.TOTAL_DRIVER, bool(d.memory_total_mib), math.nan),
                               (fb.TOTAL_USED_FREE, "memory.free" in metrics, math.nan),
                               (fb.TOTAL_CATALOGUE, not math.isnan(fig("memory_mib")),
                                fig("memory_mib"))])
        pick("temp_limit_c", [(fb.TLIM_COLUMN, {"temperature.gpu", "temperature.gpu.tlimit"}
                               <= metrics, math.nan),
                              (fb.TLIM_MAX_OPERATING, bool(d.temp_max_operating_c),
                               float(d.temp_max_operating_c or 0)),
                              (fb.TLIM_SLOWDOWN, bool(d.temp_slowdown_c),
                               float(d.temp_slowdown_c or 0)),
                              (fb.TLIM_CATALOGUE, not math.isnan(fig("max_operating_c")),
                               fig("max_operating_c"))])
        if all(not math.isnan(v[0]) for v in out.values()):
            break
    return out


def _as_logged(node: Node, have: frozenset[str], unknown: set[str]) -> Node:
    """``node`` with its ``present(x)`` tests decided for a log whose columns are filled:
    a metric (or a signal computed from one) the log has is present, a chained signal is
    present unless the log cannot give it; learned levels stay undecided."""
    def present(name: str) -> bool | None:
        if name in ("power_busy_w", "power_idle_w"):
            return None
        if name in CHAINED_SIGNALS:
            return name not in unknown
        src = _source_metric(name)
        return None if src is None else src in have

    return with_presence(node, present)


def _without(node: Node, missing: set[str]) -> Node:
    """``node`` with the signals in ``missing`` (and those computed from them) replaced
    by a missing value."""
    if isinstance(node, Name):
        gone = node.name in missing or any(d in missing for d in DEPENDS.get(node.name, ()))
        return Num(node.col, math.nan) if gone else node
    if isinstance(node, Unary):
        return Unary(node.col, node.op, _without(node.arg, missing))
    if isinstance(node, Binary):
        return Binary(node.col, node.op, _without(node.left, missing),
                      _without(node.right, missing))
    if isinstance(node, In):
        return In(node.col, _without(node.arg, missing), node.values)
    if isinstance(node, Call):
        return Call(node.col, node.fn, tuple(_without(a, missing) for a in node.args),
                    node.window)
    return node


def _reads(node: Node) -> set[str]:
    """Every name ``node`` reads."""
    out = {node.name} if isinstance(node, Name) else set()
    for c in (getattr(node, "args", None) or ()):
        out |= _reads(c)
    for attr in ("arg", "left", "right"):
        c = getattr(node, attr, None)
        if c is not None:
            out |= _reads(c)
    return out


def _source_metric(name: str) -> str | None:
    if name in catalogue.BY_NAME or name == "xid":
        return name
    if name in ("xid_count",):
        return "xid"
    return SIGNAL_SOURCE.get(name, FLAG_SOURCE if name in FLAG_SIGNALS else None)


def coverage(rules: Iterable[Rule], metrics: Iterable[str],
             devices: Sequence[DeviceInfo], interval: float | None = None,
             widened_to: float = 0.0) -> list[Note]:
    """The notes for a log with these ``metrics`` (catalogue names with data, plus
    ``"xid"`` when it has XID events) and ``devices``; ``widened_to`` (s): the width the
    engine widened short windows to for the log's sampling ``interval`` (0: none)."""
    have = frozenset(metrics)
    src = _sources(have, devices)
    unknown = {s for s, (code, _, _) in src.items() if math.isnan(code)}
    notes: list[Note] = []
    if widened_to and interval:
        notes.append(Note("*", True, f"sampled every {interval:g} s: windows shorter "
                                     f"than {widened_to:g} s widened to {widened_to:g} s, so a "
                                     f"fault shorter than {widened_to:g} s plus its rule's for: "
                                     f"is not paged"))
    for r in rules:
        cond = _without(r.condition, unknown)
        if never_true(cond, have):
            notes.append(Note(r.name, False, _why(r.condition, have, unknown)))
            continue
        simple = simplify(_as_logged(cond, have, unknown), have)
        reads = _reads(simple)
        deps = set(reads)
        for n in list(reads):
            deps.update(DEPENDS.get(n, ()))
            for d in DEPENDS.get(n, ()):
                deps.update(DEPENDS.get(d, ()))
        said = []
        if _reads(r.condition) & set(FLAG_SIGNALS) \
                and FLAG_SOURCE not in have and "temperature.gpu" in reads:
            said.append("no clock-event reasons column: judged from temperature and power")
        for sig in ("power_limit_w", "mem_total_mib", "temp_limit_c"):
            if sig not in deps:
                continue
            code, value, name = src[sig]
            if sig == "temp_limit_c" and math.isnan(code):
                said.append("no slowdown temperature known (no temperature.gpu.tlimit, no "
                            "GPU name the catalogue knows): judged against the temperatures "
                            "each GPU showed while working")
                continue
            if sig == "power_limit_w" and math.isnan(code):
                said.append("no power limit in this log and no GPU name the catalogue "
                            "knows: judged against the idle and busy levels learned from it "
                            "(idle taken as 15% of busy until an idle period is seen)")
                continue
            w = fb.words(sig, code, value, name)
            if w is not None:
                said.append(w.replace(f" {math.nan:.0f} MiB", "").replace("nan ", ""))
        for text in said:
            notes.append(Note(r.name, True, text))
    return notes


def _why(cond: Node, have: frozenset[str], unknown: set[str]) -> str:
    """The metrics whose column alone would let ``cond`` judge the log."""
    missing = sorted({m for n in _reads(cond) if (m := _source_metric(n)) is not None
                      and m not in have})
    free = _without(cond, unknown)
    alone = [m for m in missing if not never_true(free, have | {m})]
    parts = _columns(alone or missing)
    if alone:  # what else would do: two columns together
        rest = [m for m in missing if m not in alone]
        pairs = [(a, b) for i, a in enumerate(rest) for b in rest[i + 1:]
                 if not never_true(free, have | {a, b})]
        parts += [f"nor {a} and {b} columns to judge from instead" for a, b in pairs[:2]]
    if "mem_total_mib" in unknown and "memory.used" in have and any(
            n in _reads(cond) for n in ("mem_pct", "mem_total_mib")):
        parts.append("no memory.total or memory.free column and no GPU name the catalogue "
                     "knows")
    return "; ".join(parts) or "the log has none of the signals it reads"


def _columns(metrics: list[str]) -> list[str]:
    """Words for missing metrics: one each, or their families when there are many."""
    words = [_WHAT[m] for m in metrics if m in _WHAT]
    cols = [m for m in metrics if m not in _WHAT]
    if len(cols) > 2:
        fams = sorted({m.split(".")[0] for m in cols})
        names = [f"{f}.*" for f in fams]
        joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        return [*words, f"no {joined} columns"]
    if cols:
        words.append("no " + " or ".join(cols) + (" column" if len(cols) == 1
                                                  else " columns"))
    return words


#: A GPU first judged by the stall rule this long after it was first seen (s: the 10 min of
#: history it needs and one 15 s sample more) went unjudged for a while (it idled, or its
#: log has gaps): the notes say so.
STALL_HISTORY_SAID_S = 615.0


def late(rules: Iterable[Rule], metrics: Iterable[str], devices: Sequence[DeviceInfo],
         learned: dict[str, dict[str, float]]) -> list[Note]:
    """Notes on what the data taught too late or never, per GPU: with no power limit and
    no GPU name, the hang rule judges a GPU only once it has a busy level (or, with clocks
    logged, an idle level); with no slowdown temperature, the thermal rule only 10 min
    after the GPU was first seen working; the stall rule only once a GPU was seen working
    after 10 min of observing it. ``learned``: ``Detector.learned_since()``."""
    have = frozenset(metrics)
    src = _sources(have, devices)
    unknown = {s for s, (code, _, _) in src.items() if math.isnan(code)}
    out: list[Note] = []
    for r in rules:
        cond = _without(r.condition, unknown)
        if never_true(cond, have):
            continue
        reads = _reads(simplify(_as_logged(cond, have, unknown), have))
        per: dict[int, float] = {}
        what = ""
        levels = {"power_rel", "power_busy_w", "power_idle_w"}
        if ("power_limit_w" in unknown and reads & {"power_rel", "power_busy_w"}
                and never_true(_without(cond, unknown | levels), have)):
            # (a rule that still judges without the levels, as the straggler's
            # utilization test does, is not waiting for them)
            what = ("no power limit or GPU name: a GPU is judged once it ran busy (> 90 % "
                    "util for 30 s)"
                    + (" or idled with its clocks logged" if "clocks.sm" in have else ""))
            for v in learned.values():
                at = v["busy"]
                if "clocks.sm" in have and not math.isnan(v["idle"]):
                    at = v["idle"] if math.isnan(at) else min(at, v["idle"])
                per[int(v["index"])] = _from(at, v["last"])
        elif "temp_limit_c" in unknown and "temp_work_max_c" in reads:
            what = ("no reason bits and no slowdown temperature known: a GPU is judged from "
                    "10 min after it was first seen working")
            for v in learned.values():
                per[int(v["index"])] = _from(v["temp"], v["last"])
        elif "work_before_idle" in reads:
            what = ("a stall is judged on a GPU once it was seen working after 10 min of "
                    "observing it (a shorter history cannot tell steady work from a burst)")
            for v in learned.values():
                per[int(v["index"])] = _from(v["work"], v["last"])
        never = sorted(g for g, t in per.items() if math.isinf(t))
        if "work_before_idle" in reads and not never and not any(
                per[int(v["index"])] > v.get("seen", -math.inf) + STALL_HISTORY_SAID_S
                for v in learned.values()):
            # the stall rule's wait for history is said only when it mattered: a GPU that
            # was first judged well after its first 10 min (it idled, or its log began
            # with a short burst and then an idle gap that could not be judged)
            continue
        if not per:
            continue
        text = what + (f"; never on GPU {_gpus(never)}" if never else "")
        out.append(Note(r.name, len(never) < len(per), text, tuple(sorted(per.items()))))
    return out


def _from(at: float, last: float) -> float:
    """When a GPU could first be judged (inf: not before its last sample)."""
    return math.inf if math.isnan(at) or at > last else at


def _gpus(idx: list[int]) -> str:
    from watchdog.incident import gpu_list

    return gpu_list([str(i) for i in idx])


def merge(static: list[Note], later: list[Note]) -> list[Note]:
    """One log's notes: a rule that could judge no GPU at all (``later``) keeps only that
    note; the others keep both."""
    off = {n.rule for n in later if not n.judged}
    return [*(n for n in static if not (n.judged and n.rule in off)), *later]
