"""The project's own recording format (``.wdrec``): its layout, bounds and reader.

Layout (documented for users in ``docs/recording-format.md``)::

    b"WDREC\\x00"  then records:  kind (1 byte) | length (uint64 LE) | payload | crc32 (uint32 LE)

Record kinds: ``M`` manifest (JSON: format, version, host, source, devices), ``D`` device
inventory update (JSON), ``C`` a chunk of samples (an ``np.savez_compressed`` archive of
columns, see :func:`.recording_writer._chunk_arrays`), ``E`` end (JSON summary). The
writer (:class:`.recording_writer.RecordingWriter`) appends and fsyncs records one chunk
at a time, so a crash loses at most the chunk being written: the reader stops at the
first record whose length or CRC does not check out and warns (a file without ``E`` was
not closed).
"""

from __future__ import annotations

import dataclasses
import json
import math
import mmap
import struct
import zlib
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pandas as pd

from watchdog.errors import InputError
from watchdog.records import DeviceInfo, ProcessInfo, XidEvent
from watchdog.sources.replay.convert import MAX_GPU_INDEX
from watchdog.sources.replay.frame import Key, Recording
from watchdog.sources.replay.sniff import MAGIC
from watchdog.untyped import Array, Json, JsonDoc

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from watchdog.npzsafe import Archive

D = TypeVar("D", bound="DataclassInstance")

FORMAT = "nvml-watchdog-recording"
VERSION = 1
RECORD_HDR = struct.Struct("<cQ")  # kind, payload length
RECORD_CRC = struct.Struct("<I")  # crc32 of the payload

# --- reading: every structure checked, every decompression bounded ----------------------
#: The most bytes one JSON record (manifest, inventory, end) or a chunk's ``meta`` may have.
MAX_JSON = 16 << 20
#: The most samples (rows) one chunk may hold (the writer's default is 4096, a converted
#: log's 65 536).
MAX_CHUNK_ROWS = 1 << 20
#: The most arrays one chunk may hold (5 fixed + ``meta`` + two per metric).
MAX_CHUNK_ARRAYS = 1024
#: The most GPUs a manifest or a chunk may list, and the highest GPU index (every log's:
#: :data:`watchdog.sources.replay.convert.MAX_GPU_INDEX`, which says why).
MAX_GPUS = 4096
MAX_INDEX = MAX_GPU_INDEX
#: Every chunk's arrays together, uncompressed, may declare at most this many bytes per
#: byte of the file, beyond a first 64 MiB, and never more than MAX_TOTAL. Real
#: recordings decompress 15-20x (sim) to ~50x (an idle node, nearly every value constant);
#: a deflate bomb of zeros decompresses ~1000x.
MAX_RATIO = 128
MAX_TOTAL = 2 << 30
_CHUNK_FIXED = {"ts": "f", "index": "iu", "uuid_code": "iu", "uuids": "U", "lost": "b",
                "meta": "u"}


def _records(path: str, data: bytes | mmap.mmap, warnings: list[str]
             ) -> list[tuple[bytes, bytes]]:
    """``(kind, payload)`` of each record of ``data`` (bytes or a memory map), checked
    against its length and CRC; a damaged tail is dropped with a warning."""
    out = []
    pos = len(MAGIC)
    ended = False
    while pos < len(data):
        if pos + RECORD_HDR.size > len(data):
            warnings.append(f"{path}: truncated record at byte {pos} dropped")
            break
        kind, length = RECORD_HDR.unpack_from(data, pos)
        end = pos + RECORD_HDR.size + length
        if kind not in b"MDCE" or end + RECORD_CRC.size > len(data):
            warnings.append(f"{path}: truncated or damaged record at byte {pos} dropped "
                            "(recording interrupted?)")
            break
        if kind != b"C" and length > MAX_JSON:
            raise InputError(f"{path}: record at byte {pos} declares {length} bytes of JSON "
                             f"(at most {MAX_JSON >> 20} MiB): damaged file")
        payload = bytes(data[pos + RECORD_HDR.size:end])
        (crc,) = RECORD_CRC.unpack_from(data, end)
        if crc != zlib.crc32(payload):
            warnings.append(f"{path}: record at byte {pos} fails its checksum; rest dropped")
            break
        out.append((kind, payload))
        pos = end + RECORD_CRC.size
        if kind == b"E":
            ended = True
            break
    if not ended and not any("dropped" in w for w in warnings):
        warnings.append(f"{path}: recording was not closed (interrupted?); read what was written")
    return out


def read(path: str, data: bytes | mmap.mmap, *, host: str | None) -> Recording:
    """Load a ``.wdrec`` file (its bytes, or a memory map of them) into a
    :class:`Recording`. Every structure is checked before it is used (JSON types, array
    names, dtypes, shapes, column lengths, index ranges) and every chunk's declared size
    before anything is decompressed: damage of any kind is one :class:`InputError`."""
    from watchdog.npzsafe import Archive

    warnings: list[str] = []
    records = _records(path, data, warnings)
    if not records or records[0][0] != b"M":
        raise InputError(f"{path}: recording has no manifest (damaged file)")
    manifest = _json(records[0][1], path, "manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{path}: not an nvml-watchdog recording")
    version = manifest.get("version", 0)
    if isinstance(version, bool) or not isinstance(version, int | float) or not (
            math.isfinite(version)):
        raise InputError(f"{path}: recording manifest: version {version!r} is not a number")
    if version > VERSION:
        raise InputError(f"{path}: recording format version {manifest['version']} is newer "
                         f"than this watchdog reads ({VERSION}); upgrade nvml-watchdog")
    rec_host = manifest.get("host")
    if rec_host is not None and not isinstance(rec_host, str):
        raise InputError(f"{path}: recording manifest: host is not a string")
    devices = _devices(manifest.get("devices", []), path, "manifest")
    budget = min(MAX_TOTAL, (64 << 20) + MAX_RATIO * len(data))
    chunks: list[tuple[Archive, str]] = []
    declared = 0
    try:
        # first every chunk's declared arrays (nothing decompressed beyond the headers)…
        steps: list[tuple[bytes, list[DeviceInfo] | int]] = []  # an inventory, a chunk
        for kind, payload in records[1:]:
            if kind == b"D":
                steps.append((kind, _devices(_json(payload, path, "inventory"), path,
                                             "inventory")))
            elif kind == b"C":
                where = f"{path}: chunk {len(chunks) + 1}"
                z = Archive(payload, where, max_members=MAX_CHUNK_ARRAYS,
                            max_bytes=budget - declared)
                chunks.append((z, where))
                _check_chunk(z, where)
                declared += z.declared
                steps.append((kind, len(chunks) - 1))
        # …then the arrays, each within its declared size
        parts: list[dict[str, Array]] = []
        metas: list[JsonDoc] = []
        for _kind, item in steps:
            if isinstance(item, list):  # a D record: the inventory from here on
                devices = item
            else:
                z, where = chunks[item]
                arr = {name: z.read(name) for name in z.members}
                meta = _meta(arr.pop("meta"), len(arr["ts"]), where)
                _check_values(arr, where)
                parts.append(arr)
                metas.append(meta)
                z.close()
    finally:
        for z, _ in chunks:
            z.close()
    return _assemble(path, host or rec_host or "replay", parts, metas, devices, warnings)


def _json(payload: bytes, path: str, what: str) -> Json:
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        raise InputError(f"{path}: recording {what} is not JSON (damaged file)") from None


_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,),
                                       "bool": (bool,)}
MAX_TEXT = 4096  # characters of any string in a recording's JSON


def _typed(cls: type[D], d: Json, where: str) -> D:
    """``cls(**d)`` for a dataclass of plain fields, each value checked against its
    annotation (``int``, ``float | None``…) first: a wrong type is an InputError."""
    if not isinstance(d, dict):
        raise InputError(f"{where}: expected an object, got {type(d).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: JsonDoc = {}
    for name, f in fields.items():
        if name not in d:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(f"{where}: {cls.__name__} lacks {name!r}")
            continue
        v = d[name]
        ann = str(f.type).replace(" ", "").split("|")
        if v is None and "None" in ann:
            out[name] = v
            continue
        allowed = tuple(t for a in ann for t in _TYPES.get(a, ()))
        ok = isinstance(v, allowed) and not (isinstance(v, bool) and bool not in allowed)
        if ok and isinstance(v, float) and not math.isfinite(v):
            ok = False
        if ok and isinstance(v, str) and len(v) > MAX_TEXT:
            ok = False
        if not ok:
            raise InputError(f"{where}: {cls.__name__}.{name} = {str(v)[:40]!r} has the wrong "
                             "type or size")
        out[name] = v
    return cls(**out)


def _devices(items: Json, path: str, what: str) -> list[DeviceInfo]:
    if not isinstance(items, list) or len(items) > MAX_GPUS:
        raise InputError(f"{path}: recording {what}: devices must be a list of at most "
                         f"{MAX_GPUS} GPUs")
    out = [_typed(DeviceInfo, d, f"{path}: recording {what}") for d in items]
    if any(not 0 <= d.index <= MAX_INDEX for d in out):
        raise InputError(f"{path}: recording {what}: a GPU index outside 0..{MAX_INDEX}")
    return out


def _check_chunk(z: Archive, where: str) -> None:
    """Names, dtypes and shapes of a chunk's arrays, from their headers alone."""
    m = z.members
    missing = [k for k in _CHUNK_FIXED if k not in m]
    if missing:
        raise InputError(f"{where}: no {', '.join(missing)} array (damaged chunk)")
    ts = m["ts"]
    if len(ts.shape) != 1 or ts.shape[0] > MAX_CHUNK_ROWS:
        raise InputError(f"{where}: {ts.shape} samples, at most {MAX_CHUNK_ROWS} in one "
                         "chunk (damaged file?)")
    n = ts.shape[0]
    for name, mem in m.items():
        kinds = _CHUNK_FIXED.get(name)
        if kinds is None:
            metric = name[3:]
            if (not name.startswith(("v__", "k__")) or not 0 < len(metric) <= 128
                    or metric in ("ts", "uuid", "index", "lost")):
                raise InputError(f"{where}: unexpected array {name[:60]!r}")
            kinds = "f" if name.startswith("v__") else "b"
        if mem.dtype.kind not in kinds or len(mem.shape) != 1:
            raise InputError(f"{where}: array {name!r} has dtype {mem.dtype.str} and "
                             f"{len(mem.shape)} dimensions (damaged chunk)")
        if name == "uuids":
            if not (0 < mem.shape[0] <= min(max(n, 1), MAX_GPUS) or n == 0) or (
                    mem.dtype.itemsize > 4 * 256):
                raise InputError(f"{where}: {mem.shape[0]} GPU UUIDs for {n} samples "
                                 "(damaged chunk)")
        elif name == "meta":
            if mem.dtype.itemsize != 1 or mem.shape[0] > MAX_JSON:
                raise InputError(f"{where}: meta of {mem.shape[0]} bytes (at most "
                                 f"{MAX_JSON >> 20} MiB)")
        elif mem.shape[0] != n:
            raise InputError(f"{where}: array {name!r} has {mem.shape[0]} rows, ts has {n} "
                             "(ragged columns)")


def _check_values(arr: dict[str, Array], where: str) -> None:
    n = len(arr["ts"])
    if not n:
        return
    if not np.isfinite(arr["ts"]).all():
        raise InputError(f"{where}: a timestamp is not a finite number (damaged chunk)")
    codes, idx = arr["uuid_code"], arr["index"]
    if codes.min() < 0 or codes.max() >= len(arr["uuids"]):
        raise InputError(f"{where}: uuid_code outside the chunk's {len(arr['uuids'])} UUIDs")
    if idx.min() < 0 or idx.max() > MAX_INDEX:
        raise InputError(f"{where}: a GPU index outside 0..{MAX_INDEX}")


def _meta(raw: Array, n: int, where: str) -> JsonDoc:
    """The chunk's sparse data, each entry ``[row, value]`` checked: row in range, value
    of the right shape (errors: texts, processes: ProcessInfo objects, xids: XidEvent)."""
    try:
        meta = json.loads(raw.tobytes())
    except (ValueError, RecursionError):
        raise InputError(f"{where}: meta is not JSON (damaged chunk)") from None
    if not isinstance(meta, dict):
        raise InputError(f"{where}: meta is not an object (damaged chunk)")
    out: JsonDoc = {}
    for key in ("errors", "processes", "xids"):
        items = meta.get(key, [])
        if not isinstance(items, list):
            raise InputError(f"{where}: meta.{key} is not a list")
        checked: list[tuple[int, object]] = []  # (row, its texts, processes or XID)
        for item in items:
            if (not isinstance(item, list) or len(item) != 2 or isinstance(item[0], bool)
                    or not isinstance(item[0], int) or not 0 <= item[0] < n):
                raise InputError(f"{where}: meta.{key}: an entry is not [row, value] with a "
                                 f"row of the chunk's {n}")
            r, v = item
            if key == "errors":
                if not isinstance(v, list) or not all(
                        isinstance(t, str) and len(t) <= MAX_TEXT for t in v):
                    raise InputError(f"{where}: meta.errors: row {r} is not a list of texts")
                checked.append((r, tuple(v)))
            elif key == "processes":
                if not isinstance(v, list):
                    raise InputError(f"{where}: meta.processes: row {r} is not a list")
                checked.append((r, tuple(_typed(ProcessInfo, d, f"{where}: meta.processes")
                                         for d in v)))
            else:
                checked.append((r, _typed(XidEvent, v, f"{where}: meta.xids")))
        out[key] = checked
    return out


def _assemble(path: str, host: str, parts: list[dict[str, Array]],
              metas: list[JsonDoc], devices: list[DeviceInfo],
              warnings: list[str]) -> Recording:
    names = list(dict.fromkeys(k[3:] for p in parts for k in p if k.startswith("v__")))
    cols: dict[str, list[Array]] = {c: [] for c in ("ts", "index", "uuid", "lost")}
    vals: dict[str, list[Array]] = {m: [] for m in names}
    has: dict[str, list[Array]] = {m: [] for m in names}
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
            errors[(ts_l[r], str(uu[r]))] = texts
        for r, procs in meta.get("processes", []):
            processes[(ts_l[r], str(uu[r]))] = procs
        for r, x in meta.get("xids", []):
            sample_xids.setdefault((ts_l[r], str(uu[r])), []).append(x)

    def cat(xs, dtype):  # arrays of one column, its dtype
        return np.concatenate(xs).astype(dtype, copy=False) if xs else np.zeros(0, dtype)

    ts = cat(cols["ts"], np.float64)
    index = cat(cols["index"], np.int64)
    order = np.lexsort((index, ts))
    data: JsonDoc = {"ts": ts[order], "uuid": cat(cols["uuid"], object)[order],
                            "index": index[order], "lost": cat(cols["lost"], bool)[order]}
    absent: dict[str, Array] = {}
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
