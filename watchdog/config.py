"""The daemon's YAML configuration: load, validate, and report errors as file:line.

A config file means production: with no ``source:`` it watches the real GPUs (``nvml``)
and never falls back to the simulator. Secrets never live in this file: sinks name
environment variables or files that hold them. Unknown keys are errors, not silently
ignored, so a misspelt ``intreval:`` cannot leave the daemon on defaults.

Sections the alerting and anomaly-model code own (``notify:``, ``model:``) are kept as
parsed YAML plus their line numbers here and validated by their own parsers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.errors import InputError
from watchdog.units import parse_duration

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Record:
    """Continuous recording: ``dir`` for the hourly ``.wdrec`` files, ``keep_s`` (s)."""

    dir: str
    keep_s: float = 7 * DAY


@dataclass(frozen=True, slots=True)
class Config:
    """Daemon settings. ``interval`` is the sampling period in seconds of the clock.

    ``path`` is the file it came from (None: built-in defaults, no config given).
    ``lines`` maps each top-level key to its line in the file (for later errors).
    """

    source: str = "nvml"
    interval: float = 1.0
    rules: tuple[str, ...] = ()
    host: str | None = None
    state_dir: str | None = None
    speed: float = 1.0
    sim_gpus: int = 8
    sim_model: str = "h100-sxm"
    sim_seed: int = 0
    metrics_listen: str | None = None
    record: Record | None = None
    retention_s: float = 90 * DAY
    call_timeout: float = 2.0
    notify: Any = None  # watchdog.notify.config.NotifyConfig when the file has notify:
    model: Any = None
    runbook_url: str | None = None
    path: str | None = None
    lines: dict[str, int] = field(default_factory=dict)


_KEYS = {"source", "interval", "rules", "host", "state_dir", "speed", "sim_gpus",
         "sim_model", "sim_seed", "metrics", "record", "retention", "call_timeout",
         "notify", "model", "runbook_url"}


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
        return Config(path=str(p))
    if not isinstance(data, dict):
        raise InputError(f"{p}: expected a mapping of settings at the top level")
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value} if node else {}
    out: dict[str, Any] = {"path": str(p), "lines": lines}
    for key, value in data.items():
        at = f"{p}:{lines.get(key, '?')}"
        if key not in _KEYS:
            raise InputError(f"{at}: unknown setting {key!r} (known: {', '.join(sorted(_KEYS))})")
        if key == "metrics":
            out["metrics_listen"] = _metrics(value, at)
        elif key == "retention":
            out["retention_s"] = _duration(value, at, key)
        else:
            out[key] = _coerce(key, value, at)
    if "notify" in out:
        from watchdog.notify.config import parse_notify

        out["notify"] = parse_notify(out["notify"], lines, str(p), out.get("runbook_url"))
    if "source" in out and out["source"] not in ("nvml",) and not str(out["source"]).startswith(
            "sim"):
        raise InputError(f"{p}:{lines.get('source', '?')}: source {out['source']!r}: the "
                         "daemon reads nvml or sim[:SCENARIO,…] (use `watchdog replay` for logs)")
    return Config(**out)


def _duration(value: Any, at: str, key: str) -> float:
    secs = parse_duration(str(value), what=f"{at}: {key}")
    if secs <= 0:
        raise InputError(f"{at}: {key} must be positive")
    return secs


def _metrics(value: Any, at: str) -> str | None:
    from watchdog.service.metrics import parse_listen

    if value is None or value is False:
        return None
    if not isinstance(value, dict) or set(value) - {"listen"}:
        raise InputError(f"{at}: metrics must be a mapping like {{listen: 127.0.0.1:9849}}")
    listen = str(value.get("listen", "127.0.0.1:9849"))
    parse_listen(listen, at)
    return listen


def _coerce(key: str, value: Any, at: str) -> Any:
    if key in ("interval", "call_timeout"):
        return _duration(value, at, key)
    if key == "rules":
        items = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            raise InputError(f"{at}: rules must be a path or a list of paths")
        return tuple(items)
    if key == "speed":
        if not isinstance(value, int | float) or value <= 0:
            raise InputError(f"{at}: {key} must be a positive number")
        return float(value)
    if key in ("sim_gpus", "sim_seed"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(f"{at}: {key} must be an integer")
        return value
    if key == "record":
        if not isinstance(value, dict) or "dir" not in value or set(value) - {"dir", "keep"}:
            raise InputError(f"{at}: record must be a mapping like {{dir: /var/lib/"
                             "nvml-watchdog/recordings, keep: 7d}}")
        keep = _duration(value.get("keep", "7d"), at, "record.keep")
        return Record(dir=str(value["dir"]), keep_s=keep)
    if key == "notify":
        if value is not None and not isinstance(value, dict):
            raise InputError(f"{at}: notify must be a mapping (group_wait, routes, sinks, …)")
        return value
    if key == "model":
        return value
    if not isinstance(value, str):
        raise InputError(f"{at}: {key} must be a string")
    return value
