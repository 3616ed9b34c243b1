"""The base of every simulated fault: :class:`Fault` (the scenarios are in :mod:`.faults`).

A fault edits a GPU's :class:`~watchdog.sources.sim.job.GpuState` while it is active
(``onset <= t < end``; ``end`` None = until the end) and may emit XID events. Times are
seconds since the node started. :meth:`Fault.record` is the ground truth.
"""

from __future__ import annotations

from typing import ClassVar

from watchdog.errors import InputError
from watchdog.sources.sim import noise
from watchdog.sources.sim.job import GpuState, TrainingJob
from watchdog.sources.sim.models import SimulatedGpu
from watchdog.untyped import JsonDoc

S_FAULT = 101  # noise stream base for faults


class Fault:
    """Base class: a scenario's GPUs, active window and parameters."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    scope: ClassVar[str] = "gpu"  # "gpu": one GPU by default; "node": all unclaimed GPUs
    expects_incident: ClassVar[bool] = True  # False: a look-alike, not in the ground truth
    params_help: ClassVar[dict[str, str]] = {}

    def __init__(self, gpus: tuple[int, ...], onset: float, end: float | None,
                 params: dict[str, str], job: TrainingJob, where: str) -> None:
        self.gpus = gpus
        self.gpu_set = frozenset(gpus)
        self.onset = onset
        self.end = end
        self.job = job
        self.where = where
        self.params: JsonDoc = {}
        self._bases = {g: noise.key(job.gpu_seed, S_FAULT, g) for g in gpus}
        self.configure(params)

    @classmethod
    def supports(cls, model: SimulatedGpu) -> bool:
        """Whether this scenario can be injected into a GPU of ``model``."""
        return True

    def configure(self, params: dict[str, str]) -> None:
        """Read scenario parameters (already checked against ``params_help``)."""

    def _num(self, params: dict[str, str], key: str, default: float, lo: float,
             hi: float) -> float:
        if key not in params:
            return default
        try:
            v = float(params[key])
        except ValueError:
            v = float("nan")
        if not lo <= v <= hi:
            raise InputError(f"{self.where}: {key}={params[key]!r}: expected a number in "
                             f"{lo:g}..{hi:g}")
        return v

    def starts(self) -> float:
        """First time (s) the fault changes anything (before ``onset`` for a ramp)."""
        return self.onset

    def active(self, t: float) -> bool:
        return self.starts() <= t and (self.end is None or t < self.end)

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        """Edit ``st`` for GPU ``g`` at ``t`` (only called while active, for own GPUs)."""

    def xids(self) -> list[tuple[float, int, int, str]]:
        """XID events ``(t, gpu, code, message)`` this fault emits."""
        return []

    def truth_gpus(self) -> tuple[int, ...]:
        """The GPUs a detector should name for this fault."""
        return self.gpus

    def record(self) -> JsonDoc:
        """Ground truth (times relative to start; the source makes them absolute)."""
        return {"kind": self.kind, "scenario": self.name, "gpus": self.truth_gpus(),
                "onset": self.onset, "end": self.end, "params": dict(self.params)}

    def u(self, g: int, tk: int) -> float:
        """Uniform noise in [0, 1) for GPU ``g`` at tick ``tk`` (same for every fault)."""
        return noise.unit_at(self._bases[g], tk)
