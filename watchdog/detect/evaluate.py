"""Vectorised evaluation of condition ASTs: per GPU over its samples, or on the node grid.

*Sample space*: an expression without node functions is evaluated over the new samples
of every GPU (:class:`~watchdog.detect.signals.Block`). Windows declared up front
(:meth:`Evaluator.declare`, the detector declares every rule's) live in a
:class:`~watchdog.detect.windows.WindowSet` per span of widths (:data:`WIDTH_TIERS`):
windows over the same argument in a span share their running sums, and a window is
computed only in the blocks that ask for it (:meth:`Evaluator.end_block` carries the
others). A set keeps every series' samples for its widest window, so one 30-minute
window in a single set made all 41 series of the shipped rules keep 30 minutes (64 GPUs
at 1 s: 125 MB against 63 MB with 15 minutes). An undeclared window gets a private
:class:`~watchdog.detect.windows.Window` (keyed by its canonical text).

*Grid space* (node rules): a ``ticks × GPUs`` matrix. Each maximal per-GPU subtree is
evaluated in sample space and mapped onto the ticks "as of" (the GPU's latest sample at
or before the tick, missing once older than ``max_gap``); node functions reduce across
GPUs and broadcast back. Values are float64; booleans are 1.0/0.0; NaN is missing.
"""

from __future__ import annotations

import warnings

import numpy as np

from watchdog.detect.lang import NODE_FUNCS, Binary, Call, In, Name, Node, Num, Unary
from watchdog.detect.lang import has_node_func as _has_node_func
from watchdog.detect.signals import Block
from watchdog.detect.windows import Window, WindowSet
from watchdog.untyped import Array

NAN = np.nan
PRESENT_KEY = "__present__"
# the widest window (s) of each window set: a window goes to the first span that holds it
WIDTH_TIERS = (60.0, 300.0, 900.0, float("inf"))


def _tier(width: float) -> float:
    return next(t for t in WIDTH_TIERS if width <= t)


def truth(x: Array) -> Array:
    """Boolean view of values: NaN and 0 are false (bool arrays are returned as they are)."""
    if x.dtype == np.bool_:
        return x
    return (x != 0) & ~np.isnan(x)


def numeric(x: Array) -> Array:
    return x.astype(np.float64) if x.dtype == np.bool_ else x


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal}


def _apply(node: Node, args: list[Array]) -> Array:
    """Element-wise operators and plain functions (shape-agnostic).

    Boolean results are bool arrays; arithmetic sees them as 1.0/0.0. A comparison with
    NaN is false (IEEE semantics for < <= > >= ==; ``!=`` is made false explicitly).
    """
    if isinstance(node, Unary):
        (a,) = args
        return ~truth(a) if node.op == "not" else -numeric(a)
    if isinstance(node, In):
        if np.isnan(args[0]).all():  # a signal the block lacks (no XID): nothing is in
            return np.zeros(args[0].shape, bool)
        return np.isin(args[0], np.array(node.values))
    if isinstance(node, Binary):
        a, b = args
        op = node.op
        if op == "and":
            return truth(a) & truth(b)
        if op == "or":
            return truth(a) | truth(b)
        if op in _CMP:
            return _CMP[op](a, b)
        if op == "!=":
            a, b = numeric(a), numeric(b)
            return (a != b) & ~np.isnan(a) & ~np.isnan(b)
        a, b = numeric(a), numeric(b)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return np.where(b != 0, a / np.where(b != 0, b, 1.0), NAN)
    if isinstance(node, Call):
        vals = [numeric(a) for a in args]
        if node.fn == "present":
            return ~np.isnan(vals[0])
        if node.fn == "abs":
            return np.abs(vals[0])
        if node.fn == "coalesce":
            out = vals[0]
            for a in vals[1:]:
                out = np.where(np.isnan(out), a, out)
            return out
    raise AssertionError(f"cannot apply {node!r}")  # pragma: no cover


class Evaluator:
    """Evaluates ASTs; owns the shared window state and the node grid's as-of state."""

    def __init__(self, max_gap: float) -> None:
        self.max_gap = max_gap
        self.windows: dict[str, Window] = {}
        self.window_sets: dict[float, WindowSet] = {}
        self._asof: dict[tuple[str, str], tuple[float, float]] = {}
        self._per_gpu: dict[str, bool] = {}
        self._skip_ok: dict[str, bool] = {}

    # --- sample space -------------------------------------------------------------------
    def declare(self, node: Node) -> None:
        """Declare every window in ``node`` (before the first block)."""
        if isinstance(node, Call) and node.window is not None:
            arg = node.args[0]
            tier = _tier(node.window)
            ws = self.window_sets.get(tier)
            if ws is None:
                ws = self.window_sets[tier] = WindowSet()
            ws.add(arg.key, arg, node.fn, node.window)
        for c in _kids(node):
            self.declare(c)

    def end_block(self, b: Block) -> None:
        """After every rule ran on ``b``: carry the declared windows to the next block."""
        # every set advances before any carries its tails: an argument may read a window
        # of another set (min(slope(x, 3m), 15m))
        for ws in self.window_sets.values():
            ws.advance_unused(b, lambda arg: numeric(self.sample(arg, b)))  # type: ignore[arg-type]
        for ws in self.window_sets.values():
            ws.carry(b)

    def sample(self, node: Node, b: Block) -> Array:
        """Value of a node-function-free ``node`` at each new sample of every GPU in ``b``."""
        key = "§" + node.key
        got = b.cache.get(key)
        if got is not None:
            return got
        if isinstance(node, Num):  # a read-only view: no memory for a constant
            got = np.broadcast_to(np.float64(node.value), (len(b),))
        elif isinstance(node, Name):
            got = b.value(node.name)
        elif isinstance(node, Call) and node.window is not None:
            a0 = node.args[0]
            ws = self.window_sets.get(_tier(node.window))
            if ws is not None and ws.has(a0.key, node.fn, node.window):
                got = ws.value(b, a0.key, node.fn, node.window,
                               lambda: numeric(self.sample(a0, b)))
            else:
                win = self.windows.get(node.key)
                if win is None:
                    win = self.windows[node.key] = Window(node.fn, node.window)
                got = win.update_block(b, numeric(self.sample(a0, b)))
        elif isinstance(node, Binary) and node.op in ("and", "or") \
                and self._skippable(node.right):
            # short-circuit over the whole block: skip the right side when it cannot
            # change any result (a hang test on a block with no low-power sample)
            left = truth(self.sample(node.left, b))
            if node.op == "and":
                got = (left & truth(self.sample(node.right, b)) if left.any()
                       else np.zeros(len(left), bool))
            else:
                got = (left | truth(self.sample(node.right, b)) if not left.all()
                       else np.ones(len(left), bool))
        else:
            got = _apply(node, [self.sample(c, b) for c in _kids(node)])
        b.cache[key] = got
        return got

    def _skippable(self, node: Node) -> bool:
        """Whether leaving ``node`` out of a block loses no state: every window in it is
        declared (the window set carries an unused window), none is a private one."""
        got = self._skip_ok.get(node.key)
        if got is None:
            got = all((ws := self.window_sets.get(_tier(n.window))) is not None
                      and ws.has(n.args[0].key, n.fn, n.window)
                      for n in _walk(node) if isinstance(n, Call) and n.window is not None)
            self._skip_ok[node.key] = got
        return got

    # --- grid space ---------------------------------------------------------------------
    def grid(self, node: Node, ticks: Array, gpus: list[tuple[str, int]], b: Block,
             cache: dict[str, Array]) -> Array:
        """``len(ticks) × len(gpus)`` matrix of ``node`` (may contain node functions).

        ``gpus`` are ``(uuid, slot)`` pairs in column order.
        """
        got = cache.get(node.key)
        if got is not None:
            return got
        per_gpu = self._per_gpu.get(node.key)
        if per_gpu is None:
            per_gpu = self._per_gpu[node.key] = not _has_node_func(node)
        if per_gpu:
            got = self._map(node, node.key, ticks, gpus, b)
        elif isinstance(node, Call) and node.fn in NODE_FUNCS:
            arg = self.grid(node.args[0], ticks, gpus, b, cache)
            present = self.present(ticks, gpus, b, cache)
            if node.fn in JOB_FUNCS and (node.fn == "job_first"
                                         or not self._one_job(ticks, gpus, b, cache)):
                got = _by_job(node.fn, arg, present, self._jobs(ticks, gpus, b, cache))
            else:  # a node function, or a peer function where every GPU is one job
                got = _reduce(node.fn, arg, present)
        else:
            got = _apply(node, [self.grid(c, ticks, gpus, b, cache) for c in _kids(node)])
        cache[node.key] = got
        return got

    def _one_job(self, ticks: Array, gpus: list[tuple[str, int]], b: Block,
                 cache: dict[str, Array]) -> bool:
        """Whether every GPU is in one job at every tick (:func:`same_job` all true: each
        holds a job's memory, all within :data:`JOB_MEMORY_PTS` of each other), the usual
        node: then a peer function is the node's reduction, without the ``ticks × GPUs ×
        GPUs`` cube (a peer median at 64 GPUs and 2,048 ticks: 79 ms with the cube and
        :func:`same_job`, 0.6 ms reduced)."""
        got = cache.get(ONE_JOB_KEY)
        if got is None:
            pct = self.grid(Name(0, "mem_pct"), ticks, gpus, b, cache)
            used = self.grid(Name(0, "memory.used"), ticks, gpus, b, cache)
            with np.errstate(invalid="ignore"):
                one = bool((used >= JOB_MIN_MIB).all() and pct.shape[1] and (
                    np.max(pct, axis=1) - np.min(pct, axis=1) <= JOB_MEMORY_PTS).all())
            got = cache[ONE_JOB_KEY] = np.array(one)
        return bool(got)

    def _jobs(self, ticks: Array, gpus: list[tuple[str, int]], b: Block,
              cache: dict[str, Array]) -> Array:
        """``ticks × GPUs × GPUs`` booleans: which GPUs are in each GPU's job at each tick
        (:func:`same_job`), from the memory each holds."""
        got = cache.get(JOBS_KEY)
        if got is None:
            pct = self.grid(Name(0, "mem_pct"), ticks, gpus, b, cache)
            used = self.grid(Name(0, "memory.used"), ticks, gpus, b, cache)
            got = cache[JOBS_KEY] = same_job(pct, used)
        return got

    def present(self, ticks: Array, gpus: list[tuple[str, int]], b: Block,
                cache: dict[str, Array]) -> Array:
        """Boolean matrix: the GPU has a sample no older than ``max_gap`` at the tick."""
        got = cache.get(PRESENT_KEY)
        if got is None:
            got = ~np.isnan(self._map(None, PRESENT_KEY, ticks, gpus, b))
            cache[PRESENT_KEY] = got
        return got

    def _map(self, node: Node | None, key: str, ticks: Array,
             gpus: list[tuple[str, int]], b: Block) -> Array:
        vals_all = np.ones(len(b)) if node is None else numeric(self.sample(node, b))
        n_t = len(ticks)
        slots = [slot for _, slot in gpus]
        if len(b.counts) == len(gpus) and bool((b.counts == n_t).all()):
            # every GPU has a sample at every tick: a reshape (slot order) is the matrix
            for uuid, slot in gpus:
                self._asof[(key, uuid)] = (float(ticks[-1]), float(vals_all[(slot + 1) * n_t - 1]))
            mat = vals_all.reshape(len(b.counts), n_t).T
            if slots == list(range(len(slots))):  # columns already in slot order: a view
                return mat
            return mat[:, slots]
        out = np.full((n_t, len(gpus)), NAN)
        for j, (uuid, slot) in enumerate(gpus):
            last_ts, last_v = self._asof.get((key, uuid), (NAN, NAN))
            lo, hi = (int(b.offsets[slot]), int(b.offsets[slot + 1])) if slot < b.n_slots \
                else (0, 0)
            if hi > lo:
                vals, ts = vals_all[lo:hi], b.ts[lo:hi]
                if hi - lo == len(ticks):  # a sample at every tick (ts is a subset of ticks)
                    v, st = vals, ts
                else:
                    have, idx_c, st = self._asof_index(b, slot, ts, ticks, last_ts)
                    v = np.where(have, vals[idx_c], last_v)
                self._asof[(key, uuid)] = (float(ts[-1]), float(vals[-1]))
            else:
                v = np.full(len(ticks), last_v)
                st = np.full(len(ticks), last_ts)
            with np.errstate(invalid="ignore"):
                fresh = (ticks - st) <= self.max_gap
            out[:, j] = np.where(fresh, v, NAN)
        return out

    @staticmethod
    def _asof_index(b: Block, slot: int, ts: Array, ticks: Array,
                    last_ts: float) -> tuple[Array, Array, Array]:
        """Per tick: has the GPU a sample in this block at/before it, its index, its time."""
        got = b.asof.get(slot)
        if got is None:
            idx = np.searchsorted(ts, ticks, side="right") - 1
            have = idx >= 0
            idx_c = np.where(have, idx, 0)
            got = b.asof[slot] = (have, idx_c, ts[idx_c])
        have, idx_c, st = got
        return have, idx_c, np.where(have, st, last_ts)


def _walk(node: Node) -> list[Node]:
    """``node`` and every node below it."""
    out = [node]
    for c in _kids(node):
        out.extend(_walk(c))
    return out


def _kids(node: Node) -> list[Node]:
    if isinstance(node, Unary | In):
        return [node.arg]
    if isinstance(node, Binary):
        return [node.left, node.right]
    if isinstance(node, Call):
        return list(node.args)
    return []


def _reduce(fn: str, m: Array, present: Array) -> Array:
    """A node function over the GPU axis, broadcast back to every GPU."""
    n_present = present.sum(axis=1)
    if fn in ("count", "frac_gpus", "any_gpu", "all_gpus"):
        c = (truth(m) & present).sum(axis=1).astype(np.float64)
        if fn == "count":
            r = c
        elif fn == "frac_gpus":
            r = np.where(n_present > 0, 100.0 * c / np.maximum(n_present, 1), NAN)
        elif fn == "any_gpu":
            r = (c > 0).astype(np.float64)
        else:
            r = ((c == n_present) & (n_present > 0)).astype(np.float64)
    else:
        vals = np.where(present, m, NAN)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if not vals.shape[1] or np.isnan(vals).all():  # no GPU has a value: NaN
                r = np.full(len(vals), NAN)
            else:
                r = _peer_stat(fn, vals)
    return np.repeat(r[:, None], m.shape[1], axis=1)


#: node functions over a GPU's job, not the whole node (:func:`same_job`)
JOB_FUNCS = frozenset({"peer_median", "peer_mean", "peer_min", "peer_max", "job_first"})
JOBS_KEY = "§jobs"
ONE_JOB_KEY = "§one_job"
#: GPUs whose memory used lies within this many points (% of their total) of each other,
#: each holding a job (>= 1 GiB), are one job's: a data-parallel job's ranks hold nearly
#: the same memory (real runs: 99.3-99.6 % on 8 FSDP ranks, 71.8-72.1 % on 4 DDP ranks,
#: 76.4-79.2 % on 8 RL ranks), other users' jobs on the node rarely the same (41 % and
#: 47 % beside a job at 100 %, real-wandb ghln1e4f)
JOB_MEMORY_PTS = 5.0
JOB_MIN_MIB = 1024.0


def same_job(pct: Array, used: Array) -> Array:
    """``ticks × GPUs × GPUs``: GPU k is in GPU j's job at a tick when both hold a job
    (memory used >= :data:`JOB_MIN_MIB`) within :data:`JOB_MEMORY_PTS` of each other's
    share of memory (:func:`jobs_by_memory`)."""
    with np.errstate(invalid="ignore"):
        held = used >= JOB_MIN_MIB
    return jobs_by_memory(pct, held, unread=np.isnan(pct) | np.isnan(used))


def jobs_by_memory(pct: Array, held: Array, unread: Array | None = None) -> Array:
    """``(..., GPUs, GPUs)``: GPU k is in GPU j's job when both hold a job (``held``) and
    their shares of memory ``pct`` (% of the total) lie within :data:`JOB_MEMORY_PTS` of
    each other. Where a GPU's memory is not read (``unread``; default: ``pct`` NaN) its
    job is every GPU (what a node function always was); a GPU is always in its own job.
    The rules' peer functions (:func:`same_job`) and the anomaly model's peers
    (:func:`watchdog.anomaly.job.jobs_of`) draw this one line."""
    with np.errstate(invalid="ignore"):
        near = np.abs(pct[..., :, None] - pct[..., None, :]) <= JOB_MEMORY_PTS
    out = near & held[..., :, None] & held[..., None, :]
    unread = np.isnan(pct) if unread is None else unread
    out |= unread[..., :, None]  # no memory reading: every GPU is its peer
    idx = np.arange(pct.shape[-1])
    out[..., idx, idx] = True
    return out


def _by_job(fn: str, m: Array, present: Array, jobs: Array) -> Array:
    """A job function per GPU: over the GPUs of its job (``jobs``) present with a value.
    ``peer_*``: the median, mean, min or max of ``m`` there (NaN when none has a value);
    ``job_first``: 1 where this GPU is the lowest-indexed of them (its job's rank 0 by
    the launchers' convention: local rank 0 takes the first visible GPU), else 0."""
    have = present & ~np.isnan(m)
    members = jobs & have[:, None, :]  # ticks × j × k: k counts for j
    if fn == "job_first":
        n = m.shape[1]
        first = np.where(members.any(axis=2), members.argmax(axis=2), n)
        return (first == np.arange(n)[None, :]).astype(np.float64) * have
    vals = np.where(members, m[:, None, :], NAN)  # ticks × j × k
    t, n = m.shape
    flat = vals.reshape(t * n, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = _peer_stat(fn, flat)
    return r.reshape(t, n)


def _peer_stat(fn: str, rows: Array) -> Array:
    """``peer_median``, ``peer_mean``, ``peer_min`` or ``peer_max`` of each row of
    ``rows`` over its valid values (NaN where a row has none; the caller silences
    numpy's all-NaN warning)."""
    if fn == "peer_median":
        return _row_median(rows)
    if fn == "peer_mean":
        return np.nanmean(rows, axis=1)
    if fn == "peer_min":
        return np.nanmin(rows, axis=1)
    if fn == "peer_max":
        return np.nanmax(rows, axis=1)
    raise KeyError(fn)


def _row_median(vals: Array) -> Array:
    """``np.nanmedian(vals, axis=1)`` by one sort of the (few) columns: the middle value,
    or the mean ``(a + b) / 2`` of the middle two, of each row's valid values (NaN when
    none). Same numbers as numpy's, several times faster on a ticks × GPUs grid."""
    srt = np.sort(vals, axis=1)  # NaN sort last
    k = (~np.isnan(vals)).sum(axis=1)
    rows = np.arange(len(vals))
    lo = srt[rows, np.maximum(k - 1, 0) // 2]
    hi = srt[rows, k // 2]
    return np.where(k > 0, np.where(k % 2 == 1, lo, (lo + hi) / 2.0), NAN)
