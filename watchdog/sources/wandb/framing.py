"""The framing of a W&B run file (``run-<id>.wandb``): LevelDB's log format.

A 7-byte file header (``:W&B``, magic ``0xBEE1`` little-endian, version 0), then blocks of
:data:`BLOCK` bytes. A block holds records, each a 7-byte header (checksum: uint32, length:
uint16, type: uint8, little-endian) and ``length`` bytes of data; a record never crosses a
block, so a longer payload is cut into FIRST, MIDDLE... LAST pieces (one piece: FULL). A
block's last 1-6 bytes, too few for a header, are zero padding. The checksum is CRC-32
(zlib's, IEEE) of the type byte and the data, as W&B's writers compute it (not LevelDB's
masked CRC-32C: every run file we have read uses the IEEE form).

Bounds, for a file from anywhere (every one a line in :attr:`Frames.warnings`, never an
exception, unless nothing at all is readable):

* a record length that does not fit in its block, an unknown record type, a CRC mismatch
  or non-zero padding: the rest of that block is skipped (LevelDB's own recovery: the
  next block starts a fresh record), counted and said once with the first byte offset;
* a payload assembled from pieces is bounded by :data:`MAX_PAYLOAD` (16 MiB): a longer one
  is dropped piece by piece without being held (a large media record the reader does not
  need), counted;
* a file that ends inside a record (a run that crashed, or is still being written) ends
  the read there: what came before is kept, and one line says where it stopped;
* zero bytes where a record header should be (a file extended but never written) end the
  block.

The caller decides what is fatal (a file with no system metrics at all).
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from watchdog.errors import InputError

BLOCK = 32768
HEADER = 7
IDENT = b":W&B"
MAGIC = 0xBEE1
VERSION = 0
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
#: Largest payload assembled from pieces (bytes). Stats and console records are a few KiB;
#: only media and artifact records grow past this, and the reader needs none of them.
MAX_PAYLOAD = 16 << 20

_SEED = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}
_HDR = struct.Struct("<IHB")


def check_header(path: str, head: bytes) -> None:
    """Refuse with one line anything that is not a W&B run file of the known version."""
    if len(head) < HEADER or head[:4] != IDENT:
        raise InputError(f"{path}: not a W&B run file (no ':W&B' header)")
    magic, version = struct.unpack_from("<HB", head, 4)
    if magic != MAGIC:
        raise InputError(f"{path}: not a W&B run file (header magic 0x{magic:04x}, "
                         f"expected 0x{MAGIC:04x})")
    if version != VERSION:
        raise InputError(f"{path}: W&B run file version {version}; this reader knows "
                         f"version {VERSION}")


@dataclass
class Frames:
    """The payloads of a run file, in order (:meth:`payloads`), and what was skipped."""

    path: str
    data: bytes | memoryview | mmap.mmap
    damaged: int = 0  # blocks (or their rests) skipped for a bad header, type or CRC
    first_damage: int | None = None  # byte offset of the first skipped piece
    too_big: int = 0  # payloads over MAX_PAYLOAD, dropped
    truncated_at: int | None = None  # byte offset where the file ends mid-record
    warnings: list[str] = field(default_factory=list)

    def payloads(self) -> Iterator[bytes]:
        """Every whole payload (a protobuf ``Record``), in file order; then
        :attr:`warnings` says what was skipped."""
        data = self.data
        n = len(data)
        check_header(self.path, bytes(data[:HEADER]))
        pos = HEADER
        parts: list[bytes] | None = None  # pieces of a FIRST..LAST payload
        size = 0
        dropping = False  # inside a payload over the bound: skip its pieces
        crc32 = zlib.crc32
        unpack = _HDR.unpack_from
        while pos < n:
            left = BLOCK - pos % BLOCK
            if left < HEADER:  # trailer: zero padding to the block's end
                if any(data[pos:pos + left]):
                    self._damage(pos)
                    parts, dropping = None, False
                pos += left
                continue
            if pos + HEADER > n:
                if any(data[pos:n]):
                    self.truncated_at = pos
                break
            checksum, length, kind = unpack(data, pos)
            if kind == 0 and length == 0 and checksum == 0:  # zeros: the block ends here
                pos += left
                continue
            if length > left - HEADER or kind not in _SEED:
                self._damage(pos)
                parts, dropping = None, False
                pos += left
                continue
            start = pos + HEADER
            end = start + length
            if end > n:
                self.truncated_at = pos
                break
            piece = bytes(data[start:end])
            if crc32(piece, _SEED[kind]) != checksum:
                self._damage(pos)
                parts, dropping = None, False
                pos += left
                continue
            pos = end
            if kind == FULL:
                parts, dropping = None, False
                yield piece
            elif kind == FIRST:
                parts, size, dropping = [piece], length, False
            elif parts is None and not dropping:  # a MIDDLE or LAST without its FIRST
                continue  # (after a skipped block): LevelDB drops it too
            else:
                size += length
                if size > MAX_PAYLOAD and not dropping:
                    self.too_big += 1
                    parts, dropping = None, True
                if not dropping and parts is not None:
                    parts.append(piece)
                if kind == LAST:
                    if not dropping and parts is not None:
                        yield b"".join(parts)
                    parts, dropping = None, False
        self._say()

    def _damage(self, pos: int) -> None:
        self.damaged += 1
        if self.first_damage is None:
            self.first_damage = pos

    def _say(self) -> None:
        if self.damaged:
            self.warnings.append(
                f"{self.path}: {self.damaged} damaged block(s) skipped (bad record header or "
                f"checksum, first at byte {self.first_damage})")
        if self.too_big:
            self.warnings.append(f"{self.path}: {self.too_big} record(s) over "
                                 f"{MAX_PAYLOAD >> 20} MiB skipped")
        if self.truncated_at is not None:
            self.warnings.append(
                f"{self.path}: the file ends inside a record at byte {self.truncated_at} "
                "(the run crashed or was still being written): read up to there")
