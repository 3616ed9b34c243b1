"""A rule's learned wait: ``for: learned(default=…, min=…, margin=…)``.

Per rule and node, the longest pending episode of the rule's condition that ended on its
own before firing (a legitimate wait such as a checkpoint) is recorded by a
:class:`WaitLearner`; the ``for`` of the next episode is ``max(min, longest + margin)``.
:class:`LearnedWait` is the spec a rule file gives. Read by the alert states
(:mod:`machine`); the live agent persists them (``Detector.learned_state``), and
``docs/rules.md`` describes them for rule writers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from watchdog.errors import InputError
from watchdog.units import parse_duration
from watchdog.untyped import JsonDoc


@dataclass(frozen=True)
class LearnedWait:
    """A rule's ``for: learned(default=…, min=…, margin=…)`` as written (seconds)."""

    default: float
    min: float
    margin: float


def parse_learned_wait(args: str) -> LearnedWait:
    """The inside of ``learned(...)``: ``key=duration`` pairs, ``default`` required."""
    vals: dict[str, float] = {}
    for part in args.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise InputError(f"for: learned({args}): expected key=duration pairs")
        k, v = (s.strip() for s in part.split("=", 1))
        if k not in ("default", "min", "margin"):
            raise InputError(f"for: learned(): unknown parameter {k!r} "
                             "(expected default, min, margin)")
        vals[k] = parse_duration(v, what=f"for: learned({k}=)")
    if "default" not in vals:
        raise InputError("for: learned(): default= is required")
    return LearnedWait(vals["default"], vals.get("min", 0.0), vals.get("margin", 0.0))


@dataclass
class WaitLearner:
    """Longest legitimate episode of a rule's condition on this node (s), for the
    rule's :class:`LearnedWait`."""

    spec: LearnedWait
    longest: float | None = None
    episodes: int = 0

    def effective(self) -> float:
        """The ``for`` to use now: ``max(min, longest + margin)``, or the default."""
        if self.longest is None:
            return self.spec.default
        return max(self.spec.min, self.longest + self.spec.margin)

    def record(self, duration: float) -> None:
        self.episodes += 1
        if self.longest is None or duration > self.longest:
            self.longest = duration

    def to_dict(self) -> JsonDoc:
        return {"longest_s": self.longest, "episodes": self.episodes}

    @classmethod
    def from_dict(cls, spec: LearnedWait, d: JsonDoc) -> WaitLearner:
        """Inverse of :meth:`to_dict` for a rule whose ``for:`` is ``spec``."""
        out = cls(spec)
        out.load(d)
        return out

    def load(self, d: JsonDoc) -> None:
        lo = d.get("longest_s")
        self.longest = None if lo is None else float(lo)
        self.episodes = int(d.get("episodes", 0))


def waits_to_dict(learners: Mapping[str, WaitLearner]) -> dict[str, JsonDoc]:
    """Every rule's learned wait by rule name (JSON-ready)."""
    return {name: lr.to_dict() for name, lr in learners.items()}


def load_waits(learners: Mapping[str, WaitLearner], state: dict[str, JsonDoc]) -> None:
    """Restore :func:`waits_to_dict` output (rules not in ``learners`` are ignored)."""
    for name, d in state.items():
        lr = learners.get(name)
        if lr is not None:
            lr.load(d)
