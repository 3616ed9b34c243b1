"""Parse ``--source sim[:ITEM[,ITEM…]]`` into scenario requests.

Grammar (whitespace is ignored)::

    SPEC   := "sim" [ ":" ITEM ( "," ITEM )* ]
    ITEM   := NAME [ "(" PARAM ( "," PARAM )* ")" ] [ "@" DURATION ]
    PARAM  := KEY "=" VALUE
    DURATION := NUMBER [ "s" | "m" | "h" ]           (seconds by default)

Examples: ``sim``, ``sim:healthy``, ``sim:comm_hang@300``,
``sim:comm_hang(gpus=0-3,dead=2)@10m``, ``sim:xid(code=48,gpus=5),thermal_throttle``.
A GPU list is ``all``, an index, a range ``0-3`` or indices joined by ``+``
(``0+2+5``, ``0-1+6``). ``@T`` is the onset in seconds after the node starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from watchdog import units
from watchdog.errors import InputError

_ITEM = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\((?P<params>[^()]*)\))?"
                   r"(?:@(?P<onset>[^@()]+))?$")
MAX_DURATION_S = 366 * 86400.0
MAX_ITEMS = 64  # scenarios in one spec


@dataclass(frozen=True, slots=True)
class Request:
    """One scenario as written: name, raw parameters, onset (s after start) if given."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    onset: float | None = None
    text: str = ""


def parse_duration(text: str, what: str) -> float:
    """``300``, ``300s``, ``5m``, ``1.5h`` -> seconds; :class:`InputError` names ``what``."""
    seconds = units.parse_duration(text, what=what)
    if seconds > MAX_DURATION_S:
        raise InputError(f"{what}: {text!r} is longer than a year")
    return seconds


def parse_gpus(text: str, n: int, what: str) -> tuple[int, ...]:
    """``all`` | ``3`` | ``0-3`` | ``0+2+5`` -> sorted unique indices below ``n``."""
    t = text.strip().lower()
    if t == "all":
        return tuple(range(n))
    out: set[int] = set()
    for part in t.split("+"):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not m:
            raise InputError(f"{what}: {text!r} is not a GPU list (e.g. 3, 0-3, 0+2, all)")
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        if hi < lo:
            raise InputError(f"{what}: range {part!r} runs backwards")
        if hi >= n:
            raise InputError(f"{what}: GPU {hi} does not exist (the node has GPUs 0-{n - 1})")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def split_items(body: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    items: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in body:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise InputError(f"--source sim:{body}: unbalanced ')'")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise InputError(f"--source sim:{body}: unbalanced '('")
    items.append("".join(cur))
    return items


def parse_spec(spec: str) -> list[Request]:
    """Parse a ``sim…`` source spec into requests (names are not checked here)."""
    s = "".join(spec.split())
    if s == "sim":
        return []
    if not s.startswith("sim:"):
        raise InputError(f"--source {spec!r}: a simulated source is 'sim' or 'sim:SCENARIO,…'")
    body = s[4:]
    if not body:
        raise InputError(f"--source {spec!r}: no scenario after 'sim:'")
    items = split_items(body)
    if len(items) > MAX_ITEMS:
        raise InputError(f"--source {spec[:60]!r}…: {len(items)} scenarios, at most "
                         f"{MAX_ITEMS} in one spec")
    out: list[Request] = []
    for item in items:
        m = _ITEM.match(item)
        if not m:
            raise InputError(
                f"--source {spec!r}: cannot read {item!r} "
                "(expected NAME, NAME(key=value,…) or NAME@SECONDS)")
        params: dict[str, str] = {}
        if m["params"]:
            for pair in m["params"].split(","):
                if "=" not in pair:
                    raise InputError(f"--source {spec!r}: {item!r}: expected key=value, "
                                     f"got {pair!r}")
                k, v = pair.split("=", 1)
                if not k or not v:
                    raise InputError(f"--source {spec!r}: {item!r}: empty key or value in "
                                     f"{pair!r}")
                if k in params:
                    raise InputError(f"--source {spec!r}: {item!r}: {k!r} given twice")
                params[k.lower()] = v
        onset = None
        if m["onset"] is not None:
            onset = parse_duration(m["onset"], f"--source {spec!r}: {item!r}: onset")
        out.append(Request(m["name"].lower(), params, onset, item))
    return out
