"""``watchdog check --mode``: one verdict, read the way each scheduler reads exit codes.

* ``nagios`` (default): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, the table or ``--json``.
* ``slurm``: for a Prolog or Epilog, where *any* non-zero exit drains the node. Exit 1
  only for what should drain it (a critical finding of a kind in
  :data:`watchdog.cluster.DRAIN_KINDS`), else 0: a warning, a hung collective, or a
  failure to judge (no driver, a bad option, the agent not running) change nothing.
  One line on stdout.
* ``npd``: node-problem-detector's custom-plugin contract: 0 OK, 1 problem, 2 Unknown
  (it reads anything but 0 and 1 as Unknown), one line of at most :data:`NPD_MAX`
  printable ASCII characters (its ``max_output_length``; it cuts bytes, so no UTF-8).
  With ``--category C`` only that NodeCondition's kinds count (``GpuWatchdog<C>``, see
  :data:`watchdog.cluster.CONDITIONS`); ``--category events`` answers the Event rule:
  1 while anything active sets no condition (warnings; a critical hang).

A verdict the probe could not reach at all (the ``probe`` check: no NVML, a bad option,
the agent not running or stale) is "cannot judge" in every mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from watchdog.check.verdict import Problem, Status, Verdict
from watchdog.cluster import CONDITIONS, DRAIN_KINDS, EVENTS, category_of, kind_of_check

MODES = ("nagios", "slurm", "npd")
CATEGORIES = (*(c.lower() for c in CONDITIONS), EVENTS)
NPD_MAX = 80  # characters (bytes: ASCII only) node-problem-detector keeps of the output


def _category(name: str | None) -> str | None:
    """``--category`` (lower case) -> the key of :data:`CONDITIONS` or ``EVENTS``."""
    if name is None or name == EVENTS:
        return name
    return next(c for c in CONDITIONS if c.lower() == name)


def _sets_condition(p: Problem, category: str | None) -> bool:
    """A critical finding whose kind belongs to ``category`` (any category for None)."""
    if p.severity is not Status.CRITICAL:
        return False
    cat = category_of(kind_of_check(p.check))
    return cat is not None and (category is None or cat == category)


def _event(p: Problem) -> bool:
    return p.severity in (Status.WARNING, Status.CRITICAL) and not _sets_condition(p, None)


def cannot_judge(v: Verdict) -> bool:
    """The probe reached no verdict at all (the node-level ``probe`` finding)."""
    return any(p.check == "probe" for p in v.problems)


def drains(v: Verdict) -> list[Problem]:
    """The findings that should take the node out of service (``slurm`` mode)."""
    return [p for p in v.problems if p.severity is Status.CRITICAL
            and kind_of_check(p.check) in DRAIN_KINDS]


def npd_problems(v: Verdict, category: str | None) -> list[Problem]:
    cat = _category(category)
    if cat == EVENTS:
        return [p for p in v.problems if _event(p)]
    return [p for p in v.problems if _sets_condition(p, cat)]


def exit_code(v: Verdict, mode: str, category: str | None = None) -> int:
    """The exit code of ``v`` in ``mode``."""
    if mode == "slurm":
        return 1 if drains(v) and not cannot_judge(v) else 0
    if mode == "npd":
        if cannot_judge(v):
            return 2
        if npd_problems(v, category):
            return 1
        return 2 if any(p.severity is Status.UNKNOWN for p in v.problems) else 0
    return v.exit_code


def printable(text: str, limit: int) -> str:
    """``text`` as one line of printable ASCII of at most ``limit`` characters."""
    out = "".join(c if " " <= c <= "~" else " " for c in text)
    out = " ".join(out.split())
    return out if len(out) <= limit else out[:limit - 3].rstrip() + "..."


def _what(problems: Sequence[Problem]) -> str:
    first = problems[0]
    where = f"GPU {first.gpu} " if first.gpu is not None else ""
    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}{kind_of_check(first.check)}: {first.message}{more}"


def line(v: Verdict, mode: str, category: str | None = None) -> str:
    """The one line ``slurm`` and ``npd`` modes print."""
    if cannot_judge(v):
        why = next(p.message for p in v.problems if p.check == "probe")
        text = f"cannot judge: {why}"
    elif mode == "slurm":
        bad = drains(v)
        worst = f" ({v.status.name.lower()} at worst)" if v.problems else ""
        text = f"DRAIN {_what(bad)}" if bad else f"OK: nothing to drain{worst}"
        return printable(f"watchdog: {text}", 240)
    else:
        bad = npd_problems(v, category)
        if bad:
            text = _what(bad)
        elif any(p.severity is Status.UNKNOWN for p in v.problems):
            text = "cannot judge: " + next(p.message for p in v.problems
                                           if p.severity is Status.UNKNOWN)
        else:
            text = "healthy"
    return printable(text, NPD_MAX if mode == "npd" else 240)
