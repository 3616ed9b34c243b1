"""GPUs that vanish: a GPU that stops reporting while the others go on is treated as lost.

From the first tick more than ``max_gap`` after a GPU's latest sample (and before its next
one, if it comes back), the engine adds a synthetic ``lost`` sample for it, then another
at the first tick more than ``max_gap`` after that, and so on. Rules see ``lost == 1``
there (so ``gpu_lost`` rules fire); the samples depend only on the tick times, so block and
tick evaluation add the same ones. When the whole input stops (end of a log), no ticks
come and nothing is added.
"""

from __future__ import annotations

import math

import numpy as np

from watchdog.untyped import Array


def vanish_times(last_ts: float, sample_ts: Array, ticks: Array,
                 max_gap: float) -> list[float]:
    """Tick times (s) at which to add lost samples for one GPU in this block.

    ``last_ts`` is the GPU's latest sample before the block (NaN if never seen), sample_ts
    its sample times in the block (sorted), ``ticks`` every tick time in the block.
    """
    seq = np.concatenate(([last_ts], sample_ts)) if not math.isnan(last_ts) else sample_ts
    if not len(seq) or not len(ticks):
        return []
    nxt = np.concatenate((seq[1:], [math.inf]))
    out: list[float] = []
    for i in np.flatnonzero(nxt - seq > max_gap):
        t, b = float(seq[i]), float(nxt[i])
        while True:
            j = int(np.searchsorted(ticks, t + max_gap, side="right"))
            if j >= len(ticks) or ticks[j] >= b:
                break
            t = float(ticks[j])
            out.append(t)
    return out
