"""Continuous recording (config ``record: {dir: …, keep: 7d}``): every sample the agent
reads goes to ``.wdrec`` files in ``dir``, one file per hour, files older than ``keep``
deleted, so any incident the service raised can be replayed and plotted afterwards
(``watchdog replay DIR/host-….wdrec --plot t.png``). A crash loses at most the chunk
being written (one minute of samples)."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.errors import InputError
from watchdog.records import DeviceInfo, Sample

if TYPE_CHECKING:
    from watchdog.sources.replay.recording_writer import RecordingWriter

log = logging.getLogger("watchdog.record")
ROTATE_S = 3600.0


class Recorder:
    """Writes samples into hourly files under ``directory``; prunes files past ``keep_s``.

    Built with the agent (the folder is checked at start); :meth:`open` names the host and
    GPUs once the source has been opened (the pipeline calls it), before the first write.
    """

    def __init__(self, directory: str | os.PathLike[str], keep_s: float, *,
                 source: str, host: str | None = None,
                 devices: list[DeviceInfo] | None = None) -> None:
        self.dir = Path(directory)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"record.dir {self.dir}: cannot create: {e.strerror or e}") \
                from None
        self.keep_s = keep_s
        self.host = host or "localhost"
        self.devices = list(devices or [])
        self.source = source
        self._writer: RecordingWriter | None = None
        self._opened_at = 0.0

    def open(self, host: str, devices: list[DeviceInfo]) -> None:
        """The source's host and GPUs (a reopened source may bring other GPUs: the next
        write starts a new file for them)."""
        if host != self.host or list(devices) != self.devices:
            self.close()
        self.host, self.devices = host, list(devices)

    def write(self, now: float, samples: list[Sample]) -> None:
        """Append one tick; rotate at the hour. Errors are logged, never raised."""
        try:
            if self._writer is None or now - self._opened_at >= ROTATE_S or \
                    now < self._opened_at:
                self._rotate(now)
            assert self._writer is not None
            self._writer.write(samples)
        except Exception as e:  # noqa: BLE001 - a full disk must not stop detection
            log.error("recording to %s failed: %s", self.dir, e)
            self._writer = None

    def _rotate(self, now: float) -> None:
        from watchdog.sources.replay.recording_writer import RecordingWriter

        self.close()
        stamp = datetime.fromtimestamp(now, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
        path = self.dir / f"{self.host}-{stamp}.wdrec"
        rows = max(64, 60 * max(1, len(self.devices)))  # about a minute per chunk
        self._writer = RecordingWriter(path, host=self.host, devices=self.devices,
                                       source=self.source, chunk_rows=rows)
        self._opened_at = now
        self.prune(now)

    def prune(self, now: float) -> int:
        """Delete recordings whose last write is older than ``keep_s`` (by file time)."""
        n = 0
        for p in self.dir.glob(f"{self.host}-*.wdrec"):
            try:
                if p.stat().st_mtime < now - self.keep_s:
                    p.unlink()
                    n += 1
            except OSError:
                continue
        return n

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self._writer = None
