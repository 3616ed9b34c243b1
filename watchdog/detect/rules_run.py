"""Running the rules over a block: conditions → inhibition → alert states → incidents.

For each rule, in the rule set's order (every rule after those that inhibit it): the
condition and clear test are evaluated vectorised over the block (:mod:`evaluate`), per
GPU sample for ``scope: gpu`` rules or on the ticks × GPUs grid for ``scope: node``
rules; times an inhibiting rule was pending or firing are masked out; the rule's state
machines (:mod:`state`) turn that into incidents (:mod:`grouping`), reported to the
:class:`~watchdog.detect.ledger.Ledger`. Everything carried from block to block (windows,
alert states, how long each GPU's node condition has held) makes any split of the input
give the same incidents (block == tick).

Given which metrics will ever come, rules that cannot fire on them are left out and the
tests that are constant on them folded away (:mod:`prune`): same incidents, less work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

import watchdog.detect.rows as blockrows
from watchdog import catalogue
from watchdog.detect.engaged import EngagedTimeline
from watchdog.detect.evaluate import Evaluator, numeric, truth
from watchdog.detect.fallbacks import words
from watchdog.detect.grouping import add_members, make_incident, members, node_value
from watchdog.detect.intake import Gpu
from watchdog.detect.lang import Binary, Call, In, Name, Node, Unary, children
from watchdog.detect.learned import learn_windows, work_window
from watchdog.detect.ledger import Ledger
from watchdog.detect.loader import Rule, RuleSet
from watchdog.detect.machine import EntityState, Machine
from watchdog.detect.prune import never_true, simplify, with_presence
from watchdog.detect.signal_names import CHAINED_SIGNALS, DEPENDS, LEARNING_SIGNALS
from watchdog.detect.signals import Block
from watchdog.detect.waits import WaitLearner
from watchdog.incident import Incident
from watchdog.untyped import Array, JsonDoc

NODE = "node"  # the entity key of a node rule's state
_ANY = frozenset([*catalogue.NAMES, "xid"])  # live: any metric may come
HIDDEN = "§"  # evidence keys the engine adds for itself (sources of chained signals)
# a window shorter than this many sampling intervals holds a single sample: it widens to
# this many (two samples, whatever the jitter)
MIN_WINDOW_SAMPLES = 1.5


#: What a rule left in a block for the rules it inhibits: a gpu rule, the intervals each
#: GPU was engaged; a node rule, :data:`NodeRun`.
NodeRun = tuple[list[tuple[float, float]], Array, Array, list[str]]  # intervals, ticks, cond, GPUs
Active = dict[str, list[tuple[float, float]]] | NodeRun

class RuleRunner:
    """The rules of one detector, their windows and alert states, block after block."""

    def __init__(self, rules: RuleSet, host: str, max_gap: float,
                 metrics: frozenset[str] | None, ledger: Ledger,
                 interval: float | None = None) -> None:
        """``max_gap`` (s): see ``DetectorConfig``. ``metrics``: the only catalogue
        metrics that will ever come (None: any; nothing is pruned). ``interval`` (s): the
        input's sampling interval, when known: a window shorter than
        :data:`MIN_WINDOW_SAMPLES` intervals widens to that (it would hold one sample)."""
        self.rules = rules
        self.host = host
        self.ledger = ledger
        self.engaged = EngagedTimeline()  # when each GPU had a rule pending or firing
        self.pruned: set[str] = set() if metrics is None else {
            r.name for r in rules if never_true(r.condition, metrics)}
        live = [r for r in rules if r.name not in self.pruned]
        # conditions and clears with the tests that are constant on these metrics folded
        # away (their windows are then never declared); as written when metrics is None
        self._cond = {r.name: r.condition if metrics is None
                      else simplify(r.condition, metrics) for r in rules}
        self._clear = {r.name: r.clear if metrics is None or r.clear is None
                       else simplify(r.clear, metrics) for r in rules}
        self._evidence = {r.name: dict(r.evidence) for r in rules}
        # sparse sampling: windows too short to hold two samples widen
        self.widened_to = (MIN_WINDOW_SAMPLES * interval
                           if interval is not None and interval > 0 else 0.0)
        self.widened: dict[str, float] = {}
        if self.widened_to:
            for r in rules:
                got = [_widen(n, self.widened_to) if n is not None else (None, False)
                       for n in (self._cond[r.name], self._clear[r.name])]
                ev = {k: _widen(n, self.widened_to) for k, n in r.evidence.items()}
                if any(w for _, w in [*got, *ev.values()]) and r.name not in self.pruned:
                    self.widened[r.name] = self.widened_to
                self._cond[r.name] = got[0][0] or self._cond[r.name]
                self._clear[r.name] = got[1][0]
                self._evidence[r.name] = {k: n for k, (n, _) in ev.items()}
        # the sources of the chained signals a condition reads (pages say when they fell
        # back): hidden evidence, per GPU
        self._chained = {r.name: _chained(self._cond[r.name]) for r in rules}
        self._metrics = metrics
        # gpu rules read them at the firing sample (with the evidence); node rules from
        # each GPU's latest sample at the firing tick, carried across blocks (a grid of
        # them in every block would cost as much as a rule)
        self._hidden = {r.name: {f"{HIDDEN}{part}:{sig}": Name(0, sig + suffix)
                                 for sig in self._chained[r.name]
                                 for part, suffix in (("src", "#src"), ("val", ""))}
                        for r in rules}
        self._hidden_last: dict[tuple[str, str], float] = {}
        for r in rules:
            if r.scope == "gpu":
                self._evidence[r.name].update(self._hidden[r.name])
        self._ev = Evaluator(max_gap)
        for r in live:  # every window is known before the first block
            for node in (self._cond[r.name], self._clear[r.name],
                         *self._evidence[r.name].values()):
                if node is not None:
                    self._ev.declare(node)
        for node in learn_windows():
            self._ev.declare(node)
        if any("work_before_idle" in _names(self._cond[r.name]) for r in live):
            for node in work_window():
                self._ev.declare(node)
        self.machines = {r.name: Machine(r.for_s, r.keep_firing_for, r.learned)
                         for r in rules}
        # gpu rules whose clear test may be left out of a block that cannot use it
        self._lazy_clear = {r.name for r in rules if r.scope == "gpu"
                            and (c := self._clear[r.name]) is not None and not _learns(c)}
        # learned levels advance in every block, whether or not a rule's expression
        # reached them (an and/or may skip its right side for a whole block)
        self._learning = sorted({n for r in live for node in
                                 (self._cond[r.name], self._clear[r.name],
                                  *self._evidence[r.name].values())
                                 if node is not None for n in _names(node)
                                 if n in LEARNING_SIGNALS})
        # node rules: since when each GPU's own condition has held (to join a firing node
        # incident a GPU must hold it for the incident's `for:` too), carried across blocks
        self._held_since: dict[str, dict[str, float]] = {r.name: {} for r in rules}
        self._dropped = 0

    def learners(self) -> dict[str, WaitLearner]:
        """The learned ``for:`` of every rule that has one, by rule name."""
        return {n: m.learner for n, m in self.machines.items() if m.learner}

    def run(self, block: Block, gpus: Mapping[str, Gpu], dropped_samples: int) -> None:
        """Every rule over ``block``; ``gpus`` are the known GPUs by UUID in (index, UUID)
        order; ``dropped_samples`` so far go into the evidence of incidents that fire."""
        self._dropped = dropped_samples
        block.evaluator = self._ev
        ticks = blockrows.ticks(block)
        slots = [(uuid, g.slot) for uuid, g in gpus.items()]
        active: dict[str, Active] = {}
        for rule in self.rules:
            if rule.name in self.pruned:  # cannot fire on these metrics: no incidents
                continue
            if rule.scope == "gpu":
                active[rule.name] = self._run_gpu_rule(rule, block, gpus, active)
            else:
                active[rule.name] = self._run_node_rule(rule, ticks, slots, gpus, block,
                                                        active)
        for name in self._learning:
            block.value(name)
        self._ev.end_block(block)
        if len(ticks):
            self.engaged.evaluated(float(ticks[-1]))

    def engaged_gpus(self) -> set[str]:
        """UUIDs where any rule is pending or firing now."""
        out: set[str] = set()
        for name, machine in self.machines.items():
            for key, st in machine.states.items():
                if st.phase == "inactive":
                    continue
                if st.incident is not None:
                    out.update(st.incident.uuids)
                if key != NODE:
                    out.add(key)
                else:
                    out.update(self._held_since.get(name, {}))
        return out

    # --- one rule -----------------------------------------------------------------------
    def _inhibit_mask(self, rule: Rule, uuid: str, times: Array,
                      active: dict[str, Active]) -> Array:
        mask = np.zeros(len(times), bool)
        for inh in self.rules.inhibitors(rule):
            got = active.get(inh.name)
            if got is None:
                continue
            if isinstance(got, dict):  # a gpu rule's intervals by GPU
                mask |= blockrows.covered(got.get(uuid, []), times)
            else:
                intervals, ticks, condm, gpus = got
                if uuid not in gpus:
                    continue
                ti = np.clip(np.searchsorted(ticks, times), 0, len(ticks) - 1)
                mask |= blockrows.covered(intervals, times) & condm[ti, gpus.index(uuid)]
        return mask

    def _hidden_at(self, rule: Rule, b: Block, g: Gpu, tick: float) -> dict[str, float]:
        """A node rule's hidden evidence for GPU ``g`` at ``tick``: from its latest sample
        at or before it in ``b``, else as carried from the blocks before."""
        lo, hi = int(b.offsets[g.slot]), int(b.offsets[g.slot + 1])
        at = lo + int(np.searchsorted(b.ts[lo:hi], tick, side="right")) - 1
        if at >= lo:
            return {k: float(numeric(self._ev.sample(n, b))[at])
                    for k, n in self._hidden[rule.name].items()}
        return {k: self._hidden_last.get((k, g.uuid), math.nan)
                for k in self._hidden[rule.name]}

    def _carry_hidden(self, rule: Rule, b: Block, gpus: Mapping[str, Gpu]) -> None:
        """Keep each GPU's latest hidden evidence of a node rule for the next blocks."""
        for k, n in self._hidden[rule.name].items():
            vals = None
            for uuid, g in gpus.items():
                hi = int(b.offsets[g.slot + 1]) if g.slot < b.n_slots else 0
                if hi > (int(b.offsets[g.slot]) if g.slot < b.n_slots else 0):
                    if vals is None:
                        vals = numeric(self._ev.sample(n, b))
                    self._hidden_last[(k, uuid)] = float(vals[hi - 1])

    def _chained_at(self, rule: Rule, b: Block, at: int) -> list[str]:
        """The chained signals the condition of a ``gpu`` rule reads at sample ``at`` of
        ``b``, given which of its ``present(x)`` tests hold there: a branch for logs
        without reason bits says nothing when the bits decided."""
        def here(n: str) -> bool:
            return bool(not np.isnan(numeric(self._ev.sample(Name(0, n), b))[at]))

        cond = with_presence(self._cond[rule.name], here)
        # a metric the condition reads that the GPU did not report at this sample decided
        # nothing there: folded as missing, so a log without the column and the live
        # agent (which cannot know the columns in advance) name the same fallbacks
        read = _names(cond)
        base = self._metrics if self._metrics is not None else _ANY
        return _chained(simplify(cond, [m for m in base
                                        if m not in read or m == "xid" or here(m)]))

    def _extra(self, rule: Rule, st: EntityState, hidden: dict[str, float],
               name: str | None, used: list[str] | None = None) -> JsonDoc:
        """What the engine adds to an incident's evidence: the ``for`` used and what was
        learned for it, dropped samples, the fallbacks its condition used on the GPU
        called ``name`` (``hidden``: the sources and values of its chained signals there)
        and the width sparse sampling widened its windows to."""
        extra: JsonDoc = {"for_s": st.for_used}
        m = self.machines[rule.name]
        if m.learner is not None:
            extra["learned_longest_s"] = m.learner.longest
            extra["learned_episodes"] = m.learner.episodes
        if self._dropped:
            extra["dropped_samples"] = self._dropped
        notes = [w for sig in (self._chained[rule.name] if used is None else used)
                 if (w := words(sig, hidden[f"{HIDDEN}src:{sig}"],
                                hidden[f"{HIDDEN}val:{sig}"], name)) is not None]
        if notes:
            extra["fallbacks"] = notes
        if rule.name in self.widened:
            extra["windows_widened_to_s"] = self.widened[rule.name]
        return extra

    def _resolve(self, t: float, st: EntityState) -> None:
        assert st.incident is not None  # resolved only what fired
        self.ledger.resolved(t, st.incident)

    def _run_gpu_rule(self, rule: Rule, b: Block, gpus: Mapping[str, Gpu],
                      active: dict[str, Active]) -> dict[str, list[tuple[float, float]]]:
        ev = self._ev
        cond_all = truth(ev.sample(self._cond[rule.name], b))
        # the clear test is read only while an incident fires: with none firing as the
        # block starts and the condition false throughout, none fires in it either
        machine = self.machines[rule.name]
        need_clear = rule.clear is not None and (
            rule.name not in self._lazy_clear or bool(cond_all.any())
            or any(st.phase == "firing" for st in machine.states.values()))
        clear = self._clear[rule.name]
        clr_all = truth(ev.sample(clear, b)) if need_clear and clear is not None else None
        evid: dict[str, Array] = {}  # computed when an incident fires in this block
        inputs = []
        for uuid, g in gpus.items():
            lo, hi = int(b.offsets[g.slot]), int(b.offsets[g.slot + 1])
            if hi == lo:
                continue
            ts = b.ts[lo:hi]
            cond = cond_all[lo:hi]
            if rule.inhibited_by and cond.any():  # (nothing to inhibit otherwise)
                cond = cond & ~self._inhibit_mask(rule, uuid, ts, active)
            clr = clr_all[lo:hi] if clr_all is not None else ~cond
            inputs.append((uuid, ts, cond, clr))

        def on_fire(uuid: str, i: int, st: EntityState) -> Incident:
            g = gpus[uuid]
            at = int(b.offsets[g.slot]) + i
            if not evid:
                evid.update({k: numeric(ev.sample(n, b))
                             for k, n in self._evidence[rule.name].items()})
            vals = {k: float(a[at]) for k, a in evid.items() if not k.startswith(HIDDEN)}
            hidden = {k: float(a[at]) for k, a in evid.items() if k.startswith(HIDDEN)}
            used = self._chained_at(rule, b, at)
            return self.ledger.fired(make_incident(rule, self.host, [(g.index, uuid)],
                                                   st.since, float(b.ts[at]), vals,
                                                   self._extra(rule, st, hidden,
                                                               g.device.name, used)))

        out = machine.run(inputs, on_fire, lambda _k, t, st: self._resolve(t, st))
        for uuid, spans in out.items():
            for since, end in spans:
                self.engaged.episode(rule.name, uuid, since, end)
        return out

    def _run_node_rule(self, rule: Rule, ticks: Array, slots: list[tuple[str, int]],
                       gpus: Mapping[str, Gpu], b: Block, active: dict[str, Active]
                       ) -> NodeRun:
        ev = self._ev
        cache = b.grid_cache  # shared by the node rules of the block (same ticks, GPUs)
        condm = truth(ev.grid(self._cond[rule.name], ticks, slots, b, cache))
        if rule.inhibited_by:
            condm = condm.copy()  # the grid cache may hold this very array
            for j, (uuid, _slot) in enumerate(slots):
                condm[:, j] &= ~self._inhibit_mask(rule, uuid, ticks, active)
        cond = np.asarray(condm.any(axis=1))
        clear = self._clear[rule.name]
        if clear is not None:
            cm = truth(ev.grid(clear, ticks, slots, b, cache))
            present = ev.present(ticks, slots, b, cache)
            clr = np.asarray((cm | ~present).all(axis=1) & present.any(axis=1))
        else:
            clr = ~cond
        evid = {k: numeric(ev.grid(n, ticks, slots, b, cache))
                for k, n in self._evidence[rule.name].items()}

        uuids = [u for u, _ in slots]
        machine = self.machines[rule.name]
        carried = machine.states.get(NODE)
        firing = [carried.incident] if carried is not None and carried.phase == "firing" \
            and carried.incident is not None else []

        def on_fire(_key: str, i: int, st: EntityState) -> Incident:
            row = condm[i]
            vals = {k: node_value(a[i], row) for k, a in evid.items()
                    if not k.startswith(HIDDEN)}
            first = int(np.argmax(row))  # the sources as the first member GPU saw them
            hidden = self._hidden_at(rule, b, gpus[uuids[first]], float(ticks[i]))
            who = [(gpus[u].index, u) for u in members(row, uuids)]
            name = gpus[uuids[first]].device.name
            inc = self.ledger.fired(make_incident(rule, self.host, who, st.since,
                                                  float(ticks[i]), vals,
                                                  self._extra(rule, st, hidden, name)))
            firing.append(inc)
            return inc

        out = machine.run([(NODE, ticks, cond, clr)], on_fire,
                          lambda _k, t, st: self._resolve(t, st))
        self._carry_hidden(rule, b, gpus)
        if out[NODE] or self.engaged.carries(rule.name):  # each GPU holding it meanwhile
            on = blockrows.covered(out[NODE], ticks)
            self.engaged.node_runs(rule.name, ticks, condm & on[:, None], uuids)
        held_for = self._held_durations(rule.name, ticks, condm, uuids, full=bool(firing))
        for inc in firing:  # GPUs that join while it fires are listed too (one event) once
            # their own condition has held as long as the incident's `for:` (a rank 0 that
            # dips for one checkpoint does not join a straggler incident)
            end = math.inf if inc.resolved_at is None else inc.resolved_at
            during = (ticks >= (inc.fired_at or 0.0)) & (ticks < end)
            need = float(inc.evidence.get("for_s") or 0.0)
            held = np.asarray((condm & (held_for >= need))[during].any(axis=0))
            joined = members(held, uuids)
            add_members(inc, [(gpus[u].index, u) for u in joined])
        return (out[NODE], ticks, condm, uuids)

    def _held_durations(self, name: str, ticks: Array, condm: Array,
                        uuids: list[str], full: bool = True) -> Array:
        """Seconds each GPU's condition has held at each tick (0 where it does not hold).

        ``condm`` is ticks x GPUs; the start of a run still holding at the end of the block
        is carried to the next block, so any split of the input gives the same numbers.
        Without ``full`` (no incident fires in the block) only that carry is updated (from
        the last tick's row, no ticks x GPUs arithmetic) and an empty matrix returned.
        """
        since = self._held_since[name]
        n, k = len(ticks), len(uuids)
        if n == 0 or k == 0:
            return np.zeros(condm.shape, dtype=np.float64)
        before = np.array([since.get(u, ticks[0]) for u in uuids], dtype=np.float64)
        if full:
            idx = np.arange(n)[:, None]
            last_false = np.maximum.accumulate(np.where(condm, -1, idx), axis=0)
            first = ticks[np.minimum(last_false + 1, n - 1)]
            start = np.where(last_false >= 0, first, before[None, :])
            out = np.where(condm, ticks[:, None] - start, 0.0)
            end_start = start[-1]
        else:
            out = np.zeros((0, k), dtype=np.float64)
            off = ~condm
            any_off = off.any(axis=0)
            last_off = np.where(any_off, n - 1 - np.argmax(off[::-1], axis=0), -1)
            end_start = np.where(last_off >= 0, ticks[np.minimum(last_off + 1, n - 1)], before)
        for j, u in enumerate(uuids):
            if condm[-1, j]:
                since[u] = float(end_start[j])
            else:
                since.pop(u, None)
        return out


def _learns(node: Node) -> bool:
    """Whether the expression names a signal that advances learned state."""
    if isinstance(node, Name) and node.name in LEARNING_SIGNALS:
        return True
    return any(_learns(c) for c in children(node))


def _chained(node: Node) -> list[str]:
    """The chained signals (:data:`CHAINED_SIGNALS`) ``node`` reads, directly or through
    the signals it names, in their order."""
    todo, seen = list(_names(node)), set()
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(DEPENDS.get(n, ()))
    return [s for s in CHAINED_SIGNALS if s in seen]


def _widen(node: Node, width: float) -> tuple[Node, bool]:
    """``node`` with every window shorter than ``width`` (s) widened to it, and whether
    any was."""
    if isinstance(node, Call):
        args = [_widen(a, width) for a in node.args]
        changed = any(c for _, c in args)
        win = node.window
        if win is not None and win < width:
            win, changed = width, True
        if not changed:
            return node, False
        return Call(node.col, node.fn, tuple(a for a, _ in args), win), True
    if isinstance(node, Binary):
        (left, a), (right, b) = _widen(node.left, width), _widen(node.right, width)
        return (Binary(node.col, node.op, left, right), True) if a or b else (node, False)
    if isinstance(node, Unary):
        arg, a = _widen(node.arg, width)
        return (Unary(node.col, node.op, arg), True) if a else (node, False)
    if isinstance(node, In):
        arg, a = _widen(node.arg, width)
        return (In(node.col, arg, node.values), True) if a else (node, False)
    return node, False


def _names(node: Node) -> set[str]:
    """Every metric or signal name in an expression."""
    out = {node.name} if isinstance(node, Name) else set()
    for c in children(node):
        out |= _names(c)
    return out
