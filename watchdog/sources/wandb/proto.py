"""A minimal protobuf decoder for the few fields of W&B's ``Record`` the reader needs.

Field numbers from W&B's ``wandb/proto/wandb_internal.proto`` (message ``Record`` and the
messages below it); everything else in a record is skipped by its wire type, never
decoded. Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32; any other (the
deprecated groups) or a length past the end raises :class:`ProtoError`, which the reader
counts as a damaged record.

* ``Record``: ``output`` 4, ``stats`` 7, ``output_raw`` 13, ``run`` 17, ``exit`` 18 (one
  of them is set: the record's type);
* ``StatsRecord``: ``timestamp`` 2 (``google.protobuf.Timestamp``: ``seconds`` 1,
  ``nanos`` 2), ``item`` 3 (``StatsItem``: ``key`` 1, ``value_json`` 16);
* ``OutputRecord`` / ``OutputRawRecord``: ``output_type`` 1 (0 stderr, 1 stdout),
  ``timestamp`` 2, ``line`` 3;
* ``RunRecord``: ``start_time`` 17; ``RunExitRecord``: ``exit_code`` 1 (int32).
"""

from __future__ import annotations

from collections.abc import Iterator

OUTPUT, STATS, OUTPUT_RAW, RUN, EXIT = 4, 7, 13, 17, 18
RECORD_TYPES = frozenset({OUTPUT, STATS, OUTPUT_RAW, RUN, EXIT})
#: Items of one stats record: 1,024 GPUs of about 15 keys each, with room to spare.
MAX_ITEMS = 65536


class ProtoError(ValueError):
    """A payload that is not a well-formed protobuf message."""


def _varint(b: bytes, i: int) -> tuple[int, int]:
    x = 0
    shift = 0
    n = len(b)
    while True:
        if i >= n:
            raise ProtoError("varint runs past the end")
        c = b[i]
        i += 1
        x |= (c & 0x7F) << shift
        if c < 0x80:
            return x, i
        shift += 7
        if shift > 63:
            raise ProtoError("varint longer than 10 bytes")


def fields(b: bytes) -> Iterator[tuple[int, int | bytes]]:
    """``(field number, value)`` for every field of message ``b``: an int for varint and
    fixed fields, bytes for length-delimited ones."""
    i = 0
    n = len(b)
    while i < n:
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if num == 0:
            raise ProtoError("field number 0")
        if wire == 0:
            v, i = _varint(b, i)
            yield num, v
        elif wire == 2:
            length, i = _varint(b, i)
            if length > n - i:
                raise ProtoError("length-delimited field runs past the end")
            yield num, b[i:i + length]
            i += length
        elif wire == 1:
            if i + 8 > n:
                raise ProtoError("fixed64 runs past the end")
            yield num, int.from_bytes(b[i:i + 8], "little")
            i += 8
        elif wire == 5:
            if i + 4 > n:
                raise ProtoError("fixed32 runs past the end")
            yield num, int.from_bytes(b[i:i + 4], "little")
            i += 4
        else:
            raise ProtoError(f"wire type {wire}")


def record(b: bytes) -> tuple[int, bytes] | None:
    """The type of a ``Record`` among :data:`RECORD_TYPES` and its message, or None (another
    type: history, config, files...)."""
    for num, v in fields(b):
        if num in RECORD_TYPES and isinstance(v, bytes):
            return num, v
    return None


def timestamp(b: bytes) -> float | None:
    """A ``google.protobuf.Timestamp`` as POSIX seconds (None when unset)."""
    sec = nanos = 0
    for num, v in fields(b):
        if num == 1 and isinstance(v, int):
            sec = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 2 and isinstance(v, int):
            nanos = v
    if sec == 0 and nanos == 0:
        return None
    return sec + nanos * 1e-9


def stats(b: bytes) -> tuple[float | None, list[tuple[bytes, bytes]]]:
    """``(timestamp, [(key, value_json)...])`` of a ``StatsRecord``; more than
    :data:`MAX_ITEMS` items is a :class:`ProtoError`.

    Items are read on a fast path for the layout W&B writes (``key`` then ``value_json``,
    each shorter than 128 bytes); any other layout goes through :func:`fields`."""
    ts = None
    items: list[tuple[bytes, bytes]] = []
    append = items.append
    i, n = 0, len(b)
    while i < n:
        if b[i] == 0x1A and i + 1 < n and b[i + 1] < 0x80:  # item (3), length < 128
            end = i + 2 + b[i + 1]
            j = i + 2
            if (end <= n and j + 1 < end and b[j] == 0x0A and b[j + 1] < 0x80
                    and j + 2 + b[j + 1] + 3 <= end):
                k_end = j + 2 + b[j + 1]
                if (b[k_end] == 0x82 and b[k_end + 1] == 0x01 and b[k_end + 2] < 0x80
                        and k_end + 3 + b[k_end + 2] == end):
                    append((b[j + 2:k_end], b[k_end + 3:end]))
                    i = end
                    if len(items) > MAX_ITEMS:
                        raise ProtoError(f"a stats record with more than {MAX_ITEMS} items")
                    continue
        key, i = _varint(b, i)  # any other field or layout: the general way
        num, wire = key >> 3, key & 7
        if wire != 2:
            i = _skip(b, i, wire)
            continue
        length, i = _varint(b, i)
        if length > n - i:
            raise ProtoError("length-delimited field runs past the end")
        v = b[i:i + length]
        i += length
        if num == 3:
            k = val = b""
            for n2, v2 in fields(v):
                if n2 == 1 and isinstance(v2, bytes):
                    k = v2
                elif n2 == 16 and isinstance(v2, bytes):
                    val = v2
            append((k, val))
            if len(items) > MAX_ITEMS:
                raise ProtoError(f"a stats record with more than {MAX_ITEMS} items")
        elif num == 2:
            ts = timestamp(v)
    return ts, items


def _skip(b: bytes, i: int, wire: int) -> int:
    """Past a field of wire type 0, 1 or 5 starting at ``i`` (its value)."""
    if wire == 0:
        return _varint(b, i)[1]
    size = {1: 8, 5: 4}.get(wire)
    if size is None:
        raise ProtoError(f"wire type {wire}")
    if i + size > len(b):
        raise ProtoError("fixed field runs past the end")
    return i + size


def output(b: bytes) -> tuple[int, float | None, bytes]:
    """``(output_type, timestamp, line)`` of an ``OutputRecord`` or ``OutputRawRecord``
    (output_type 0 stderr, 1 stdout)."""
    kind, ts, line = 0, None, b""
    for num, v in fields(b):
        if num == 1 and isinstance(v, int):
            kind = v
        elif num == 2 and isinstance(v, bytes):
            ts = timestamp(v)
        elif num == 3 and isinstance(v, bytes):
            line = v
    return kind, ts, line


def run_start(b: bytes) -> float | None:
    """``start_time`` of a ``RunRecord`` (POSIX s), None when unset."""
    for num, v in fields(b):
        if num == 17 and isinstance(v, bytes):
            return timestamp(v)
    return None


def exit_code(b: bytes) -> int:
    """``exit_code`` of a ``RunExitRecord`` (int32; absent means 0, as in proto3)."""
    for num, v in fields(b):
        if num == 1 and isinstance(v, int):
            v &= (1 << 32) - 1  # int32 is sign-extended to 64 bits on the wire
            return v - (1 << 32) if v >= 1 << 31 else v
    return 0
