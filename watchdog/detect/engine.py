"""The Detector: samples in, incidents out, identically in block (replay) and tick (live) mode.

Each block of samples goes: per-GPU arrays (out-of-order rows dropped) → derived signals
and windows (:mod:`signals`, :mod:`windows`) → every rule's condition, vectorised
(:mod:`evaluate`) → inhibition masks → alert states (:mod:`state`) → incidents
(:mod:`grouping`). Time comes only from the data. See ``docs/rules.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from watchdog import catalogue
from watchdog.detect import rows as blockrows
from watchdog.detect.evaluate import Evaluator, numeric, truth
from watchdog.detect.grouping import add_members, make_incident, members, node_value
from watchdog.detect.lang import Name, children
from watchdog.detect.loader import Rule, RuleSet
from watchdog.detect.presence import vanish_times
from watchdog.detect.prune import never_true, simplify
from watchdog.detect.signals import LEARNING_SIGNALS, Block, Learned, learn_windows
from watchdog.detect.state import EntityState, Machine
from watchdog.incident import Incident
from watchdog.model import DeviceInfo, Sample, XidEvent

NODE = "node"
# Rows processed at once: bounds the node grid (ticks × GPUs) when every GPU has its own
# timestamps. Splitting never changes results (block == tick).
MAX_BLOCK_ROWS = 131_072
# Live agent: seconds of data time between evaluations of healthy ticks (feed_tick). Five
# 1 s ticks in one block cost about a quarter of five single-tick evaluations (numpy's fixed
# cost per rule per window); alerts come at most this much later, urgent ticks at once.
LIVE_TICK_BATCH_S = 5.0


@dataclass(frozen=True)
class DetectorConfig:
    """Engine settings. ``max_gap`` (s): longest interval a sample's weight covers, and
    how old a GPU's latest sample may be before node rules treat it as missing.
    ``learn_power_levels``: learn each GPU's idle and busy power from the data (False: the
    fallbacks only, for a burst too short to hold any history; see ``signals.Learned``)."""

    max_gap: float = 30.0
    learn_power_levels: bool = True


@dataclass
class _Gpu:
    index: int
    uuid: str
    device: DeviceInfo
    slot: int  # position in the concatenated per-block arrays (append-only)
    last_ts: float = math.nan


class Detector:
    """Runs a :class:`RuleSet` over samples of one host's GPUs. See ``docs/rules.md``."""

    def __init__(self, rules: RuleSet | Sequence[Rule], host: str,
                 devices: Sequence[DeviceInfo], config: DetectorConfig | None = None,
                 metrics: Iterable[str] | None = None, *, tick_batch_s: float = 0.0) -> None:
        """``tick_batch_s``: live evaluation batching, see :meth:`feed_tick`.

        ``metrics``: the only catalogue metrics that will ever be fed (a recording's
        columns, plus ``"xid"`` when it has XID events), or None (live: any). With them,
        rules that cannot fire without the others are left out
        (:mod:`~watchdog.detect.prune`): same incidents, less work."""
        self.rules = rules if isinstance(rules, RuleSet) else RuleSet(list(rules))
        self.host = host
        self.config = config or DetectorConfig()
        self._metrics = None if metrics is None else frozenset(metrics)
        self._pruned = set() if self._metrics is None else {
            r.name for r in self.rules if never_true(r.condition, self._metrics)}
        live = [r for r in self.rules if r.name not in self._pruned]
        # conditions and clears with the tests that are constant on these metrics folded
        # away (their windows are then never declared); as written when metrics is None
        self._cond = {r.name: r.condition if self._metrics is None
                      else simplify(r.condition, self._metrics) for r in self.rules}
        self._clear = {r.name: r.clear if self._metrics is None or r.clear is None
                       else simplify(r.clear, self._metrics) for r in self.rules}
        self._ev = Evaluator(self.config.max_gap)
        for r in live:  # every window is known before the first block
            for node in (self._cond[r.name], self._clear[r.name], *r.evidence.values()):
                if node is not None:
                    self._ev.declare(node)
        for node in learn_windows():
            self._ev.declare(node)
        self._gpus: dict[str, _Gpu] = {}
        self._slots: list[_Gpu] = []
        self._learned = Learned(self.config.learn_power_levels)
        for d in devices:
            self._add_gpu(d.uuid, d.index, d)
        self._machines = {r.name: Machine(r.for_s, r.keep_firing_for, r.learned)
                          for r in self.rules}
        self._order = {r.name: i for i, r in enumerate(self.rules)}
        # gpu rules whose clear test may be left out of a block that cannot use it
        self._lazy_clear = {r.name for r in self.rules if r.scope == "gpu"
                            and r.clear is not None and not _learns(self._clear[r.name])}
        # learned levels advance in every block, whether or not a rule's expression
        # reached them (an and/or may skip its right side for a whole block)
        self._learning = sorted({n for r in live for node in
                                 (self._cond[r.name], self._clear[r.name],
                                  *r.evidence.values())
                                 if node is not None for n in _names(node)
                                 if n in LEARNING_SIGNALS})
        # node rules: since when each GPU's own condition has held (to join a firing node
        # incident a GPU must hold it for the incident's `for:` too), carried across blocks
        self._held_since: dict[str, dict[str, float]] = {r.name: {} for r in self.rules}
        self._incidents: list[Incident] = []
        self._transitions: list[tuple[float, str, Incident]] = []
        self._held: dict[str, np.ndarray] | None = None
        self._xids: list[XidEvent] = []
        self._last_tick = -math.inf
        self.dropped_samples = 0
        # live batching (feed_tick): seconds of data time between evaluations; 0 = every tick
        self.tick_batch_s = tick_batch_s
        self._pending: list[Sample] = []
        self._evaluated_at = -math.inf

    # --- public API -------------------------------------------------------------------
    def feed_frame(self, frame: Any, xids: Iterable[XidEvent] = (), *,
                   complete: bool = False) -> None:
        """A block of ticks (the replay frame contract; see the module docs of replay).

        The rows of the frame's last timestamp are held back until later input arrives,
        unless the caller says the frame is ``complete``: it ends on a tick boundary (any
        later frame starts at a later time), as replay cuts its blocks. The incidents are
        the same either way; holding costs a copy of the whole next block.
        """
        cols: dict[str, np.ndarray] = {
            "ts": frame["ts"].to_numpy(dtype=np.float64),
            "uuid": frame["uuid"].to_numpy(dtype=object),
            "index": frame["index"].to_numpy(dtype=np.int64),
            "lost": (frame["lost"].to_numpy(dtype=bool) if "lost" in frame.columns
                     else np.zeros(len(frame), bool)),
        }
        for c in frame.columns:
            if c in catalogue.BY_NAME:
                cols[c] = frame[c].to_numpy(dtype=np.float64)
        xids = list(xids)
        if xids and self._metrics is not None and "xid" not in self._metrics:
            raise ValueError("XID events were not announced (metrics without 'xid')")
        self._xids.extend(xids)
        self._feed(cols, hold=not complete)

    def feed_tick(self, ts: float, samples: Sequence[Sample]) -> None:
        """One live reading of every GPU at time ``ts`` (s); XIDs ride on the samples.

        With ``tick_batch_s`` > 0 healthy ticks are buffered and evaluated together once
        ``tick_batch_s`` seconds of data time have passed since the last evaluation (one
        block of several ticks: the same incidents as tick by tick, since block == tick,
        at a fraction of the per-tick numpy overhead). A tick with an XID, a lost GPU, an
        NVML error or a GPU not seen before is evaluated at once, with what is buffered.
        """
        for s in samples:
            if s.xids and self._metrics is not None and "xid" not in self._metrics:
                raise ValueError("XID events were not announced (metrics without 'xid')")
        if not samples:
            return
        self._pending.extend(samples)
        urgent = any(s.xids or s.lost or s.errors or s.uuid not in self._gpus
                     for s in samples)
        if urgent or ts >= self._evaluated_at + self.tick_batch_s:
            self.flush_ticks()
            self._evaluated_at = ts

    @property
    def pending_ticks(self) -> int:
        """Samples fed with :meth:`feed_tick` and not evaluated yet (see ``tick_batch_s``)."""
        return len(self._pending)

    def flush_ticks(self) -> None:
        """Evaluate every buffered live sample now (one block)."""
        samples, self._pending = self._pending, []
        if not samples:
            return
        cols: dict[str, np.ndarray] = {
            "ts": np.array([s.ts for s in samples], dtype=np.float64),
            "uuid": np.array([s.uuid for s in samples], dtype=object),
            "index": np.array([s.index for s in samples], dtype=np.int64),
            "lost": np.array([s.lost for s in samples], dtype=bool),
        }
        seen: set[str] = set()
        for s in samples:
            seen.update(s.values)
        names = sorted(k for k in seen if k in catalogue.BY_NAME)
        if names:  # one 2-D conversion (None -> NaN), not one list per metric
            grid = np.array([list(map(s.values.get, names)) for s in samples],
                            dtype=np.float64).T.copy()
            cols.update(zip(names, grid, strict=True))
        for s in samples:
            self._xids.extend(s.xids)
        self._feed(cols, hold=False)

    @property
    def incidents(self) -> list[Incident]:
        """Every incident that fired so far, by ``started_at``."""
        return sorted(self._incidents, key=self._sort_key)

    def drain(self) -> list[tuple[str, Incident]]:
        """Transitions since the last drain, in time order: ("firing"|"resolved", inc)."""
        out = sorted(self._transitions, key=lambda t: t[0])
        self._transitions = []
        return [(what, inc) for _, what, inc in out]

    def engaged_gpus(self) -> set[str]:
        """UUIDs where any rule is pending or firing now (the anomaly model stays quiet
        there: what a rule is about to name is the rule's)."""
        out: set[str] = set()
        for name, machine in self._machines.items():
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

    def finish(self) -> list[Incident]:
        """End of input: process held rows; active incidents keep ``resolved_at=None``."""
        self.flush_ticks()
        self._flush()
        return self.incidents

    def learned_state(self) -> dict[str, dict[str, Any]]:
        """Learned ``for:`` state per rule (JSON-ready), for persistence (buffered live
        ticks are evaluated first)."""
        self.flush_ticks()
        return {n: m.learner.to_dict() for n, m in self._machines.items() if m.learner}

    def load_learned_state(self, state: dict[str, dict[str, Any]]) -> None:
        """Restore :meth:`learned_state` output (unknown rules are ignored)."""
        for name, d in state.items():
            m = self._machines.get(name)
            if m is not None and m.learner is not None:
                m.learner.load(d)

    def learned_levels(self) -> dict[str, dict[str, float | None]]:
        """Each GPU's learned idle and busy power (W) and highest SM clock seen (MHz), by
        UUID (None where nothing was learned yet), for persistence."""
        self.flush_ticks()
        lr = self._learned
        lr.grow(len(self._slots))
        return {g.uuid: {"idle_w": _opt(lr.idle_w[g.slot]), "busy_w": _opt(lr.busy_w[g.slot]),
                         "max_sm_mhz": _opt(lr.max_sm_mhz[g.slot])} for g in self._slots}

    def load_learned_levels(self, levels: dict[str, dict[str, float | None]]) -> None:
        """Restore :meth:`learned_levels` output for the GPUs this detector knows (by UUID;
        others are ignored). Call before the first sample: learning goes on from there."""
        lr = self._learned
        lr.grow(len(self._slots))
        for g in self._slots:
            lv = levels.get(g.uuid)
            if not lv:
                continue
            for key, arr in (("idle_w", lr.idle_w), ("busy_w", lr.busy_w),
                             ("max_sm_mhz", lr.max_sm_mhz)):
                v = lv.get(key)
                if v is not None and math.isfinite(v):
                    arr[g.slot] = float(v)

    def forget_resolved(self) -> int:
        """Drop resolved incidents from memory (a daemon running for months keeps only
        what is active; the state database has the history). Returns how many."""
        keep = [inc for inc in self._incidents if inc.resolved_at is None]
        n = len(self._incidents) - len(keep)
        self._incidents = keep
        return n

    # --- input handling -----------------------------------------------------------------
    def _sort_key(self, inc: Incident) -> tuple[float, float, int, int]:
        return (inc.started_at, inc.fired_at or 0.0, self._order.get(inc.rule, 0),
                int(inc.gpus[0]) if inc.gpus else -1)

    def _add_gpu(self, uuid: str, index: int, device: DeviceInfo | None = None) -> _Gpu:
        g = _Gpu(index, uuid, device or DeviceInfo(index=index, uuid=uuid), len(self._slots))
        self._slots.append(g)
        self._gpus[uuid] = g
        self._gpus = dict(sorted(self._gpus.items(), key=lambda kv: (kv[1].index, kv[0])))
        return g

    def _feed(self, cols: dict[str, np.ndarray], hold: bool) -> None:
        if self._metrics is not None:
            extra = [k for k in cols if k in catalogue.BY_NAME and k not in self._metrics]
            if extra:  # a pruned rule might have fired on it
                raise ValueError(f"metric {extra[0]!r} was not among the announced ones")
        ts = cols["ts"]
        # rows earlier than an earlier row (time going backwards) or at a tick already
        # processed are dropped
        base = self._last_tick
        held_ts = self._held["ts"][0] if self._held is not None else -math.inf
        prev = np.maximum.accumulate(np.concatenate(([max(base, held_ts)], ts)))[:-1]
        ok = (ts >= prev) & (ts > base) & ~np.isnan(ts)
        if not ok.all():
            self.dropped_samples += int((~ok).sum())
            cols = {k: v[ok] for k, v in cols.items()}
            ts = cols["ts"]
        if not len(ts):
            return
        if self._held is not None:  # the held tick is complete or continues: process it
            cols = blockrows.concat(self._held, cols)  # with these rows, as one block
            self._held = None
            ts = cols["ts"]
        if hold:
            cut = int(np.searchsorted(ts, ts[-1], side="left"))
            self._held = {k: v[cut:] for k, v in cols.items()}
            cols = {k: v[:cut] for k, v in cols.items()}
        ts = cols["ts"]
        start = 0
        while start < len(ts):  # bounded blocks (memory of the node grid), cut at ticks
            end = min(start + MAX_BLOCK_ROWS, len(ts))
            if end < len(ts):
                end = max(int(np.searchsorted(ts, ts[end], side="left")), start + 1)
                end = int(np.searchsorted(ts, ts[end - 1], side="right"))
            self._process({k: v[start:end] for k, v in cols.items()})
            start = end

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._process(held)

    # --- one block ----------------------------------------------------------------------
    def _process(self, cols: dict[str, np.ndarray]) -> None:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            self._process_block(cols)

    def _process_block(self, cols: dict[str, np.ndarray]) -> None:
        self._last_tick = max(self._last_tick, float(cols["ts"][-1]))
        codes, uniq = blockrows.factorize(cols["uuid"], cols["ts"])
        order = blockrows.by_gpu(codes, len(uniq))
        bounds = np.searchsorted(codes[order], np.arange(len(uniq) + 1))
        extra = self._vanished(cols, uniq, order, bounds)
        if extra is not None:
            cols = blockrows.concat(cols, extra)
            by_ts = np.argsort(cols["ts"], kind="stable")
            cols = {k: v[by_ts] for k, v in cols.items()}
            codes, uniq = blockrows.codes_by_first(cols["uuid"])
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(len(uniq) + 1))
        metric_names = [k for k in cols if k in catalogue.BY_NAME]
        per_slot: dict[int, dict[str, np.ndarray]] = {}
        for ci, uuid in enumerate(uniq):
            rows = order[bounds[ci]:bounds[ci + 1]]
            g = self._gpus.get(uuid) or self._add_gpu(uuid, int(cols["index"][rows[0]]))
            part = self._gpu_rows(g, rows, cols)
            if part is not None:
                per_slot[g.slot] = part
        if not per_slot:
            return
        block = self._block(per_slot, metric_names, cols)
        block.evaluator = self._ev
        ticks = blockrows.ticks(block)
        gpus = [(uuid, g.slot) for uuid, g in self._gpus.items()]
        active: dict[str, Any] = {}
        for rule in self.rules:
            if rule.name in self._pruned:  # cannot fire on these metrics: no incidents
                continue
            if rule.scope == "gpu":
                active[rule.name] = self._run_gpu_rule(rule, block, active)
            else:
                active[rule.name] = self._run_node_rule(rule, ticks, gpus, block, active)
        for name in self._learning:
            block.value(name)
        self._ev.end_block(block)

    def _block(self, per_slot: dict[int, dict[str, np.ndarray]], metric_names: list[str],
               cols: dict[str, np.ndarray]) -> Block:
        """The GPUs' accepted samples slot by slot as one :class:`Block` (one gather per
        metric; every metric is missing at a lost sample)."""
        n_slots = len(self._slots)
        counts = np.array([len(per_slot[i]["ts"]) if i in per_slot else 0
                           for i in range(n_slots)], dtype=np.int64)
        parts = [per_slot[i] for i in range(n_slots) if i in per_slot]

        def cat(name: str) -> np.ndarray:
            return np.concatenate([p[name] for p in parts])

        rows, lost = cat("rows"), cat("lost")
        any_lost = bool(lost.any())
        metrics = {m: np.where(lost, np.nan, cols[m][rows]) if any_lost else cols[m][rows]
                   for m in metric_names}
        return Block(cat("ts"), cat("d"), counts, [g.device for g in self._slots], metrics,
                     lost, cat("xid"), cat("xid_count"), self._learned)

    def _vanished(self, cols: dict[str, np.ndarray], uniq: Any, order: np.ndarray,
                  bounds: np.ndarray) -> dict[str, np.ndarray] | None:
        """Synthetic lost rows for GPUs that stopped reporting (see :mod:`presence`)."""
        ticks = blockrows.unique(cols["ts"])
        where = {u: i for i, u in enumerate(uniq)}
        ts_out: list[float] = []
        who: list[_Gpu] = []
        for uuid, g in self._gpus.items():
            ci = where.get(uuid)
            mine = (np.empty(0) if ci is None
                    else blockrows.unique(cols["ts"][order[bounds[ci]:bounds[ci + 1]]]))
            for t in vanish_times(g.last_ts, mine, ticks, self.config.max_gap):
                ts_out.append(t)
                who.append(g)
        if not ts_out:
            return None
        n = len(ts_out)
        return {"ts": np.array(ts_out), "uuid": np.array([g.uuid for g in who], dtype=object),
                "index": np.array([g.index for g in who], dtype=np.int64),
                "lost": np.ones(n, bool)}

    def _gpu_rows(self, g: _Gpu, rows: np.ndarray,
                  cols: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """One GPU's accepted rows of the block (repeated/backwards ones dropped): their
        row numbers, times, weights, lost flags and XIDs."""
        ts = cols["ts"][rows]
        prev = np.fmax.accumulate(np.concatenate(([g.last_ts], ts)))
        keep = ~(ts <= prev[:-1])  # repeated or backwards for this GPU: dropped
        if not keep.all():
            self.dropped_samples += int((~keep).sum())
            rows, ts = rows[keep], ts[keep]
        if not len(ts):
            return None
        prev_ts = np.concatenate(([g.last_ts], ts[:-1]))
        d = np.where(np.isnan(prev_ts), 0.0, np.minimum(ts - prev_ts, self.config.max_gap))
        g.last_ts = float(ts[-1])
        out = {"ts": ts, "d": d, "lost": cols["lost"][rows], "rows": rows}
        out["xid"], out["xid_count"] = self._assign_xids(g.uuid, ts)
        return out

    def _assign_xids(self, uuid: str, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """XID events go to the GPU's first sample at or after them; later ones wait."""
        xid = np.full(len(ts), np.nan)
        cnt = np.zeros(len(ts))
        if not self._xids:
            return xid, cnt
        rest: list[XidEvent] = []
        for ev in self._xids:
            if ev.uuid != uuid:
                rest.append(ev)
                continue
            i = int(np.searchsorted(ts, ev.ts, side="left"))
            if i >= len(ts):
                rest.append(ev)
                continue
            cnt[i] += 1
            xid[i] = ev.code if np.isnan(xid[i]) else max(xid[i], ev.code)
        self._xids = rest
        return xid, cnt

    # --- rules --------------------------------------------------------------------------
    def _inhibit_mask(self, rule: Rule, uuid: str, times: np.ndarray,
                      active: dict[str, Any]) -> np.ndarray:
        mask = np.zeros(len(times), bool)
        for inh in self.rules.inhibitors(rule):
            got = active.get(inh.name)
            if got is None:
                continue
            if inh.scope == "gpu":
                mask |= blockrows.covered(got.get(uuid, []), times)
            else:
                intervals, ticks, condm, gpus = got
                if uuid not in gpus:
                    continue
                ti = np.clip(np.searchsorted(ticks, times), 0, len(ticks) - 1)
                mask |= blockrows.covered(intervals, times) & condm[ti, gpus.index(uuid)]
        return mask

    def _extra(self, rule: Rule, st: EntityState) -> dict[str, Any]:
        extra: dict[str, Any] = {"for_s": st.for_used}
        m = self._machines[rule.name]
        if m.learner is not None:
            extra["learned_longest_s"] = m.learner.longest
            extra["learned_episodes"] = m.learner.episodes
        if self.dropped_samples:
            extra["dropped_samples"] = self.dropped_samples
        return extra

    def _fired(self, inc: Incident) -> Incident:
        self._incidents.append(inc)
        self._transitions.append((float(inc.fired_at or 0.0), "firing", inc))
        return inc

    def _resolve(self, t: float, st: EntityState) -> None:
        inc: Incident = st.incident
        inc.resolved_at = t
        self._transitions.append((t, "resolved", inc))

    def _run_gpu_rule(self, rule: Rule, b: Block,
                      active: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
        ev = self._ev
        cond_all = truth(ev.sample(self._cond[rule.name], b))
        # the clear test is read only while an incident fires: with none firing as the
        # block starts and the condition false throughout, none fires in it either
        machine = self._machines[rule.name]
        need_clear = rule.clear is not None and (
            rule.name not in self._lazy_clear or bool(cond_all.any())
            or any(st.phase == "firing" for st in machine.states.values()))
        clr_all = truth(ev.sample(self._clear[rule.name], b)) if need_clear else None
        evid: dict[str, np.ndarray] = {}  # computed when an incident fires in this block
        inputs = []
        for uuid, g in self._gpus.items():
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
            g = self._gpus[uuid]
            at = int(b.offsets[g.slot]) + i
            if not evid:
                evid.update({k: numeric(ev.sample(n, b)) for k, n in rule.evidence.items()})
            vals = {k: float(a[at]) for k, a in evid.items()}
            return self._fired(make_incident(rule, self.host, [(g.index, uuid)], st.since,
                                             float(b.ts[at]), vals, self._extra(rule, st)))

        return machine.run(inputs, on_fire, lambda _k, t, st: self._resolve(t, st))

    def _run_node_rule(self, rule: Rule, ticks: np.ndarray, gpus: list[tuple[str, int]],
                       b: Block, active: dict[str, Any]) -> tuple:
        ev = self._ev
        cache = b.grid_cache  # shared by the node rules of the block (same ticks, GPUs)
        condm = truth(ev.grid(self._cond[rule.name], ticks, gpus, b, cache))
        if rule.inhibited_by:
            condm = condm.copy()  # the grid cache may hold this very array
            for j, (uuid, _slot) in enumerate(gpus):
                condm[:, j] &= ~self._inhibit_mask(rule, uuid, ticks, active)
        cond = condm.any(axis=1)
        if rule.clear is not None:
            cm = truth(ev.grid(self._clear[rule.name], ticks, gpus, b, cache))
            present = ev.present(ticks, gpus, b, cache)
            clr = (cm | ~present).all(axis=1) & present.any(axis=1)
        else:
            clr = ~cond
        evid = {k: numeric(ev.grid(n, ticks, gpus, b, cache)) for k, n in rule.evidence.items()}

        uuids = [u for u, _ in gpus]
        machine = self._machines[rule.name]
        carried = machine.states.get(NODE)
        firing = [carried.incident] if carried is not None and carried.phase == "firing" else []

        def on_fire(_key: str, i: int, st: EntityState) -> Incident:
            row = condm[i]
            vals = {k: node_value(a[i], row) for k, a in evid.items()}
            who = [(self._gpus[u].index, u) for u in members(row, uuids)]
            inc = self._fired(make_incident(rule, self.host, who, st.since, float(ticks[i]),
                                            vals, self._extra(rule, st)))
            firing.append(inc)
            return inc

        out = machine.run([(NODE, ticks, cond, clr)], on_fire,
                          lambda _k, t, st: self._resolve(t, st))
        held_for = self._held_durations(rule.name, ticks, condm, uuids, full=bool(firing))
        for inc in firing:  # GPUs that join while it fires are listed too (one event) once
            # their own condition has held as long as the incident's `for:` (a rank 0 that
            # dips for one checkpoint does not join a straggler incident)
            end = math.inf if inc.resolved_at is None else inc.resolved_at
            during = (ticks >= (inc.fired_at or 0.0)) & (ticks < end)
            need = float(inc.evidence.get("for_s") or 0.0)
            joined = members((condm & (held_for >= need))[during].any(axis=0), uuids)
            add_members(inc, [(self._gpus[u].index, u) for u in joined])
        return (out[NODE], ticks, condm, uuids)

    def _held_durations(self, name: str, ticks: np.ndarray, condm: np.ndarray,
                        uuids: list[str], full: bool = True) -> np.ndarray:
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


def _learns(node: Any) -> bool:
    """Whether the expression names a signal that advances learned state."""
    if isinstance(node, Name) and node.name in LEARNING_SIGNALS:
        return True
    return any(_learns(c) for c in children(node))


def _names(node: Any) -> set[str]:
    """Every metric or signal name in an expression."""
    out = {node.name} if isinstance(node, Name) else set()
    for c in children(node):
        out |= _names(c)
    return out


def _opt(v: float) -> float | None:
    """A learned value, None when not learned (NaN)."""
    return None if math.isnan(v) else float(v)
