"""The writer of the project's own recording format (``.wdrec``): :class:`RecordingWriter`.

The layout, its bounds and the reader are in :mod:`.recording` (for users:
``docs/recording-format.md``). Records are appended and fsync'ed one chunk at a time, so a
long live recording holds at most one chunk in memory and a crash loses at most the chunk
being written. A chunk is an ``np.savez_compressed`` archive of columns
(:func:`_chunk_arrays`).
"""

from __future__ import annotations

import io
import json
import math
import os
import zlib
from collections.abc import Iterable
from typing import BinaryIO

import numpy as np

from watchdog.errors import InputError
from watchdog.records import DeviceInfo, Sample
from watchdog.sources.replay.frame import Recording
from watchdog.sources.replay.recording import (
    FORMAT,
    MAX_CHUNK_ROWS,
    RECORD_CRC,
    RECORD_HDR,
    VERSION,
)
from watchdog.sources.replay.sniff import MAGIC
from watchdog.untyped import Array, JsonDoc


class RecordingWriter:
    """Append samples to a ``.wdrec`` file chunk by chunk.

    ``chunk_rows`` bounds memory (samples buffered before a chunk is written; at most
    :data:`MAX_CHUNK_ROWS`, the most a reader accepts in one chunk). Use as a
    context manager, or call :meth:`close`; a writer never closed leaves a file the reader
    still loads (with a warning).
    """

    def __init__(self, path: str | os.PathLike[str], *, host: str, devices: list[DeviceInfo],
                 source: str = "", chunk_rows: int = 4096) -> None:
        self.path = os.fspath(path)
        self.chunk_rows = max(1, min(chunk_rows, MAX_CHUNK_ROWS))  # what a reader accepts
        self._buf: list[Sample] = []
        self.rows = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        try:
            self._f: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as e:
            raise InputError(f"{self.path}: cannot write: {e.strerror or e}") from None
        self._f.write(MAGIC)
        manifest = {"format": FORMAT, "version": VERSION, "host": host, "source": source,
                    "devices": [d.to_dict() for d in devices]}
        self._record(b"M", json.dumps(manifest).encode())

    def _record(self, kind: bytes, payload: bytes) -> None:
        self._f.write(RECORD_HDR.pack(kind, len(payload)))
        self._f.write(payload)
        self._f.write(RECORD_CRC.pack(zlib.crc32(payload)))
        self._f.flush()
        os.fsync(self._f.fileno())

    def write(self, samples: Iterable[Sample]) -> None:
        """Buffer samples; a chunk is written every ``chunk_rows`` samples."""
        for s in samples:
            self._buf.append(s)
            if len(self._buf) >= self.chunk_rows:
                self.flush()

    def flush(self) -> None:
        """Write the buffered samples as one chunk (no-op when empty)."""
        if not self._buf:
            return
        arrays = _chunk_arrays(self._buf)
        self._write_arrays(arrays)
        self._buf = []

    def write_recording(self, rec: Recording) -> None:
        """Append a whole :class:`Recording` (a converted log) column-wise, chunk by chunk."""
        self.flush()
        f = rec.frame
        step = max(self.chunk_rows, 65536)
        for a in range(0, len(f), step):
            part = f.iloc[a:a + step]
            uuids, codes = np.unique(part["uuid"].to_numpy(dtype=str), return_inverse=True)
            arrays: dict[str, Array] = {
                "ts": part["ts"].to_numpy(np.float64), "index": part["index"].to_numpy(np.int64),
                "uuid_code": codes.astype(np.int32), "uuids": uuids.astype(str),
                "lost": part["lost"].to_numpy(bool)}
            for m in rec.metrics:
                arrays[f"v__{m}"] = part[m].to_numpy(np.float64)
                ab = rec.absent.get(m)
                if ab is not None and ab[a:a + step].any():
                    arrays[f"k__{m}"] = ~ab[a:a + step]
            meta: JsonDoc = {"errors": [], "processes": [], "xids": []}
            ts_list = arrays["ts"].tolist()
            uu = part["uuid"].tolist()
            for r, key in enumerate(zip(ts_list, uu, strict=True)):
                if key in rec.errors:
                    meta["errors"].append([r, list(rec.errors[key])])
                if key in rec.processes:
                    meta["processes"].append([r, [p.to_dict() for p in rec.processes[key]]])
                for x in rec.sample_xids.get(key, ()):
                    meta["xids"].append([r, x.to_dict()])
            arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
            self._write_arrays(arrays)

    def _write_arrays(self, arrays: dict[str, Array]) -> None:
        bio = io.BytesIO()
        np.savez_compressed(bio, **arrays)  # type: ignore[arg-type]
        self._record(b"C", bio.getvalue())
        ts = arrays["ts"]
        if len(ts):
            self.rows += len(ts)
            lo, hi = float(np.min(ts)), float(np.max(ts))
            self.first_ts = lo if self.first_ts is None else min(self.first_ts, lo)
            self.last_ts = hi if self.last_ts is None else max(self.last_ts, hi)

    def close(self) -> None:
        """Write the last chunk and the end record; idempotent."""
        if self._f.closed:
            return
        self.flush()
        self._record(b"E", json.dumps({"rows": self.rows, "first_ts": self.first_ts,
                                       "last_ts": self.last_ts}).encode())
        self._f.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunk_arrays(samples: list[Sample]) -> dict[str, Array]:
    """Columns of one chunk: ``ts``, ``index``, ``uuid_code`` + ``uuids``, ``lost``,
    ``v__<metric>`` (float64, NaN for None), ``k__<metric>`` (bool, only when some sample
    lacks the key), and ``meta`` (JSON bytes: sparse errors, processes, XIDs by row)."""
    n = len(samples)
    uuids = sorted({s.uuid for s in samples})
    code = {u: i for i, u in enumerate(uuids)}
    names = sorted({k for s in samples for k in s.values})
    arrays: dict[str, Array] = {
        "ts": np.fromiter((s.ts for s in samples), np.float64, n),
        "index": np.fromiter((s.index for s in samples), np.int64, n),
        "uuid_code": np.fromiter((code[s.uuid] for s in samples), np.int32, n),
        "uuids": np.array(uuids, dtype=str),
        "lost": np.fromiter((s.lost for s in samples), bool, n),
    }
    for m in names:
        vals = [s.values.get(m) for s in samples]
        arrays[f"v__{m}"] = np.array([math.nan if v is None else v for v in vals], np.float64)
        has = np.fromiter((m in s.values for s in samples), bool, n)
        if not has.all():
            arrays[f"k__{m}"] = has
    meta: JsonDoc = {
        "errors": [[r, list(s.errors)] for r, s in enumerate(samples) if s.errors],
        "processes": [[r, [p.to_dict() for p in s.processes]]
                      for r, s in enumerate(samples) if s.processes is not None],
        "xids": [[r, x.to_dict()] for r, s in enumerate(samples) for x in s.xids],
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return arrays
