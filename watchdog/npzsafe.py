"""A numpy ``.npz`` archive someone else wrote, opened within bounds.

The project stores columns as ``.npz`` (a zip of ``.npy`` members) in two places: the
chunks of a ``.wdrec`` recording and the anomaly model file. ``np.load`` trusts what an
archive declares: a member that claims 50 million rows is allocated before a byte of it
is read, and a 400 KB deflate stream of zeros decompresses to 400 MB. So here, before
any array is allocated:

* the zip's end record is read first: at most ``max_members`` members (so a directory
  of a million entries is never parsed); no encrypted, zip64-only or exotic members;
* every member's ``.npy`` header (at most 10 000 bytes) is read through a bounded
  decompressor and checked: a plain dtype (no Python objects), a shape, and a declared
  uncompressed size equal to header plus ``shape x itemsize``: an archive cannot declare
  one size and deliver another;
* the caller sees every member's name, dtype and shape (:attr:`Archive.members`) and the
  declared total (:attr:`Archive.declared`) and refuses what it does not expect, then
  :meth:`Archive.read` decompresses one member in bounded steps (at most its declared
  size, 1 MiB at a time: ``zipfile`` hands ``zlib`` that bound as ``max_length``) and
  checks its CRC.

Any damage (a broken zip, a short member, a bad CRC) is one :class:`InputError` naming
``where``.
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npformat

from watchdog.errors import InputError
from watchdog.untyped import Array, DType

MAX_HEADER = 10_000  # bytes of one .npy header (numpy's own default cap)
_STEP = 1 << 20
_EOCD = b"PK\x05\x06"
_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, ValueError,
           OSError, struct.error, KeyError, NotImplementedError, RuntimeError, TypeError,
           UnicodeDecodeError, OverflowError, SyntaxError)


@dataclass(frozen=True, slots=True)
class Member:
    """One ``.npy`` member as declared: ``name`` without ``.npy``."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    fortran: bool
    nbytes: int  # data bytes: prod(shape) * itemsize
    info: zipfile.ZipInfo
    header: int  # bytes of the .npy header before the data

    @property
    def count(self) -> int:
        return math.prod(self.shape)


class Archive:
    """The members of the ``.npz`` bytes ``payload``, headers checked, nothing allocated.

    ``where`` starts every message (``node.wdrec: chunk 3``); ``max_members`` and
    ``max_bytes`` (the declared total of the data) bound the archive before any member's
    data is read.
    """

    def __init__(self, payload: bytes, where: str, *, max_members: int,
                 max_bytes: int) -> None:
        self.where = where
        self.members: dict[str, Member] = {}
        n = _entries(payload)
        if n is None:
            raise InputError(f"{where}: not a zip archive (damaged)")
        if n > max_members:
            raise InputError(f"{where}: {n} arrays, more than the {max_members} expected")
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(payload))
            infos = self._zip.infolist()
        except _ERRORS as e:
            raise InputError(f"{where}: damaged archive: {_why(e)}") from None
        if len(infos) > max_members:
            raise InputError(f"{where}: {len(infos)} arrays, more than the {max_members} "
                             "expected")
        total = 0
        for info in infos:
            m = self._member(info)
            if m.name in self.members:
                raise InputError(f"{where}: array {m.name!r} appears twice")
            total += m.nbytes
            if total > max_bytes:
                left = max(0, max_bytes - (total - m.nbytes))
                raise InputError(f"{where}: array {m.name!r} declares {m.nbytes} bytes, "
                                 f"more than the {left} left of the bound on what this "
                                 "file may decompress to: refused (a decompression bomb?)")
            self.members[m.name] = m
        self.declared = total

    def _member(self, info: zipfile.ZipInfo) -> Member:
        where = self.where
        name = info.filename
        if not name.endswith(".npy") or len(name) > 256:
            raise InputError(f"{where}: unexpected member {name[:60]!r} (not an array)")
        if info.flag_bits & 0x1:
            raise InputError(f"{where}: encrypted member {name!r}")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise InputError(f"{where}: member {name!r} uses an unsupported compression")
        try:
            with self._zip.open(info) as f:
                version = npformat.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = npformat.read_array_header_1_0(
                        f, max_header_size=MAX_HEADER)
                elif version == (2, 0):
                    shape, fortran, dtype = npformat.read_array_header_2_0(
                        f, max_header_size=MAX_HEADER)
                else:
                    raise InputError(f"{where}: member {name!r}: .npy version {version}")
                header = f.tell()
        except InputError:
            raise
        except _ERRORS as e:
            raise InputError(f"{where}: member {name!r}: damaged array header: {_why(e)}"
                             ) from None
        if dtype.hasobject:
            raise InputError(f"{where}: member {name!r} holds pickled objects (code): "
                             "refused, never loaded")
        if dtype.itemsize == 0:
            raise InputError(f"{where}: member {name!r} has an empty dtype")
        if (not isinstance(shape, tuple) or len(shape) > 8
                or not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise InputError(f"{where}: member {name!r}: malformed shape")
        nbytes = math.prod(shape) * dtype.itemsize
        if info.file_size != header + nbytes:
            raise InputError(f"{where}: member {name!r} declares {nbytes} bytes of data in "
                             f"{info.file_size - header} (damaged)")
        return Member(name[:-4], dtype, shape, bool(fortran), nbytes, info, header)

    def read(self, name: str) -> Array:
        """The array ``name``: exactly its declared bytes, decompressed in bounded steps."""
        m = self.members[name]
        buf = bytearray(m.nbytes)
        view = memoryview(buf)
        try:
            with self._zip.open(m.info) as f:
                f.read(m.header)
                pos = 0
                while pos < m.nbytes:
                    chunk = f.read(min(_STEP, m.nbytes - pos))
                    if not chunk:
                        raise InputError(f"{self.where}: member {name!r} ends early (damaged)")
                    view[pos:pos + len(chunk)] = chunk
                    pos += len(chunk)
                if f.read(1):  # ZipExtFile checks the CRC at the end of the member
                    raise InputError(f"{self.where}: member {name!r} is longer than declared")
        except InputError:
            raise
        except _ERRORS as e:
            raise InputError(f"{self.where}: member {name!r}: damaged: {_why(e)}") from None
        finally:
            view.release()
        arr = np.frombuffer(buf, dtype=m.dtype, count=m.count)
        return arr.reshape(m.shape, order="F" if m.fortran else "C")

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _entries(payload: bytes) -> int | None:
    """The member count the zip's end-of-central-directory record declares (None: no
    such record). A zip64 archive (65 535 members or more) counts as too many."""
    tail = payload[-(65536 + 22):]
    i = tail.rfind(_EOCD)
    if i < 0 or i + 22 > len(tail):
        return None
    (n,) = struct.unpack_from("<H", tail, i + 10)
    return 1 << 30 if n == 0xFFFF else n


def _why(e: BaseException) -> str:
    text = (str(e).splitlines() or [""])[0] or type(e).__name__
    return text if len(text) <= 80 else text[:77] + "…"
