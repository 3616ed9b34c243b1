"""Counter-based noise: a pure function of its keys, not a random stream.

A stateful RNG would make the value seen at time ``t`` depend on how many draws came
before, i.e. on the sampling interval. Here every draw is a hash of
``(seed, gpu, tick, stream)`` where ``tick = floor(t * 10)`` (0.1 s resolution), so the
simulated node shows the same value at ``t`` whether it is sampled every 0.1 s, 1 s or
5 s. The hash is SplitMix64's finaliser (Steele et al., "Fast splittable pseudorandom
number generators", 2014): cheap in pure Python and well mixed.
"""

from __future__ import annotations

import math

_MASK = (1 << 64) - 1
_INV = 1.0 / (1 << 53)


def mix(x: int) -> int:
    """SplitMix64 finaliser of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def key(seed: int, *parts: int) -> int:
    """Fold integers into one 64-bit key (order matters)."""
    h = mix(seed & _MASK)
    for p in parts:
        h = mix(h ^ (p & _MASK))
    return h


def unit(seed: int, *parts: int) -> float:
    """Uniform in [0, 1) for the given keys."""
    return (key(seed, *parts) >> 11) * _INV


def uniform(lo: float, hi: float, seed: int, *parts: int) -> float:
    """Uniform in [lo, hi) for the given keys."""
    return lo + (hi - lo) * unit(seed, *parts)


def unit_at(base: int, tk: int) -> float:
    """Uniform in [0, 1) for a precomputed ``base = key(seed, stream, gpu)`` and tick ``tk``:
    one mix per draw on the hot path instead of one per key part."""
    return (mix(base ^ tk) >> 11) * _INV


def tick(t: float) -> int:
    """The 0.1 s bucket of time ``t`` (s); the epsilon absorbs float error in ``k * dt``."""
    return math.floor(t * 10.0 + 1e-6)
