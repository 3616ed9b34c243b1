"""The project's own recording format (``.wdrec``): writer and reader.

Layout (documented for users in ``docs/recording-format.md``)::

    b"WDREC\\x00"  then records:  kind (1 byte) | length (uint64 LE) | payload | crc32 (uint32 LE)

Record kinds: ``M`` manifest (JSON: format, version, host, source, devices), ``D`` device
inventory update (JSON), ``C`` a chunk of samples (an ``np.savez_compressed`` archive of
columns, see :func:`_chunk_arrays`), ``E`` end (JSON summary). Records are appended and
fsync'ed one chunk at a time, so a long live recording holds at most one chunk in memory
and a crash loses at most the chunk being written: the reader stops at the first record
whose length or CRC does not check out and warns (a file without ``E`` was not closed).
"""

from __future__ import annotations

import io
import json
import math
import os
import struct
import zlib
from collections.abc import Iterable
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from watchdog.errors import InputError
from watchdog.model import DeviceInfo, ProcessInfo, Sample, XidEvent
from watchdog.sources.replay.frame import Key, Recording
from watchdog.sources.replay.sniff import MAGIC

FORMAT = "nvml-watchdog-recording"
VERSION = 1
_HDR = struct.Struct("<cQ")
_CRC = struct.Struct("<I")


class RecordingWriter:
    """Append samples to a ``.wdrec`` file chunk by chunk.

    ``chunk_rows`` bounds memory (samples buffered before a chunk is written). Use as a
    context manager, or call :meth:`close`; a writer never closed leaves a file the reader
    still loads (with a warning).
    """

    def __init__(self, path: str | os.PathLike[str], *, host: str, devices: list[DeviceInfo],
                 source: str = "", chunk_rows: int = 4096) -> None:
        self.path = os.fspath(path)
        self.chunk_rows = max(1, chunk_rows)
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
        self._f.write(_HDR.pack(kind, len(payload)))
        self._f.write(payload)
        self._f.write(_CRC.pack(zlib.crc32(payload)))
        self._f.flush()
        os.fsync(self._f.fileno())

    def set_devices(self, devices: list[DeviceInfo]) -> None:
        """Record a changed inventory (a GPU vanished or came back)."""
        self.flush()
        self._record(b"D", json.dumps([d.to_dict() for d in devices]).encode())

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
            arrays: dict[str, np.ndarray] = {
                "ts": part["ts"].to_numpy(np.float64), "index": part["index"].to_numpy(np.int64),
                "uuid_code": codes.astype(np.int32), "uuids": uuids.astype(str),
                "lost": part["lost"].to_numpy(bool)}
            for m in rec.metrics:
                arrays[f"v__{m}"] = part[m].to_numpy(np.float64)
                ab = rec.absent.get(m)
                if ab is not None and ab[a:a + step].any():
                    arrays[f"k__{m}"] = ~ab[a:a + step]
            meta: dict[str, Any] = {"errors": [], "processes": [], "xids": []}
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

    def _write_arrays(self, arrays: dict[str, np.ndarray]) -> None:
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


def _chunk_arrays(samples: list[Sample]) -> dict[str, np.ndarray]:
    """Columns of one chunk: ``ts``, ``index``, ``uuid_code`` + ``uuids``, ``lost``,
    ``v__<metric>`` (float64, NaN for None), ``k__<metric>`` (bool, only when some sample
    lacks the key), and ``meta`` (JSON bytes: sparse errors, processes, XIDs by row)."""
    n = len(samples)
    uuids = sorted({s.uuid for s in samples})
    code = {u: i for i, u in enumerate(uuids)}
    names = sorted({k for s in samples for k in s.values})
    arrays: dict[str, np.ndarray] = {
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
    meta: dict[str, Any] = {
        "errors": [[r, list(s.errors)] for r, s in enumerate(samples) if s.errors],
        "processes": [[r, [p.to_dict() for p in s.processes]]
                      for r, s in enumerate(samples) if s.processes is not None],
        "xids": [[r, x.to_dict()] for r, s in enumerate(samples) for x in s.xids],
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return arrays


def _records(path: str, data: bytes, warnings: list[str]) -> list[tuple[bytes, bytes]]:
    out = []
    pos = len(MAGIC)
    ended = False
    while pos < len(data):
        if pos + _HDR.size > len(data):
            warnings.append(f"{path}: truncated record at byte {pos} dropped")
            break
        kind, length = _HDR.unpack_from(data, pos)
        end = pos + _HDR.size + length
        if kind not in b"MDCE" or end + _CRC.size > len(data):
            warnings.append(f"{path}: truncated or damaged record at byte {pos} dropped "
                            "(recording interrupted?)")
            break
        payload = data[pos + _HDR.size:end]
        (crc,) = _CRC.unpack_from(data, end)
        if crc != zlib.crc32(payload):
            warnings.append(f"{path}: record at byte {pos} fails its checksum; rest dropped")
            break
        out.append((kind, payload))
        pos = end + _CRC.size
        if kind == b"E":
            ended = True
            break
    if not ended and not any("dropped" in w for w in warnings):
        warnings.append(f"{path}: recording was not closed (interrupted?); read what was written")
    return out


def read(path: str, data: bytes, *, host: str | None) -> Recording:
    """Load a ``.wdrec`` file into a :class:`Recording`."""
    warnings: list[str] = []
    records = _records(path, data, warnings)
    if not records or records[0][0] != b"M":
        raise InputError(f"{path}: recording has no manifest (damaged file)")
    try:
        manifest = json.loads(records[0][1])
    except ValueError:
        raise InputError(f"{path}: recording manifest is not JSON (damaged file)") from None
    if manifest.get("format") != FORMAT:
        raise InputError(f"{path}: not an nvml-watchdog recording")
    if int(manifest.get("version", 0)) > VERSION:
        raise InputError(f"{path}: recording format version {manifest['version']} is newer "
                         f"than this watchdog reads ({VERSION}); upgrade nvml-watchdog")
    devices = [DeviceInfo.from_dict(d) for d in manifest.get("devices", [])]
    parts: list[dict[str, np.ndarray]] = []
    metas: list[dict[str, Any]] = []
    for kind, payload in records[1:]:
        if kind == b"D":
            devices = [DeviceInfo.from_dict(d) for d in json.loads(payload)]
        elif kind == b"C":
            try:
                with np.load(io.BytesIO(payload), allow_pickle=False) as z:
                    arr = {k: z[k] for k in z.files}
                meta = json.loads(arr.pop("meta").tobytes())
            except (ValueError, OSError, KeyError) as e:
                raise InputError(f"{path}: damaged chunk: {e}") from None
            parts.append(arr)
            metas.append(meta)
    return _assemble(path, host or manifest.get("host") or "replay", parts, metas, devices,
                     warnings)


def _assemble(path: str, host: str, parts: list[dict[str, np.ndarray]],
              metas: list[dict[str, Any]], devices: list[DeviceInfo],
              warnings: list[str]) -> Recording:
    names = list(dict.fromkeys(k[3:] for p in parts for k in p if k.startswith("v__")))
    cols: dict[str, list[np.ndarray]] = {c: [] for c in ("ts", "index", "uuid", "lost")}
    vals: dict[str, list[np.ndarray]] = {m: [] for m in names}
    has: dict[str, list[np.ndarray]] = {m: [] for m in names}
    errors: dict[Key, tuple[str, ...]] = {}
    processes: dict[Key, tuple[ProcessInfo, ...]] = {}
    sample_xids: dict[Key, list[XidEvent]] = {}
    for p, meta in zip(parts, metas, strict=True):
        n = len(p["ts"])
        uu = p["uuids"].astype(object)[p["uuid_code"]] if n else np.array([], dtype=object)
        cols["ts"].append(p["ts"])
        cols["index"].append(p["index"])
        cols["uuid"].append(uu)
        cols["lost"].append(p["lost"])
        for m in names:
            v = p.get(f"v__{m}")
            vals[m].append(np.full(n, np.nan) if v is None else v)
            k = p.get(f"k__{m}")
            has[m].append(np.full(n, v is not None) if k is None else k)
        ts_l = p["ts"].tolist()
        for r, texts in meta.get("errors", []):
            errors[(ts_l[r], str(uu[r]))] = tuple(texts)
        for r, procs in meta.get("processes", []):
            processes[(ts_l[r], str(uu[r]))] = tuple(ProcessInfo(**d) for d in procs)
        for r, x in meta.get("xids", []):
            sample_xids.setdefault((ts_l[r], str(uu[r])), []).append(XidEvent(**x))

    def cat(xs: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(xs).astype(dtype, copy=False) if xs else np.zeros(0, dtype)

    ts = cat(cols["ts"], np.float64)
    index = cat(cols["index"], np.int64)
    order = np.lexsort((index, ts))
    data: dict[str, Any] = {"ts": ts[order], "uuid": cat(cols["uuid"], object)[order],
                            "index": index[order], "lost": cat(cols["lost"], bool)[order]}
    absent: dict[str, np.ndarray] = {}
    for m in names:
        data[m] = cat(vals[m], np.float64)[order]
        h = cat(has[m], bool)[order]
        if not h.all():
            absent[m] = ~h
    frame = pd.DataFrame(data)
    frame["uuid"] = frame["uuid"].astype(str)
    xids = sorted((x for xs in sample_xids.values() for x in xs), key=lambda x: x.ts)
    return Recording(path=path, host=host, format="recording", frame=frame, inventory=devices,
                     xids=xids, processes=processes, errors=errors, absent=absent,
                     warnings=warnings,
                     sample_xids={k: tuple(v) for k, v in sample_xids.items()})
