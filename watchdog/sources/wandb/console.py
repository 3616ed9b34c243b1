"""The job's own console lines: which to keep, and which belong next to an incident.

W&B records what the job printed (``output`` records: one line each; ``output_raw``:
raw chunks with progress-bar carriage returns and colour codes), with the time it was
printed. Most of it is progress bars. The reader keeps only lines that tell an on-call
engineer something about the GPUs' behaviour (:data:`NOTABLE`): an error or traceback's
last line, an out-of-memory report, a checkpoint being saved, NCCL complaints, a kill;
each cleaned of control characters and cut to :data:`MAX_CHARS`, a line repeated soon after
(the same line from every rank) once, at most :data:`MAX_KEPT` per run (the last ones: a
crash is at the end). The run's exit code comes from its ``exit`` record.

:func:`nearby` picks for one incident at most :data:`PER_INCIDENT` of them within
:data:`WINDOW_S` of it: errors first, then the rest, each group nearest the incident's
start first, listed in time order.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

#: Characters kept of one line.
MAX_CHARS = 240
#: Notable lines kept per run (the latest).
MAX_KEPT = 5000
#: Lines shown next to one incident.
PER_INCIDENT = 6
#: How far before an incident starts and after it ends (s) a line counts as nearby.
WINDOW_S = 300.0

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.")
_RANK = re.compile(r"^\[(?:rank|RANK)\s*\d+\]:?\s*")
#: What no terminal shows as text: C0 and C1 controls, zero-width and bidi controls.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
ERROR = re.compile(
    r"Traceback|Error\b|Error:|Exception\b|out of memory|OutOfMemory|\bOOM\b|Killed|"
    r"Segmentation fault|core dumped|NCCL (?:WARN|ERROR)|Watchdog caught|timed out|"
    r"[Tt]imeout|SIGTERM|SIGKILL|exitcode|exit code|CUDA error|ECC|Xid", re.ASCII)
CHECKPOINT = re.compile(r"checkpoint|[Ss]aving|[Ss]aved|save_pretrained|save_model",
                        re.ASCII)


@dataclass(frozen=True, slots=True)
class ConsoleLine:
    """One line the job printed: ``ts`` POSIX s, ``stream`` ``stdout`` | ``stderr`` |
    ``exit`` (the run's exit code, said as a line at the run's last time), ``text``
    cleaned, ``what`` ``error`` | ``checkpoint`` | ``exit``."""

    ts: float
    stream: str
    text: str
    what: str

    def to_json(self) -> dict[str, object]:
        from watchdog.incident import iso

        return {"at": iso(self.ts), "stream": self.stream, "kind": self.what,
                "text": self.text}


def clean(raw: str) -> str:
    """A console line as a person reads it: what a carriage return left visible, colour
    and cursor codes removed, other control characters dropped, cut to MAX_CHARS."""
    s = raw.rsplit("\r", 1)[-1] if "\r" in raw.rstrip("\r") else raw.rstrip("\r")
    s = _CONTROL.sub(" ", _ANSI.sub("", s)).strip()
    return s[:MAX_CHARS - 1] + "…" if len(s) > MAX_CHARS else s


def classify(text: str) -> str | None:
    """``error``, ``checkpoint`` or None (a line not worth keeping)."""
    if ERROR.search(text):
        return "error"
    if CHECKPOINT.search(text):
        return "checkpoint"
    return None


class Keeper:
    """Collects the notable lines of a run as its records are read."""

    def __init__(self) -> None:
        self.lines: deque[ConsoleLine] = deque(maxlen=MAX_KEPT)
        self.seen = 0  # console lines read, notable or not
        self._recent: deque[str] = deque(maxlen=64)  # the same line from every rank

    def add(self, ts: float | None, stream: str, chunk: str) -> None:
        for raw in chunk.split("\n"):
            if not raw.strip():
                continue
            self.seen += 1
            if ts is None or not (ERROR.search(raw) or CHECKPOINT.search(raw)):
                continue  # (most lines: progress bars; the words survive cleaning)
            text = clean(raw)
            what = classify(text) if text else None
            if what is None:
                continue
            key = _RANK.sub("", text)[:120]  # the first 120 characters tell repeats
            if key in self._recent:
                continue
            self._recent.append(key)
            self.lines.append(ConsoleLine(ts, stream, text, what))


def nearby(lines: Iterable[ConsoleLine], start: float, end: float,
           limit: int = PER_INCIDENT) -> list[ConsoleLine]:
    """The lines within :data:`WINDOW_S` of ``[start, end]`` worth showing next to an
    incident: errors and the exit first, then checkpoints, each nearest ``start`` first;
    at most ``limit``, in time order."""
    near = [ln for ln in lines if start - WINDOW_S <= ln.ts <= end + WINDOW_S]
    near.sort(key=lambda ln: (ln.what == "checkpoint", abs(ln.ts - start)))
    return sorted(near[:limit], key=lambda ln: ln.ts)
