"""``watchdog check`` for a human: a Nagios status line, a per-GPU table, the problems.

Layout::

    WATCHDOG CRITICAL - GPU 3 gpu_lost: GPU is lost (...); 1 more problem
    host node-07 · driver 565.57.01 · 8 GPUs (expected 8) · 4 readings over 1.5 s
    GPU  Model           Temp  Power      Util  Memory         SM clock  Clocks       Verdict
      0  H100 80GB HBM3  45 C  690/700 W  100%  75.1/79.6 GiB  1980 MHz  pwrcap,sync  OK
      3  H100 80GB HBM3     -  -             -  -                     -  -            CRITICAL
    ...     (a last column, Finding, names the checks: gpu_lost, xid)
    clock events: pwrcap = SW power cap, sync = sync boost
    problems:
      CRITICAL GPU 3 gpu_lost: GPU is lost (...)
    verdict: CRITICAL (1 critical, 1 warning)

The first line is what Nagios shows as the service's status text. A problem is said once,
the same way on the first line and under ``problems:``: where (``GPU 7``, ``GPUs 0-6`` or
``node``), the check (left out when the text starts with it: ``GPU 2: XID 79 (...)``),
then the text without the rule name or the GPU it already named
(:func:`problem_text`). The table row names only the findings; their text is below it.
The table fits the terminal (:func:`table_width`: its width on a terminal, 120 columns
otherwise): clock-event reasons are short codes with a legend line, the normal ones
(power cap, sync boost, idle) are left out of a row first when it is too wide, then long
cells are cut with ``…``. Missing values print as ``-``, never 0. Colour (ANSI) only when
the caller says so: stdout is a terminal, ``NO_COLOR`` is unset and ``--no-color`` was not
given (:func:`use_color`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from collections.abc import Mapping
from typing import TextIO

from watchdog import reasons
from watchdog.check.judge import RANK, GpuVerdict, Problem, Status, Verdict
from watchdog.escape import line as one_line
from watchdog.report.table import gpu_list

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


#: Short codes of the clock-event reasons for the table (the legend line spells out the
#: ones shown; ``--json`` has the full flag names).
CLOCK_CODES: dict[int, str] = {
    reasons.GPU_IDLE: "idle", reasons.APPLICATIONS_CLOCKS: "locked",
    reasons.SW_POWER_CAP: "pwrcap", reasons.HW_SLOWDOWN: "HWslow",
    reasons.SYNC_BOOST: "sync", reasons.SW_THERMAL: "SWtherm",
    reasons.HW_THERMAL: "HWtherm", reasons.HW_POWER_BRAKE: "brake",
    reasons.DISPLAY_CLOCKS: "display",
}
CLOCK_WORDS: dict[str, str] = {
    CLOCK_CODES[bit]: words for bit, (_, words) in reasons.REASONS.items()}
CLOCK_WORDS["pwrcap"] = "SW power cap"  # "power cap" alone hides that it is the normal one
_NORMAL_CODES = frozenset(CLOCK_CODES[b] for b in CLOCK_CODES if b & reasons.BENIGN)

_RULE_PREFIX = re.compile(r"^[a-z][a-z0-9_]*: ")


def table_width(stream: TextIO | None = None) -> int:
    """Columns the table may use: the terminal's width when ``stream`` (stdout) is one,
    else 120 (a log, a pipe, Nagios)."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if isatty and isatty():
        return shutil.get_terminal_size((120, 24)).columns
    return 120


def problem_text(p: Problem) -> tuple[str, str]:
    """``(label, text)``: the problem said once. ``thermal_throttle: GPU 7 thermal slowdown:
    89 C`` on GPU 7 -> ``("GPU 7 thermal_throttle", "thermal slowdown: 89 C")``; ``XID 79
    (…)`` (check ``xid``) -> ``("GPU 2", "XID 79 (…)")``; node-level -> ``("node", …)``."""
    text = _RULE_PREFIX.sub("", p.message, count=1)  # the rule's name, said by the check
    where = "node" if p.gpu is None else f"GPU {p.gpu}"
    if p.gpu is not None:
        for own in (f"GPU {p.gpu}: ", f"GPU {p.gpu} "):
            if text.startswith(own):
                text = text[len(own):]
                break
    says_it = text.lower().replace(" ", "_").startswith(p.check.lower())
    if p.gpu is None or p.check == "probe" or says_it:
        return where, text
    return f"{where} {p.check}", text


def grouped(problems: list[Problem]) -> list[tuple[Status, str, str]]:
    """``(severity, label, text)`` per statement, worst first: the same finding on several
    GPUs (a whole job hung) is one statement on ``GPUs 0-7``, not eight."""
    groups: dict[tuple[Status, str, str], list[Problem]] = {}
    for p in sorted(problems, key=lambda p: -RANK[p.severity]):
        label, text = problem_text(p)
        key = (p.severity, p.check if p.gpu is not None else f"node:{label}", text)
        groups.setdefault(key, []).append(p)
    out = []
    for (severity, _, text), ps in groups.items():
        label, _ = problem_text(ps[0])
        if len(ps) > 1:
            gpus = "GPUs " + gpu_list([str(p.gpu) for p in ps])
            label = label.replace(f"GPU {ps[0].gpu}", gpus, 1)
        out.append((severity, label, text))
    return out


def status_line(v: Verdict) -> str:
    """Nagios-style first line: ``WATCHDOG <STATUS> - <worst problem>[; N more]``."""
    if not v.problems:
        return f"WATCHDOG OK - {len(v.gpus)} GPUs healthy"
    said = grouped(v.problems)
    _, label, text = said[0]
    more = len(said) - 1
    tail = f"; {more} more problem{'s' if more > 1 else ''}" if more else ""
    return one_line(f"WATCHDOG {v.status.name} - {label}: {text}{tail}")


def header_line(v: Verdict) -> str:
    """Host, driver, GPU count (and expectation), burst length."""
    expected = f" (expected {v.expected_gpus})" if v.expected_gpus is not None else ""
    readings = max((g.samples for g in v.gpus), default=0)
    return one_line(f"host {v.host} · driver {v.driver or '-'} · {len(v.gpus)} GPUs"
                    f"{expected} · {readings} readings over {v.duration_s:.1f} s · source "
                    f"{v.source}")


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
    events = ",".join(clock_codes(s.get("clocks_event_reasons.active"))) or "-"
    return [str(g.index), short_name(g.name), _fmt(s.get("temperature.gpu"), unit=" C"), power,
            _fmt(s.get("utilization.gpu"), unit="%"), mem,
            _fmt(s.get("clocks.sm"), unit=" MHz"), events]


def clock_codes(mask: int | float | None) -> list[str]:
    """Short codes of the clock-event reasons set in ``mask`` (:data:`CLOCK_CODES`)."""
    if mask is None or mask != mask:
        return []
    m = int(mask)
    return [code for bit, code in CLOCK_CODES.items() if m & bit]


def findings(g: GpuVerdict) -> str:
    """The row's last cell: the checks that found something, worst first, once each."""
    names: dict[str, None] = {}
    for p in sorted(g.problems, key=lambda p: -RANK[p.severity]):
        names.setdefault(p.check, None)
    return ", ".join(names)


HEADERS = ["GPU", "Model", "Temp", "Power", "Util", "Memory", "SM clock", "Clocks",
           "Verdict", "Finding"]
_CLOCKS, _VERDICT, _FINDING, _MODEL = 7, 8, 9, 1
_RIGHT = {0, 2, 4, 6}  # numeric columns


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _fit(rows: list[list[str]], width: int) -> list[int]:
    """Column widths for ``rows`` within ``width`` columns: drop the normal clock-event
    codes from rows that are too wide, then cut the finding, clock and model cells."""
    def widths() -> list[int]:
        w = [len(h) for h in HEADERS]
        for cells in rows:
            w = [max(a, len(c)) for a, c in zip(w, cells, strict=True)]
        return w

    def total(w: list[int]) -> int:
        return sum(w) + 2 * (len(w) - 1)

    w = widths()
    if total(w) > width:  # the normal reasons go first, from the rows too wide only
        room = w[_CLOCKS] - (total(w) - width)
        for cells in rows:
            if len(cells[_CLOCKS]) > room:
                codes = [c for c in cells[_CLOCKS].split(",") if c not in _NORMAL_CODES]
                cells[_CLOCKS] = ",".join(codes) or "-"
        w = widths()
    for col, least in ((_FINDING, 12), (_CLOCKS, 10), (_MODEL, 8)):
        over = total(w) - width
        if over <= 0:
            break
        w[col] = max(least, len(HEADERS[col]), w[col] - over)
        for cells in rows:
            cells[col] = _cut(cells[col], w[col])
    return w


def legend(rows: list[list[str]], width: int) -> list[str]:
    """``clock events: HWslow = HW slowdown, sync = sync boost``: the codes shown."""
    shown = {c for cells in rows for c in cells[_CLOCKS].rstrip("…").split(",")}
    words = [f"{c} = {CLOCK_WORDS[c]}" for c in CLOCK_CODES.values() if c in shown]
    if not words:
        return []
    return textwrap.wrap("clock events: " + ", ".join(words), width=max(40, width),
                         subsequent_indent="  ")


def render(v: Verdict, color: bool = False, width: int | None = None) -> str:
    """The whole human report (ends with a newline). ``width``: columns the table may
    use (default :func:`table_width` of stdout)."""
    width = table_width() if width is None else width
    rows: list[list[str]] = []
    statuses: list[Status] = []
    for g in v.gpus:
        rows.append([one_line(c) for c in (*gpu_row(g)[:8], g.status.name, findings(g))])
        statuses.append(g.status)
    widths = _fit(rows, width)

    def line(cells: list[str], status: Status | None = None) -> str:
        out = []
        for i, (c, w) in enumerate(zip(cells, widths, strict=True)):
            text = c.rjust(w) if i in _RIGHT else c.ljust(w)
            if status is not None and i == _VERDICT:  # colour the word, not its padding
                text = paint(c, status, color) + " " * (w - len(c))
            out.append(text)
        return "  ".join(out).rstrip()

    lines = [paint(status_line(v), v.status, color), header_line(v)]
    if rows:
        lines.append(line(HEADERS))
        lines += [line(cells, status) for status, cells in zip(statuses, rows, strict=True)]
        lines += legend(rows, width)
    if v.problems:
        lines.append("problems:")
        for severity, label, text in grouped(v.problems):
            lines.append(f"  {paint(severity.name, severity, color)} {one_line(label)}: "
                         f"{one_line(text)}")
    counts = {s: sum(1 for p in v.problems if p.severity is s) for s in Status}
    summary = ", ".join(f"{n} {s.name.lower()}" for s, n in counts.items() if n)
    lines.append(f"verdict: {paint(v.status.name, v.status, color)}"
                 + (f" ({summary})" if summary else ""))
    return "\n".join(lines) + "\n"
