"""Building incidents: which GPUs an incident lists, its evidence and its summary.

A ``node`` rule produces one incident for the node listing every GPU on which its
per-GPU condition held at the firing tick (a whole job hung is one incident, not N);
per-GPU evidence of a node rule is reported as the mean over those GPUs. GPUs on which
the condition comes to hold while the incident fires are added to its list (the summary
and evidence stay those of the firing moment).
"""

from __future__ import annotations

import math
import re
import string

import numpy as np

from watchdog.detect.loader import Rule
from watchdog.incident import Incident
from watchdog.untyped import Array, JsonDoc


def members(row: Array, gpus: list[str]) -> list[str]:
    """UUIDs whose column in the boolean ``row`` is true (in the order of ``gpus``)."""
    return [u for u, on in zip(gpus, row, strict=True) if on]


def node_value(row: Array, mask: Array) -> float:
    """Mean of ``row`` over the member GPUs (``mask``), ignoring missing values."""
    vals = row[mask] if mask.any() else row
    vals = vals[~np.isnan(vals)]
    return float(vals.mean()) if len(vals) else math.nan


def make_incident(rule: Rule, host: str, gpus: list[tuple[int, str]], started_at: float,
                  fired_at: float, values: dict[str, float], extra: JsonDoc) -> Incident:
    """An Incident for ``rule`` with its summary rendered from ``values`` and ``extra``.

    ``gpus`` are ``(index, uuid)`` pairs, reported sorted by index.
    """
    gpus = sorted(gpus)
    evidence: JsonDoc = {k: _num(v) for k, v in values.items()}
    evidence.update(extra)
    fields: JsonDoc = {**{k: float(v) for k, v in values.items()},
                              "for_s": float(extra.get("for_s", 0.0)),
                              "gpus": ",".join(str(i) for i, _ in gpus), "host": host,
                              "rule": rule.name, "kind": rule.kind, "n_gpus": len(gpus)}
    summary = render(rule.summary, fields) if rule.summary else (
        f"{rule.name} on GPU {fields['gpus']}")
    notes = list(extra.get("fallbacks") or ())
    if extra.get("windows_widened_to_s"):
        notes.append(f"sparse log: windows widened to {extra['windows_widened_to_s']:.0f} s")
    if notes:  # what the judgment stood on, when the log lacked the first source
        summary = f"{summary.rstrip()} ({'; '.join(notes)})"
    return Incident(kind=rule.kind, severity=rule.severity, host=host,
                    gpus=[str(i) for i, _ in gpus], uuids=[u for _, u in gpus],
                    started_at=started_at, fired_at=fired_at, resolved_at=None,
                    rule=rule.name, summary=summary, evidence=evidence,
                    labels=dict(rule.labels))


_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")


class _Formatter(string.Formatter):
    """A missing value (NaN: the log has no memory total, no max clock) prints ``?``,
    never ``nan``."""

    def format_field(self, value: object, format_spec: str) -> str:
        if isinstance(value, float) and math.isnan(value):
            return "?"
        return super().format_field(value, format_spec)


def render(template: str, fields: JsonDoc) -> str:
    """A rule's ``summary:`` with ``fields``; a ``[…]`` segment is left out when a field
    in it is missing (``holds[ {mem_pct:.0f}% of] their memory`` -> ``holds their
    memory`` when the total is unknown), else printed without its brackets."""

    def optional(m: re.Match[str]) -> str:
        seg = m.group(1)
        for _, name, _, _ in string.Formatter().parse(seg):
            v = fields.get(name) if name else None
            if isinstance(v, float) and math.isnan(v):
                return ""
        return seg

    return _Formatter().vformat(_OPTIONAL.sub(optional, template), (), fields)


def add_members(inc: Incident, gpus: list[tuple[int, str]]) -> None:
    """Add ``(index, uuid)`` pairs not yet listed; keeps the lists sorted by index."""
    have = set(inc.uuids)
    new = [(i, u) for i, u in gpus if u not in have]
    if not new:
        return
    both = sorted([*zip((int(g) for g in inc.gpus), inc.uuids, strict=True), *new])
    inc.gpus = [str(i) for i, _ in both]
    inc.uuids = [u for _, u in both]


def _num(v: float) -> float | None:
    v = float(v)
    return None if math.isnan(v) else v
