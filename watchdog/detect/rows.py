"""Row bookkeeping for the detector's blocks: which rows belong to which GPU, the
distinct tick times, interval membership, joining column dicts.

Each helper has a fast path for the usual block (every GPU once per tick, in the same
order) and the general answer otherwise; ``tests/test_detect_fastpaths.py`` checks the
two agree.
"""

from __future__ import annotations

import numpy as np

from watchdog.detect.signals import Block
from watchdog.untyped import Array


def factorize(uuid: Array, ts: Array) -> tuple[Array, Array]:
    """``pd.factorize(uuid)``; for the usual block (the first tick's GPUs, all distinct,
    then the same GPUs in the same order) by one comparison instead of hashing every
    row."""
    n = len(uuid)
    k = int(np.searchsorted(ts, ts[0], side="right")) if n else 0
    first = uuid[:k].tolist()
    if 0 < k < n and n % k == 0 and len(set(first)) == k \
            and all(isinstance(u, str) for u in first) and bool((uuid[k:] == uuid[:-k]).all()):
        return np.tile(np.arange(k), n // k), uuid[:k].copy()
    return codes_by_first(uuid)


SMALL_BLOCK_ROWS = 4096
"""Up to this many rows :func:`codes_by_first` factorizes with numpy: a live tick or the
probe's burst, on a path that must not import pandas (``watchdog check``'s cold start).
Larger blocks (replay, where pandas is loaded anyway) use pandas's faster hash table."""


def codes_by_first(uuid: Array) -> tuple[Array, Array]:
    """``pd.factorize(uuid)``: codes numbered by first appearance, and the uniques."""
    if len(uuid) > SMALL_BLOCK_ROWS:
        import pandas as pd

        return pd.factorize(uuid)
    uniq, first, inverse = np.unique(uuid.astype(str), return_index=True,
                                     return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    by_first = np.argsort(first, kind="stable")
    rank[by_first] = np.arange(len(uniq))
    return rank[inverse.ravel()], uuid[first[by_first]]


def by_gpu(codes: Array, k: int) -> Array:
    """Rows grouped by GPU code, in row order within a GPU (a stable argsort); for the
    usual block (every GPU once per tick, always in the same order) without sorting."""
    n = len(codes)
    if k and n % k == 0 and bool((codes.reshape(-1, k) == np.arange(k)).all()):
        return np.arange(n).reshape(-1, k).T.ravel()
    return np.argsort(codes, kind="stable")


def unique(a: Array) -> Array:
    """``np.unique(a)``; without a sort when ``a`` is already in order (block rows are).

    Also why not ``np.unique`` itself for those: numpy 2 loads its masked arrays
    (``numpy.ma``) on its first call, 6 ms of every ``watchdog check`` (about 50 ms where
    no bytecode is kept), for one reading per GPU."""
    if len(a) < 2:
        return np.array(a, copy=True)
    if bool((a[1:] >= a[:-1]).all()):
        return a[np.concatenate(([True], a[1:] != a[:-1]))]
    return np.unique(a)


def ticks(b: Block) -> Array:
    """Distinct sample times of a block, sorted (``np.unique(b.ts)``); when every GPU has
    the very same times, those of the first."""
    c = b.counts
    if len(c) and c[0] and (c == c[0]).all():
        rows = b.ts.reshape(len(c), int(c[0]))
        if bool((rows == rows[0]).all()):
            return rows[0].copy()
    return unique(b.ts)


def covered(intervals: list[tuple[float, float]], times: Array) -> Array:
    """True where ``times`` fall inside one of the ``[start, end)`` intervals."""
    if not intervals:
        return np.zeros(len(times), bool)
    iv = np.array(sorted(intervals))  # an entity's intervals never overlap
    i = np.searchsorted(iv[:, 0], times, side="right") - 1
    return (i >= 0) & (times < iv[np.maximum(i, 0), 1])


def concat(a: dict[str, Array], b: dict[str, Array]) -> dict[str, Array]:
    """The rows of ``a`` then those of ``b``; a column only one side has is missing
    (NaN) in the other's rows."""
    out = {}
    for k in a.keys() | b.keys():
        n_a, n_b = len(a["ts"]), len(b["ts"])
        va = a.get(k, np.full(n_a, np.nan))
        vb = b.get(k, np.full(n_b, np.nan))
        out[k] = np.concatenate((va, vb))
    return out
