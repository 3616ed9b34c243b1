"""Recorded telemetry: ``nvidia-smi`` CSV and ``dmon`` logs, any CSV through a mapping, and
the project's own recording format (``.wdrec``, see ``docs/recording-format.md``).

Entry point: :func:`open_log` -> :class:`Recording`.

The frame contract (``Recording.frame``, what the block detector consumes)
------------------------------------------------------------------------
A pandas DataFrame, one row per (time, GPU), sorted by ``ts`` then ``index``:

* ``ts`` float64: POSIX seconds, UTC. Naive log times are read in ``tz`` (default UTC).
* ``uuid`` str: the GPU's UUID, or the stand-in ``<host>/gpu<index>`` when the log has none.
* ``index`` int64: the GPU index as logged (or order of appearance).
* ``lost`` bool: the GPU was reported lost (``[GPU is lost]``) at this row.
* then one float64 column per catalogue metric the file carries, named by its catalogue
  name (``power.draw``...), in the catalogue's unit. NaN = missing (``[N/A]``, not
  supported, absurd, unreadable), never 0. ``clocks_event_reasons.active`` holds the
  bitmask as a float (exact up to 2**53); ``pstate`` holds 0..15.

Beside the frame: ``Recording.xids`` (list of XidEvent, time order), ``Recording.processes``
and ``Recording.errors`` (sparse, keyed by ``(ts, uuid)``), ``Recording.warnings`` (lines
about data dropped or repaired: truncated last line, absurd values, ignored columns) and
``Recording.devices()``. ``Recording.ticks()`` gives the same data as ``Sample`` objects.

Piped input: a path that is not a regular file (``/dev/stdin``, a FIFO, a process
substitution; ``-`` is standard input) is read whole into memory once, up to 64 MiB
(:data:`.blob.MAX_STREAM`), and never in parts. Since a pipe can be read only once, the
bytes :func:`open_parts` read are kept for the :func:`open_log` of the same path that
follows it (``watchdog replay`` calls both).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.errors import InputError
from watchdog.sources.replay.frame import Recording
from watchdog.units import check_tz

if TYPE_CHECKING:
    from watchdog.sources.replay.blob import Blob
    from watchdog.sources.replay.parts import Parts

__all__ = ["STDIN", "Recording", "open_log", "open_parts"]

#: What ``-`` reads: standard input (a pipe, or a file redirected with ``<``).
STDIN = "/dev/stdin"
#: The stream :func:`open_parts` read and did not use, for the :func:`open_log` after it.
_pending: dict[str, Blob] = {}


def open_log(path: str | os.PathLike[str], *, mapping: dict[str, str] | None = None,
             host: str | None = None, tz: str | None = None,
             dmon_interval: float = 1.0, in_parts: bool = True) -> Recording:
    """Read any recorded telemetry file the project knows into a :class:`Recording`.

    ``mapping`` maps catalogue names (and ``timestamp``, ``index``, ``uuid``, ``name``) to
    column names, or to 1-based column numbers for a headerless CSV. ``host`` names the
    node (default: the file's stem). ``tz`` is the zone of naive log times (default UTC).
    ``dmon_interval`` (s) spaces the rows of a ``dmon`` log without ``-o DT`` times.
    ``in_parts``: a large ``nvidia-smi`` log may be parsed in parts on worker threads
    (:mod:`.parts`; same result); False reads it whole (a caller that knows the parts
    cannot serve it).
    Every problem with the input raises :class:`InputError` with one line naming the file.
    """
    p = _name(path)
    if p != STDIN and os.path.isdir(p):
        p = _one_run(p)
    blob = _pending.pop(p, None) or _open(p)
    kind = "wandb" if p.endswith(".wandb") else _kind(p, blob)  # by name: one clear line
    if tz is not None:
        check_tz(tz)
    if kind in ("wandb", "wandb-table"):
        if mapping:
            raise InputError(f"{p}: --map does not apply to a W&B run or table")
        from watchdog.sources import wandb

        if kind == "wandb":
            return wandb.read_run(p, host=host, data=None if blob.regular else blob.all())
        blob.check_text()
        return wandb.read_table(p, blob.all(), host=host)
    if kind == "recording":
        from watchdog.sources.replay import recording

        if mapping:
            raise InputError(f"{p}: --map does not apply to a watchdog recording")
        with blob.mapped() as data:  # records are copied out one at a time
            rec = recording.read(p, data, host=host)  # default: the host it was recorded on
        if len(rec.frame) == 0:  # not a clean bill of health: nothing was looked at
            raise InputError(f"{p}: a recording with no samples (nothing to replay)")
        return rec
    host = host or Path(p).stem
    if not blob.regular:
        in_parts = False  # parts map the file: a pipe is read once, into memory
    if kind == "dmon":
        from watchdog.sources.replay import dmon

        blob.check_text()
        rec = dmon.read(p, blob.all(), host=host, tz=tz, interval=dmon_interval,
                        mtime=blob.mtime)
        rec.warnings[:0] = blob.notes
        return rec
    from watchdog.sources.replay import mapped, smi_csv

    if mapping:
        return mapped.read(p, blob, mapping=mapping, host=host, tz=tz)
    whole = _in_parts(p, blob, host=host, tz=tz) if in_parts else None
    if whole is not None:
        return whole
    return smi_csv.read(p, blob, mapping=None, host=host, tz=tz)


def _one_run(folder: str) -> str:
    """The run file of a folder that holds exactly one W&B run (a run folder)."""
    from watchdog.sources.wandb import runs_in

    runs = runs_in(folder)
    if len(runs) > 1:
        raise InputError(f"{folder}: a folder of {len(runs)} W&B runs; name one run")
    return runs[0]


def _name(path: str | os.PathLike[str]) -> str:
    p = os.fspath(path)
    return STDIN if p == "-" else p


def _open(p: str) -> Blob:
    from watchdog.sources.replay.blob import Blob

    return Blob(p)


def _kind(path: str, blob: Blob) -> str:
    """The file's format (:func:`.sniff.sniff`), after cutting a text log's NUL tail."""
    from watchdog.sources.replay.sniff import MAGIC, WANDB_MAGIC, sniff

    if not blob.head.startswith((MAGIC, WANDB_MAGIC)):  # binary: NULs are data
        blob.trim_nul_tail()
    return sniff(path, blob.head)


def _in_parts(path: str, blob: Blob, *, host: str, tz: str | None) -> Recording | None:
    """A large CSV log read in parts and joined (what :func:`smi_csv.read` gives, sooner),
    or None when it is small or the parts cannot serve it exactly."""
    from watchdog.sources.replay.parts import MIN_BYTES, NotInParts, Parts

    if blob.size < MIN_BYTES:
        return None
    try:
        with Parts(path, blob, host=host, tz=tz) as parts:
            for _part in parts:
                pass
            return parts.whole()
    except NotInParts:
        return None


def open_parts(path: str | os.PathLike[str], *, host: str | None = None,
               tz: str | None = None) -> Parts | None:
    """A large ``nvidia-smi`` CSV log to be read in parts on a worker thread
    (:class:`~watchdog.sources.replay.parts.Parts`), or None: read it with :func:`open_log`
    (a small file, another format, a log that cannot be cut into parts)."""
    p = _name(path)
    from watchdog.sources.replay.parts import MIN_BYTES, NotInParts, Parts

    blob = _pending.pop(p, None) or _open(p)
    if not blob.regular:  # read once, now: open_log gets these bytes, not an empty pipe
        _pending.clear()
        _pending[p] = blob
        return None
    if blob.size < MIN_BYTES or _kind(p, blob) != "csv" or blob.size < MIN_BYTES:
        return None
    if tz is not None:
        check_tz(tz)
    try:
        return Parts(p, blob, host=host or Path(p).stem, tz=tz)
    except NotInParts:
        return None
