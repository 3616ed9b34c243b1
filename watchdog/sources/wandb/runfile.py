"""A W&B run file (``run-<id>.wandb``) -> :class:`~.convert.Samples`, console, exit code.

The file is memory-mapped and read record by record (:mod:`.framing`); each record's type
is read from its first protobuf fields (:mod:`.proto`) and only ``stats``, ``output``,
``output_raw``, ``run`` and ``exit`` records are decoded. A record that does not decode is
counted and said once. Nothing of the file is kept but the GPU values, the notable console
lines (:mod:`.console`) and the exit code.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field

from watchdog.errors import InputError
from watchdog.sources.wandb import proto
from watchdog.sources.wandb.console import ConsoleLine, Keeper
from watchdog.sources.wandb.convert import Samples
from watchdog.sources.wandb.framing import Frames, check_header


@dataclass
class RunFile:
    """What a run file held (see the module docstring)."""

    samples: Samples
    console: list[ConsoleLine] = field(default_factory=list)
    console_seen: int = 0
    exit_code: int | None = None
    started: float | None = None
    last_ts: float | None = None
    warnings: list[str] = field(default_factory=list)


def read(path: str, data: bytes | None = None) -> RunFile:
    """Read the run file at ``path`` (or its bytes ``data``, from a pipe); every problem
    that leaves nothing to replay is an :class:`InputError` naming the file, the rest are
    lines in ``warnings``."""
    if data is not None:
        check_header(path, data[:7])
        return _scan(path, data)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            check_header(path, f.read(7))
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return _scan(path, mapped)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None
    except ValueError as e:  # mmap of an empty file (size checked by check_header)
        raise InputError(f"{path}: cannot map the file ({e}, {size} bytes)") from None


def _scan(path: str, data: bytes | mmap.mmap) -> RunFile:
    frames = Frames(path, data)
    out = RunFile(Samples(path))
    keeper = Keeper()
    bad = 0
    last: float | None = None
    for payload in frames.payloads():
        try:
            got = proto.record(payload)
            if got is None:
                continue
            kind, msg = got
            if kind == proto.STATS:
                ts, items = proto.stats(msg)
                if ts is None:
                    bad += 1
                    continue
                last = ts if last is None or ts > last else last
                out.samples.add(ts, [(k.decode("utf-8", "replace"),
                                      v.decode("utf-8", "replace")) for k, v in items
                                     if k.startswith((b"gpu.", b"system.gpu."))])
            elif kind in (proto.OUTPUT, proto.OUTPUT_RAW):
                stream, ts, line = proto.output(msg)
                if ts is not None:
                    last = ts if last is None or ts > last else last
                keeper.add(ts, "stdout" if stream == 1 else "stderr",
                           line.decode("utf-8", "replace"))
            elif kind == proto.RUN:
                out.started = out.started or proto.run_start(msg)
            elif kind == proto.EXIT:
                out.exit_code = proto.exit_code(msg)
        except proto.ProtoError:
            bad += 1
    out.warnings += frames.warnings + out.samples.warnings()
    if bad:
        out.warnings.append(f"{path}: {bad} record(s) that do not decode skipped")
    out.last_ts = last
    lines = list(keeper.lines)
    if out.exit_code is not None and last is not None:
        word = "exited normally (code 0)" if out.exit_code == 0 else \
            f"exited with code {out.exit_code}"
        lines.append(ConsoleLine(last, "exit", f"the job {word}", "exit"))
    out.console, out.console_seen = lines, keeper.seen
    if not out.samples.ts:
        why = "no readable records" if frames.damaged and not keeper.seen else \
            "no GPU system metrics (gpu.<i>.* stats records)"
        raise InputError(f"{path}: a W&B run file with {why}: nothing to replay")
    return out
