"""``watchdog check`` for a human: a Nagios status line, a per-GPU table, the problems.

Layout::

    WATCHDOG CRITICAL - GPU 3: GPU is lost (...); 1 more problem
    host node-07 · driver 565.57.01 · 8 GPUs (expected 8) · 4 readings over 1.5 s
    GPU  Model           Temp   Power       Util  Memory          SM clock  Clock events  Verdict
      0  H100 80GB HBM3  45 C   690/700 W   100%  75.1/79.6 GiB   1980 MHz  power cap     OK
    ...
    problems:
      CRITICAL GPU 3 [gpu_lost]: GPU is lost (...)
    verdict: CRITICAL (1 critical, 1 warning)

The first line is what Nagios shows as the service's status text. Missing values print as
``-``, never 0. Colour (ANSI) only when the caller says so: stdout is a terminal, ``NO_COLOR``
is unset and ``--no-color`` was not given (:func:`use_color`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

from watchdog import reasons
from watchdog.check.judge import RANK, GpuVerdict, Problem, Status, Verdict

_COLORS = {Status.OK: "32", Status.WARNING: "33", Status.CRITICAL: "1;31", Status.UNKNOWN: "35"}


def use_color(stream: TextIO, no_color: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set (https://no-color.org)."""
    if no_color or environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, status: Status, color: bool) -> str:
    """``text`` in the status colour when ``color``."""
    return f"\033[{_COLORS[status]}m{text}\033[0m" if color else text


def short_name(name: str | None) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100 80GB HBM3``; ``-`` when unknown."""
    if not name:
        return "-"
    for prefix in ("NVIDIA ", "Tesla ", "GeForce "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name if len(name) <= 20 else name[:19] + "…"


def _fmt(v: float | None, spec: str = ".0f", unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def _problem_line(p: Problem) -> str:
    where = f"GPU {p.gpu}" if p.gpu is not None else "node"
    return f"{where}: {p.message}"


def status_line(v: Verdict) -> str:
    """Nagios-style first line: ``WATCHDOG <STATUS> - <worst problem>[; N more]``."""
    if not v.problems:
        return f"WATCHDOG OK - {len(v.gpus)} GPUs healthy"
    ordered = sorted(v.problems, key=lambda p: -RANK[p.severity])
    top = ordered[0]
    # The same finding on several GPUs (a whole job hung) is one statement, not N.
    same = [p for p in ordered if p.gpu is not None and (p.check, p.severity)
            == (top.check, top.severity) and p.message.split(":")[0]
            == top.message.split(":")[0]]
    head = _problem_line(top)
    if top.gpu is not None and len(same) > 1:
        head = f"GPUs {','.join(str(p.gpu) for p in same)}: {top.message}"
    more = len(ordered) - max(1, len(same) if top.gpu is not None else 1)
    tail = f"; {more} more problem{'s' if more > 1 else ''}" if more else ""
    return f"WATCHDOG {v.status.name} - {head}{tail}"


def header_line(v: Verdict) -> str:
    """Host, driver, GPU count (and expectation), burst length."""
    expected = f" (expected {v.expected_gpus})" if v.expected_gpus is not None else ""
    readings = max((g.samples for g in v.gpus), default=0)
    return (f"host {v.host} · driver {v.driver or '-'} · {len(v.gpus)} GPUs{expected} · "
            f"{readings} readings over {v.duration_s:.1f} s · source {v.source}")


def gpu_row(g: GpuVerdict) -> list[str]:
    """Cells of one table row (status and reason cells uncoloured)."""
    s = g.last
    if s is None or s.lost:
        blank = ["-"] * 6
        return [str(g.index), short_name(g.name), *blank, "lost" if s else "no reading"]
    limit = s.get("enforced.power.limit") or (g.device.power_limit_enforced_w
                                              if g.device else None)
    total = s.get("memory.total") or (g.device.memory_total_mib if g.device else None)
    used = s.get("memory.used")
    mem = f"{_fmt(used and used / 1024, '.1f')}/{_fmt(total and total / 1024, '.1f')} GiB"
    if used is None and total is None:
        mem = "-"
    power = f"{_fmt(s.get('power.draw'))}/{_fmt(limit)} W"
    events = ", ".join(reasons.decode(s.get("clocks_event_reasons.active"))) or "-"
    return [str(g.index), short_name(g.name), _fmt(s.get("temperature.gpu"), unit=" C"), power,
            _fmt(s.get("utilization.gpu"), unit="%"), mem,
            _fmt(s.get("clocks.sm"), unit=" MHz"), events]


HEADERS = ["GPU", "Model", "Temp", "Power", "Util", "Memory", "SM clock", "Clock events",
           "Verdict", "Reason"]


def render(v: Verdict, color: bool = False) -> str:
    """The whole human report (ends with a newline)."""
    rows = []
    for g in v.gpus:
        cells = gpu_row(g)
        ordered = sorted(g.problems, key=lambda p: -RANK[p.severity])
        reason = ordered[0].message if ordered else ""
        if len(ordered) > 1:
            reason += f" (+{len(ordered) - 1} more)"
        rows.append((g.status, [*cells[:8], g.status.name, reason]))
    widths = [len(h) for h in HEADERS]
    for _, cells in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]
    right = {0, 2, 4, 6}  # numeric columns

    def line(cells: list[str], status: Status | None = None) -> str:
        out = []
        for i, (c, w) in enumerate(zip(cells, widths, strict=True)):
            text = c.rjust(w) if i in right else c.ljust(w)
            if status is not None and i == 8:  # colour the word, not its padding
                text = paint(c, status, color) + " " * (w - len(c))
            out.append(text)
        return "  ".join(out).rstrip()

    lines = [paint(status_line(v), v.status, color), header_line(v)]
    if rows:
        lines.append(line(HEADERS))
        lines += [line(cells, status) for status, cells in rows]
    if v.problems:
        lines.append("problems:")
        for p in sorted(v.problems, key=lambda p: -RANK[p.severity]):
            where = f"GPU {p.gpu}" if p.gpu is not None else "node"
            lines.append(f"  {paint(p.severity.name, p.severity, color)} {where} "
                         f"[{p.check}]: {p.message}")
    counts = {s: sum(1 for p in v.problems if p.severity is s) for s in Status}
    summary = ", ".join(f"{n} {s.name.lower()}" for s, n in counts.items() if n)
    lines.append(f"verdict: {paint(v.status.name, v.status, color)}"
                 + (f" ({summary})" if summary else ""))
    return "\n".join(lines) + "\n"
