"""The ``notify:`` section of the daemon's config: timers, inhibition, routes and sinks.

Every problem is one :class:`InputError` naming ``file:line`` and the key, so a bad edit
fails ``watchdog run`` at start and a SIGHUP keeps the running config. Sink options are
checked by the sink's own ``from_config`` (secrets are read there, from the environment or
a file the config names; never from this file).

Durations are clock seconds: grouping timers run on the agent's injected clock, so a
simulated node at ``--speed 30`` groups in simulated time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.errors import InputError
from watchdog.incident import KINDS, SEVERITIES
from watchdog.units import parse_duration

SINK_TYPES = ("slack", "pagerduty", "alertmanager", "webhook", "log")
#: Kinds that make every other kind on the same GPU (or node) pointless to page about.
DEFAULT_INHIBITORS = ("gpu_lost", "nvml_error")


@dataclass(frozen=True, slots=True)
class Route:
    """Alerts matching ``severity`` and ``kind`` (empty: any) go to ``sinks``.

    Routes are tried in order; the first match wins unless it says ``continue``.
    """

    sinks: tuple[str, ...]
    severity: frozenset[str] = frozenset()
    kind: frozenset[str] = frozenset()
    cont: bool = False

    def matches(self, severity: str, kind: str) -> bool:
        return (not self.severity or severity in self.severity) and (
            not self.kind or kind in self.kind)


@dataclass(frozen=True, slots=True)
class Inhibit:
    """While a ``source`` kind fires on a GPU (or node-wide), ``target`` kinds (empty: all
    others) on that GPU are not notified."""

    source: frozenset[str]
    target: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class SinkSpec:
    name: str
    type: str
    options: dict[str, Any]
    where: str


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    """Parsed ``notify:``. Times in seconds.

    ``group_wait``: how long a new group collects alerts before its first notification.
    ``group_interval``: the least time between two notifications of one group (changes
    wait for it). ``repeat_interval``: re-send a group that still fires and did not
    change. ``resolve_hold``: a resolve is sent once the incident stayed clear this long (a
    re-fire inside it continues the same page). An incident that fired ``flap_count`` times
    within ``flap_window`` is flapping and its resolve waits ``flap_hold``.
    ``restart_grace``: after a restart, incidents that were firing wait this long for the
    detector to raise them again before they are resolved.
    """

    sinks: tuple[SinkSpec, ...] = ()
    routes: tuple[Route, ...] = ()
    inhibit: tuple[Inhibit, ...] = (Inhibit(frozenset(DEFAULT_INHIBITORS)),)
    group_wait: float = 10.0
    group_interval: float = 60.0
    repeat_interval: float = 4 * 3600.0
    resolve_hold: float = 120.0
    flap_window: float = 3600.0
    flap_count: int = 3
    flap_hold: float = 1800.0
    restart_grace: float = 600.0
    send_resolved: bool = True
    outbox_max: int = 1000
    sink_fail_after: float = 600.0
    drain_timeout: float = 10.0
    path: str | None = None
    runbook_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def sinks_for(self, severity: str, kind: str) -> tuple[str, ...]:
        """Sink names an alert of ``severity`` and ``kind`` is routed to."""
        if not self.routes:
            return tuple(s.name for s in self.sinks)
        out: list[str] = []
        for r in self.routes:
            if r.matches(severity, kind):
                out.extend(s for s in r.sinks if s not in out)
                if not r.cont:
                    break
        return tuple(out)


_TIMERS = ("group_wait", "group_interval", "repeat_interval", "resolve_hold", "flap_window",
           "flap_hold", "restart_grace", "sink_fail_after", "drain_timeout")
_KEYS = {*_TIMERS, "flap_count", "send_resolved", "outbox_max", "routes", "inhibit", "sinks"}


def key_lines(path: str | Path | None) -> dict[tuple[str, ...], int]:
    """``{("notify", "sinks", "slack", "token_env"): line, …}`` for every mapping key."""
    if path is None:
        return {}
    import yaml

    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    out: dict[tuple[str, ...], int] = {}

    def walk(n: Any, at: tuple[str, ...]) -> None:
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = (*at, str(k.value))
                out[key] = k.start_mark.line + 1
                walk(v, key)
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                out[(*at, str(i))] = v.start_mark.line + 1
                walk(v, (*at, str(i)))

    walk(node, ())
    return out


def parse_notify(data: Any, lines: dict[str, int], path: str | None,
                 runbook_url: str | None = None) -> NotifyConfig:
    """Validate ``notify:`` (``data``); ``lines`` are the config's top-level key lines."""
    nested = key_lines(path)

    def at(*keys: str) -> str:
        line = nested.get(("notify", *keys)) or lines.get("notify", "?")
        return f"{path or 'config'}:{line}: notify" + "".join(f".{k}" for k in keys)

    if data is None:
        return NotifyConfig(path=path, runbook_url=runbook_url)
    if not isinstance(data, dict):
        raise InputError(f"{at()}: must be a mapping (sinks, routes, group_wait, …)")
    unknown = set(data) - _KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise InputError(f"{at(k)}: unknown setting (known: {', '.join(sorted(_KEYS))})")
    out: dict[str, Any] = {"path": path, "runbook_url": runbook_url}
    for k in _TIMERS:
        if k in data:
            out[k] = parse_duration(str(data[k]), what=at(k))
    for k in ("flap_count", "outbox_max"):
        if k in data:
            v = data[k]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"{at(k)}: must be a positive integer")
            out[k] = v
    if "send_resolved" in data:
        if not isinstance(data["send_resolved"], bool):
            raise InputError(f"{at('send_resolved')}: must be true or false")
        out["send_resolved"] = data["send_resolved"]
    sinks = _sinks(data.get("sinks") or {}, at)
    out["sinks"] = sinks
    names = {s.name for s in sinks}
    out["routes"] = _routes(data.get("routes") or [], names, at)
    if "inhibit" in data:
        out["inhibit"] = (Inhibit(frozenset(DEFAULT_INHIBITORS)),
                          *_inhibit(data["inhibit"] or [], at))
    return NotifyConfig(**out)


def _kinds(v: Any, where: str, allowed: tuple[str, ...], what: str) -> frozenset[str]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise InputError(f"{where}: must be a {what} or a list of them")
    for x in items:
        if x not in allowed:
            raise InputError(f"{where}: {x!r} is not a {what} (one of: {', '.join(allowed)})")
    return frozenset(items)


def _sinks(data: Any, at: Any) -> tuple[SinkSpec, ...]:
    """DESIGN.md's list ``[{name: slack, type: slack, …}, …]``, or a mapping name -> spec."""
    if isinstance(data, dict):
        items = [({**spec, "name": name} if isinstance(spec, dict) else spec, ("sinks", str(name)))
                 for name, spec in data.items()]
    elif isinstance(data, list):
        items = [(spec, ("sinks", str(i))) for i, spec in enumerate(data)]
    else:
        raise InputError(f"{at('sinks')}: must be a list of {{name: …, type: …, …}}")
    out, seen = [], set()
    for spec, keys in items:
        where = at(*keys)
        if not isinstance(spec, dict) or "type" not in spec or "name" not in spec:
            raise InputError(f"{where}: a sink is {{name: NAME, type: "
                             f"{'|'.join(SINK_TYPES)}, …}}")
        name = str(spec["name"])
        if name in seen:
            raise InputError(f"{where}: sink name {name!r} is used twice")
        seen.add(name)
        if spec["type"] not in SINK_TYPES:
            raise InputError(f"{at(*keys, 'type')}: unknown sink type {spec['type']!r} "
                             f"(one of: {', '.join(SINK_TYPES)})")
        opts = {k: v for k, v in spec.items() if k not in ("type", "name")}
        prefix = where.rsplit(": notify", 1)[0]  # file:line of this sink's entry
        out.append(SinkSpec(name, spec["type"], opts, f"{prefix}: notify.sinks.{name}"))
    return tuple(out)


def _routes(data: Any, names: set[str], at: Any) -> tuple[Route, ...]:
    if not isinstance(data, list):
        raise InputError(f"{at('routes')}: must be a list of {{severity, kind, sinks}}")
    out = []
    for i, r in enumerate(data):
        where = at("routes", str(i))
        if isinstance(r, dict) and isinstance(r.get("match"), dict):
            r = {**{k: v for k, v in r.items() if k != "match"}, **r["match"]}
        if not isinstance(r, dict) or "sinks" not in r or set(r) - {
                "severity", "kind", "sinks", "continue"}:
            raise InputError(f"{where}: a route is {{match: {{severity: …, kind: …}}, sinks: "
                             "[NAME, …], continue: false}}")
        sinks = [r["sinks"]] if isinstance(r["sinks"], str) else r["sinks"]
        for s in sinks:
            if s not in names:
                raise InputError(f"{where}: sink {s!r} is not defined under notify.sinks")
        out.append(Route(sinks=tuple(sinks),
                         severity=_kinds(r.get("severity", []), where, SEVERITIES, "severity"),
                         kind=_kinds(r.get("kind", []), where, KINDS, "kind"),
                         cont=bool(r.get("continue", False))))
    return tuple(out)


def _inhibit(data: Any, at: Any) -> list[Inhibit]:
    if not isinstance(data, list):
        raise InputError(f"{at('inhibit')}: must be a list of {{source: [KIND…], target: "
                         "[KIND…]}}")
    out = []
    for i, r in enumerate(data):
        where = at("inhibit", str(i))
        if not isinstance(r, dict) or "source" not in r or set(r) - {"source", "target"}:
            raise InputError(f"{where}: an inhibit rule is {{source: [KIND…], target: [KIND…]}}")
        out.append(Inhibit(_kinds(r["source"], where, KINDS, "kind"),
                           _kinds(r.get("target", []), where, KINDS, "kind")))
    return out
