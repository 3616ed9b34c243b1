"""The ``nvml`` source: live readings of every GPU through nvidia-ml-py.

Modules, one role each: ``source`` (:class:`NvmlSource`), ``deadline`` (worker lanes that
bound every NVML call), ``reader`` (one sample of one GPU), ``inventory`` (what a GPU is),
``gpm`` (Hopper+ GPM metrics between consecutive samples), ``procs`` (``/proc`` lookups),
``xid`` (event set thread, kernel-log fallback), ``errors`` (NVML error policy).
"""

from __future__ import annotations

from watchdog.sources.nvml.source import NvmlSource

__all__ = ["NvmlSource"]
