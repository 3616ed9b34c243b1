"""The daemon's YAML configuration: load, validate, and report errors as file:line.

Secrets never live in this file: later sections (Slack, PagerDuty) name environment
variables or files that hold them. Unknown keys are errors, not silently ignored, so a
misspelt ``intreval:`` cannot leave the daemon on defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from watchdog.errors import InputError
from watchdog.units import parse_duration


@dataclass(frozen=True, slots=True)
class Config:
    """Daemon settings. ``interval`` is the sampling period in seconds of the clock."""

    source: str = "auto"
    interval: float = 1.0
    rules: tuple[str, ...] = ()
    host: str | None = None
    speed: float = 1.0
    sim_gpus: int = 8
    sim_model: str = "h100-sxm"
    sim_seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


_KEYS = {f.name for f in fields(Config)} - {"extra"}


def load(path: str | Path) -> Config:
    """Read and validate ``path``; every problem is one InputError naming file and line."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read config: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(f"{p}: config is not UTF-8 text") from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise InputError(f"{p}{line}: invalid YAML: {getattr(e, 'problem', e)}") from None
    if data is None:
        return Config()
    if not isinstance(data, dict):
        raise InputError(f"{p}: expected a mapping of settings at the top level")
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value} if node else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        at = f"{p}:{lines.get(key, '?')}"
        if key not in _KEYS:
            raise InputError(f"{at}: unknown setting {key!r} (known: {', '.join(sorted(_KEYS))})")
        out[key] = _coerce(key, value, at)
    return Config(**out)


def _coerce(key: str, value: Any, at: str) -> Any:
    if key == "interval":
        secs = parse_duration(str(value), what=f"{at}: interval")
        if secs <= 0:
            raise InputError(f"{at}: interval must be positive")
        return secs
    if key == "rules":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            raise InputError(f"{at}: rules must be a path or a list of paths")
        return tuple(items)
    if key in ("speed",):
        if not isinstance(value, int | float) or value <= 0:
            raise InputError(f"{at}: {key} must be a positive number")
        return float(value)
    if key in ("sim_gpus", "sim_seed"):
        if not isinstance(value, int):
            raise InputError(f"{at}: {key} must be an integer")
        return value
    if not isinstance(value, str):
        raise InputError(f"{at}: {key} must be a string")
    return value
