"""The ``notify:`` section of the daemon's config: timers, inhibition, routes and sinks.

Every problem is one :class:`InputError` naming ``file:line`` and the key, so a bad edit
fails ``watchdog run`` at start and a SIGHUP keeps the running config. Sink options are
checked by the sink's own ``from_config`` (secrets are read there, from the environment or
a file the config names; never from this file).

Durations are clock seconds: grouping timers run on the agent's injected clock, so a
simulated node at ``--speed 30`` groups in simulated time. Every timer and count has a
range (:data:`RANGES`); a value outside it is an :class:`InputError` naming the range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from watchdog.errors import InputError
from watchdog.incident import KINDS, SEVERITIES
from watchdog.notify import sinks as sink_types
from watchdog.paths import beside
from watchdog.units import duration_in, number_in
from watchdog.untyped import Json, JsonDoc

if TYPE_CHECKING:
    import yaml


class At(Protocol):
    """``file:line: notify.KEY…`` of the keys given (for an error line)."""

    def __call__(self, *keys: str) -> str: ...

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
    options: JsonDoc
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
    extra: JsonDoc = field(default_factory=dict)

    def sinks_for(self, severity: str, kind: str, down: str | None = None) -> tuple[str, ...]:
        """Sink names an alert of ``severity`` and ``kind`` is routed to. ``down``: the
        sink the agent's own incident is about (kind ``agent``, label ``sink``), which is
        down: never routed to it, and to every other sink where the routes leave none (it
        must reach someone who can fix it)."""
        if not self.routes:
            out = [s.name for s in self.sinks]
        else:
            out = []
            for r in self.routes:
                if r.matches(severity, kind):
                    out.extend(s for s in r.sinks if s not in out)
                    if not r.cont:
                        break
        if down is None or kind != "agent":
            return tuple(out)
        return tuple(s for s in out if s != down) or tuple(
            s.name for s in self.sinks if s.name != down)


_TIMERS = ("group_wait", "group_interval", "repeat_interval", "resolve_hold", "flap_window",
           "flap_hold", "restart_grace", "sink_fail_after", "drain_timeout")
_M, _H, _D = 60.0, 3600.0, 86400.0
#: (low, high) of every timer (seconds) and count, both ends included.
RANGES: dict[str, tuple[float, float]] = {
    "group_wait": (0.0, _H),
    "group_interval": (0.0, _D),
    "repeat_interval": (_M, 30 * _D),
    "resolve_hold": (0.0, _D),
    "flap_window": (_M, 7 * _D),
    "flap_hold": (0.0, 7 * _D),
    "restart_grace": (0.0, _D),
    "sink_fail_after": (10.0, 7 * _D),
    "drain_timeout": (0.0, _M),  # the unit's TimeoutStopSec is 30 s: keep it below that
    "flap_count": (1, 1000),
    "outbox_max": (1, 1_000_000),
}
_KEYS = {*_TIMERS, "flap_count", "send_resolved", "outbox_max", "routes", "inhibit", "sinks"}


def key_lines(path: str | Path | None, node: yaml.Node | None = None
              ) -> dict[tuple[str, ...], int]:
    """``{("notify", "sinks", "slack", "token_env"): line, …}`` for every mapping key of
    the config's node graph ``node`` (or of the file ``path``, read within the bounds of
    :mod:`watchdog.yamlsafe`, which also bounds this walk)."""
    import yaml

    if node is None:
        if path is None:
            return {}
        from watchdog import yamlsafe

        try:
            node = yamlsafe.compose(yamlsafe.read_text(path, "config"), str(path))
        except InputError:
            return {}
    out: dict[tuple[str, ...], int] = {}

    def walk(n: yaml.Node, at: tuple[str, ...]) -> None:
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


def parse_notify(data: Json, lines: dict[str, int], path: str | None,
                 runbook_url: str | None = None, node: yaml.Node | None = None
                 ) -> NotifyConfig:
    """Validate ``notify:`` (``data``); ``lines`` are the config's top-level key lines,
    ``node`` the config's YAML node graph (read again from ``path`` when not given)."""
    nested = key_lines(path, node)

    def at(*keys: str) -> str:
        line = nested.get(("notify", *keys)) or lines.get("notify") or "?"
        return f"{path or 'config'}:{line}: notify" + "".join(f".{k}" for k in keys)

    if data is None:
        return NotifyConfig(path=path, runbook_url=runbook_url)
    if not isinstance(data, dict):
        raise InputError(f"{at()}: must be a mapping (sinks, routes, group_wait, …)")
    unknown = set(data) - _KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise InputError(f"{at(k)}: unknown setting (known: {', '.join(sorted(_KEYS))})")
    out: JsonDoc = {"path": path, "runbook_url": runbook_url}
    for k in _TIMERS:
        if k in data:
            lo, hi = RANGES[k]
            out[k] = duration_in(data[k], lo, hi, what=at(k))
    for k in ("flap_count", "outbox_max"):
        if k in data:
            lo, hi = RANGES[k]
            out[k] = int(number_in(data[k], int(lo), int(hi), what=at(k), integer=True))
    if "send_resolved" in data:
        if not isinstance(data["send_resolved"], bool):
            raise InputError(f"{at('send_resolved')}: must be true or false")
        out["send_resolved"] = data["send_resolved"]
    sinks = _sinks(data.get("sinks") or {}, at, path)
    out["sinks"] = sinks
    names = {s.name for s in sinks}
    out["routes"] = _routes(data.get("routes") or [], names, at)
    if "inhibit" in data:
        out["inhibit"] = (Inhibit(frozenset(DEFAULT_INHIBITORS)),
                          *_inhibit(data["inhibit"] or [], at))
    return NotifyConfig(**out)


def _kinds(v: Json, where: str, allowed: tuple[str, ...], what: str) -> frozenset[str]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise InputError(f"{where}: must be a {what} or a list of them")
    for x in items:
        if x not in allowed:
            raise InputError(f"{where}: {x!r} is not a {what} (one of: {', '.join(allowed)})")
    return frozenset(items)


def _sinks(data: Json, at: At, path: str | None = None) -> tuple[SinkSpec, ...]:
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
                             f"{'|'.join(sink_types.TYPES)}, …}}")
        name = str(spec["name"])
        if name in seen:
            raise InputError(f"{where}: sink name {name!r} is used twice")
        seen.add(name)
        if spec["type"] not in sink_types.TYPES:
            raise InputError(f"{at(*keys, 'type')}: unknown sink type {spec['type']!r} "
                             f"(one of: {', '.join(sink_types.TYPES)})")
        # a file the sink reads (token_file, ca_file, …) is relative to the config's folder
        opts = {k: beside(v, path) if k.endswith("_file") and isinstance(v, str) else v
                for k, v in spec.items() if k not in ("type", "name")}
        prefix = where.rsplit(": notify", 1)[0]  # file:line of this sink's entry
        out.append(SinkSpec(name, spec["type"], opts, f"{prefix}: notify.sinks.{name}"))
    return tuple(out)


def _routes(data: Json, names: set[str], at: At) -> tuple[Route, ...]:
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
        if not isinstance(sinks, list) or not all(isinstance(s, str) for s in sinks):
            raise InputError(f"{where}: sinks must be a sink name or a list of them")
        for s in sinks:
            if s not in names:
                raise InputError(f"{where}: sink {s!r} is not defined under notify.sinks")
        out.append(Route(sinks=tuple(sinks),
                         severity=_kinds(r.get("severity", []), where, SEVERITIES, "severity"),
                         kind=_kinds(r.get("kind", []), where, KINDS, "kind"),
                         cont=bool(r.get("continue", False))))
    return tuple(out)


def _inhibit(data: Json, at: At) -> list[Inhibit]:
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
