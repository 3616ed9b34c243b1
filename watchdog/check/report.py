"""``watchdog check --json``: the verdict as one JSON object.

Shape (stable: monitoring scripts parse it)::

    {"status": "OK|WARNING|CRITICAL|UNKNOWN", "exit_code": 0..3, "host": str,
     "checked_at": ISO 8601 with zone, "source": str, "driver": str|null,
     "gpu_count": int, "expected_gpus": int|null, "duration_s": float,
     "gpus": [{"index": int, "uuid": str, "name": str|null, "status": str,
               "reasons": [problem messages, worst first],
               "clock_events": [flag names of the active clock-event reasons],
               "samples": int, "metrics": {catalogue name: value|null}}],
     "problems": [{"severity", "gpu": int|null, "uuid": str|null, "check", "message"}]}

``metrics`` are the GPU's last reading in catalogue units (W, MiB, C, MHz, %), with missing
values as ``null``, never 0. ``checked_at`` is the judged moment: now for ``nvml``, the
simulated time for ``sim``, the last timestamp of a log.
"""

from __future__ import annotations

import json

from watchdog import reasons
from watchdog.check.judge import RANK, GpuVerdict, Problem, Verdict
from watchdog.incident import iso
from watchdog.untyped import JsonDoc


def _num(v: float | None) -> float | int | None:
    """JSON-safe number: NaN -> None, whole numbers as int, others rounded to 3 places."""
    if v is None or v != v:
        return None
    return int(v) if float(v).is_integer() else round(float(v), 3)


def problem_json(p: Problem) -> JsonDoc:
    return {"severity": p.severity.name, "gpu": p.gpu, "uuid": p.uuid, "check": p.check,
            "message": p.message}


def gpu_json(g: GpuVerdict) -> JsonDoc:
    metrics: JsonDoc = {}
    mask = None
    if g.last is not None:
        metrics = {k: _num(v) for k, v in sorted(g.last.values.items())}
        mask = g.last.get("clocks_event_reasons.active")
    if g.device is not None:
        metrics.setdefault("enforced.power.limit", _num(g.device.power_limit_enforced_w))
        metrics.setdefault("memory.total", _num(g.device.memory_total_mib))
    ordered = sorted(g.problems, key=lambda p: -RANK[p.severity])
    return {
        "index": g.index,
        "uuid": g.uuid,
        "name": g.name,
        "status": g.status.name,
        "reasons": [p.message for p in ordered],
        "clock_events": reasons.flags(mask),
        "lost": bool(g.last is not None and g.last.lost),
        "samples": g.samples,
        "metrics": metrics,
    }


def to_dict(v: Verdict) -> JsonDoc:
    """The JSON object for a verdict (see the module docstring for the shape)."""
    return {
        "status": v.status.name,
        "exit_code": v.exit_code,
        "host": v.host,
        "checked_at": iso(v.checked_at),
        "source": v.source,
        "driver": v.driver,
        "gpu_count": len(v.gpus),
        "expected_gpus": v.expected_gpus,
        "duration_s": round(v.duration_s, 3),
        "gpus": [gpu_json(g) for g in v.gpus],
        "problems": [problem_json(p) for p in v.problems],
    }


def to_json(v: Verdict) -> str:
    """One line of JSON."""
    return json.dumps(to_dict(v), separators=(",", ":"), allow_nan=False)
