"""The readable incident table ``watchdog replay`` prints (times in UTC).

One line per incident: kind, severity, GPUs, start, fired, resolved, summary. UTC because
recorded logs come from other machines and time zones; a post-mortem compares them with
job logs that are usually UTC too. ``fired`` and ``resolved`` carry the delay from
``start`` so the reader sees time-to-alert and duration without arithmetic. A host, GPU or
summary a log supplied is shown escaped (:func:`watchdog.escape.line`): a log cannot write
to the reader's terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from watchdog.escape import line as one_line
from watchdog.incident import Incident, duration, gpu_list

HEADERS = ("KIND", "SEVERITY", "HOST", "GPUS", "START (UTC)", "FIRED", "RESOLVED", "SUMMARY")


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%H:%M:%S")


def _since(ts: float | None, start: float, missing: str) -> str:
    if ts is None:
        return missing
    return f"{_clock(ts)} (+{duration(ts - start)})"


def rows(incidents: Iterable[Incident]) -> list[tuple[str, ...]]:
    """The table's cells, one tuple per incident, in the order of :data:`HEADERS`."""
    out: list[tuple[str, ...]] = []
    for inc in incidents:
        out.append((
            inc.kind, inc.severity, one_line(inc.host), one_line(gpu_list(inc.gpus)),
            _stamp(inc.started_at), _since(inc.fired_at, inc.started_at, "not fired"),
            _since(inc.resolved_at, inc.started_at, "active at end"),
            one_line(inc.summary),
        ))
    return out


def gpu_legend(incidents: Iterable[Incident]) -> str:
    """Which UUID each GPU index of the table is (indices renumber, UUIDs do not).

    One line per GPU named by an incident, ``host  GPU i  UUID``; empty when none.
    """
    seen: dict[tuple[str, int | str, str], None] = {}
    for inc in incidents:
        for g, u in zip(inc.gpus, inc.uuids, strict=False):
            key = int(g) if g.isdigit() else g
            seen[(inc.host, key, u)] = None
    rows = sorted(seen, key=lambda k: (k[0], str(type(k[1])), k[1]))
    if not rows:
        return ""
    width = max(len(h) for h, _, _ in rows)
    return "\n".join(one_line(f"  {h.ljust(width)}  GPU {i!s:<3} {u}") for h, i, u in rows)


def format_table(incidents: Sequence[Incident]) -> str:
    """The whole table as text (no trailing newline); a one-line note when there is none."""
    if not incidents:
        return "no incidents"
    body = rows(incidents)
    show_host = len({r[2] for r in body}) > 1
    cols = [i for i in range(len(HEADERS)) if show_host or HEADERS[i] != "HOST"]
    widths = {i: max(len(HEADERS[i]), *(len(r[i]) for r in body)) for i in cols}
    last = cols[-1]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cells[i] if i == last else cells[i].ljust(widths[i])
                         for i in cols).rstrip()

    return "\n".join([line(HEADERS), *(line(r) for r in body)])
