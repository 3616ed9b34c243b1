"""A log file's bytes, read lazily: the head and tail first, the whole only when needed.

The CSV fast path needs only the first lines (header, first row) and the last line
(truncated?) before handing the path to ``pandas.read_csv``; reading the whole file into
memory first would cost as much again as a plain ``read_csv``. Line-by-line layouts (for
messages about a bad row) and the other formats ask for :meth:`Blob.all`.

Bounds, before any parser sees the bytes (:meth:`Blob.trim_nul_tail`,
:meth:`Blob.check_text`): a run of NUL bytes at the end of a text log (what a crash
mid-write leaves: the file's size was extended, its data never written) is cut off with a
warning, found through the file's holes (``SEEK_HOLE``) or a backward scan in 1 MiB
steps, never by reading the file into memory; a NUL anywhere else, or a line longer than
:data:`MAX_LINE`, refuses the file with one line. Both checks are ``memchr`` passes over
a memory map (milliseconds for a 100 MB log). A stream that is not a regular file (a
pipe: ``watchdog replay /dev/stdin``, or ``-``) is read into memory whole, once, up to
:data:`MAX_STREAM` bytes (64 MiB); a text stream with a NUL byte is refused as soon as
the NUL is read (so ``/dev/zero`` stops at once), a recording may hold NULs (it is
binary). A stream can be read only once: :func:`watchdog.sources.replay.open_parts`
hands the :class:`Blob` it read on to :func:`~watchdog.sources.replay.open_log`.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import stat
from collections.abc import Iterator
from typing import IO

from watchdog.errors import InputError

HEAD = 65536
#: No line of a text log may be longer: a window of this many bytes without a newline
#: refuses the file (so every line up to this long is read, none of twice this length).
MAX_LINE = 65536
#: A pipe or other stream is read into memory up to this many bytes: 64 MiB (an
#: ``nvidia-smi`` log of 8 GPUs for about 18 hours at 1 s). Replaying that much from
#: memory peaks near 220 MB and refusing an endless pipe near 140 MB, both below the
#: unit's 300 MB; a bigger log is replayed from its file (memory-mapped, in parts).
MAX_STREAM = 64 << 20
_STEP = 1 << 20


class Blob:
    """Lazy access to the bytes of ``path``; every OS error is an :class:`InputError`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._all: bytes | None = None
        self.dropped = 0  # repeated header lines removed by drop_repeats
        self.notes: list[str] = []  # warnings about the bytes themselves (a NUL tail)
        self._text_checked = False
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                self.regular = stat.S_ISREG(st.st_mode)
                self.size = st.st_size
                self.mtime = st.st_mtime  # a pipe's: when it was last written
                self.head = f.read(HEAD)
                if not self.regular and len(self.head) == HEAD:
                    from watchdog.sources.replay.sniff import MAGIC, WANDB_MAGIC

                    self._all = self.head + _read_stream(
                        f, path, binary=self.head.startswith((MAGIC, WANDB_MAGIC)))
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory, not a log file") from None
        except PermissionError:
            raise InputError(f"{path}: permission denied (cannot read)") from None
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
        if self._all is not None:
            self.size = len(self._all)
        elif len(self.head) < HEAD:  # small file (or a pipe): we have it all
            self._all = self.head
            self.size = len(self.head)

    def trim_nul_tail(self) -> int:
        """Cut a run of NUL bytes off the end (what a crash mid-write leaves in a text log);
        returns how many, with a note for the reader's warnings. Never loads the file:
        the holes of a sparse file are skipped, the rest is scanned backwards in 1 MiB
        steps. Not for a recording (a binary format)."""
        if self.size == 0 or self._byte(self.size - 1) != 0:
            return 0
        end = (len(self._all.rstrip(b"\0")) if self._all is not None
               else self._last_data_end())
        cut = self.size - end
        self.size = end
        self.head = self.head[:end]
        if self._all is not None:
            self._all = self._all[:end]
        elif end < HEAD:
            self._all = self.head
        self.notes.append(f"{self.path}: {cut} NUL bytes at the end ignored (the log was cut "
                          "off mid-write, e.g. by a crash): read up to them")
        return cut

    def _byte(self, pos: int) -> int:
        if self._all is not None:
            return self._all[pos]
        try:
            with open(self.path, "rb") as f:
                f.seek(pos)
                b = f.read(1)
        except OSError as e:
            raise InputError(f"{self.path}: cannot read: {e.strerror or e}") from None
        return b[0] if b else 0

    def _last_data_end(self) -> int:
        """Offset just past the last non-NUL byte of the file (0: all NUL)."""
        try:
            with open(self.path, "rb") as f:
                pos = self.size
                hole = _data_end(f.fileno(), self.size)
                if hole is not None:
                    pos = hole
                while pos > 0:
                    a = max(0, pos - _STEP)
                    f.seek(a)
                    block = f.read(pos - a).rstrip(b"\0")
                    if block:
                        return a + len(block)
                    pos = a
        except OSError as e:
            raise InputError(f"{self.path}: cannot read: {e.strerror or e}") from None
        return 0

    def check_text(self, end: int | None = None, start: int = 0) -> None:
        """Refuse (:class:`InputError`, one line) a NUL byte in ``[start, end)`` or a line
        longer than :data:`MAX_LINE`: two ``memchr``-speed passes, no copy. Once per blob."""
        end = self.size if end is None else end
        if self._text_checked or end <= start:
            return
        with self.mapped() as buf:
            nul = buf.find(b"\0", start, end)
            if nul >= 0:
                ln = self.count_lines(nul) + 1
                raise InputError(f"{self.path}:{ln}: NUL bytes inside the log (binary data, or "
                                 "a crash mid-write with lines appended after it): remove "
                                 "them, e.g. tr -d '\\000' < LOG > FIXED")
            for w in range(start, end - MAX_LINE, MAX_LINE):
                if buf.find(b"\n", w, w + MAX_LINE) < 0:
                    ln = self.count_lines(w) + 1
                    raise InputError(f"{self.path}:{ln}: a line longer than {MAX_LINE >> 10} "
                                     "KiB (not a GPU log?)")
        self._text_checked = True

    def count_lines(self, end: int) -> int:
        """Newlines in the first ``end`` bytes, counted in 1 MiB steps (no copy of the
        file)."""
        if self._all is not None:
            return self._all.count(b"\n", 0, end)
        n = 0
        with self.mapped() as buf:
            for a in range(0, end, _STEP):
                n += buf[a:min(end, a + _STEP)].count(b"\n")
        return n

    @contextlib.contextmanager
    def mapped(self) -> Iterator[bytes | mmap.mmap]:
        """The bytes (in memory) or a read-only memory map of the first ``size`` bytes."""
        if self._all is not None or self.size == 0:
            yield self._all or b""
            return
        try:
            with open(self.path, "rb") as f:
                m = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            yield self.all()
            return
        try:
            yield m
        finally:
            m.close()

    @property
    def loaded(self) -> bool:
        """Whether the whole file is in memory already."""
        return self._all is not None

    def all(self) -> bytes:
        """The whole file."""
        if self._all is None:
            try:
                with open(self.path, "rb") as f:
                    self._all = f.read(self.size)
            except OSError as e:
                raise InputError(f"{self.path}: cannot read: {e.strerror or e}") from None
            self.size = len(self._all)
        return self._all

    def drop_repeats(self, line: bytes) -> int:
        """Remove every later copy of the whole line ``line`` (a header that a logging loop
        repeats before each sample); returns how many were removed. The bytes are then
        held in memory (line numbers in later messages count the remaining lines)."""
        data = self.all()
        first = data.find(line)
        if first < 0:
            return 0
        start = first + len(line)
        rest = data[start:]
        before = len(rest)
        count = 0
        for end in (b"\r\n", b"\n"):
            pat = b"\n" + line + end
            while True:  # consecutive repeats overlap in their newline: repeat until none
                n = rest.count(pat)
                if not n:
                    break
                count += n
                rest = rest.replace(pat, b"\n")
        if rest.endswith(b"\n" + line) or rest.endswith(b"\n" + line + b"\r"):
            rest = rest[: rest.rfind(b"\n") + 1]  # a repeat as the last line, no newline
            count += 1
        if len(rest) != before:
            self._all = data[:start] + rest
            self.size = len(self._all)
        self.dropped += count
        return self.dropped

    def tail(self, n: int = HEAD) -> bytes:
        """The last ``n`` bytes (fewer for a small file)."""
        if self._all is not None:
            return self._all[-n:]
        try:
            with open(self.path, "rb") as f:
                f.seek(max(0, self.size - n))
                return f.read(n)
        except OSError as e:
            raise InputError(f"{self.path}: cannot read: {e.strerror or e}") from None

    @contextlib.contextmanager
    def reader(self, end: int) -> Iterator[IO[bytes]]:
        """A binary file object over the first ``end`` bytes, for ``pandas.read_csv``.

        A read-only memory map of the file when it is not in memory yet (the parser then
        copies its chunks straight from the page cache: no 100 MB ``read()`` first), else
        (or when mapping fails: a pipe, a file that shrank) the bytes in memory.
        """
        if self._all is None and end == self.size and end > 0:
            try:
                with open(self.path, "rb") as f:
                    m = mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                m = None
            if m is not None:
                try:
                    yield m  # type: ignore[misc]
                finally:
                    m.close()
                return
        data = self.all()
        yield io.BytesIO(data if end == len(data) else data[:end])


def _read_stream(f: IO[bytes], path: str, binary: bool = False) -> bytes:
    """The rest of a stream (a pipe), at most :data:`MAX_STREAM` bytes in all; a NUL byte
    refuses it at once unless it is ``binary`` (a recording, a W&B run file)."""
    chunks: list[bytes] = []
    total = HEAD
    while True:
        b = f.read(_STEP)
        if not b:
            return b"".join(chunks)
        total += len(b)
        if total > MAX_STREAM:
            raise InputError(f"{path}: not a regular file and more than {MAX_STREAM >> 20} MiB "
                             "(save it to a file first)")
        if not binary and b"\0" in b:  # /dev/zero, or binary data: no log, stop reading
            raise InputError(f"{path}: binary data (NUL bytes), not a GPU log")
        chunks.append(b)


def _data_end(fd: int, size: int) -> int | None:
    """End of the file's last data extent (its trailing hole skipped), through
    ``SEEK_DATA``/``SEEK_HOLE``; None where the file system cannot tell."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        return None
    pos, end = 0, 0
    try:
        for _ in range(100_000):  # extents; a file of more is scanned instead
            try:
                d = os.lseek(fd, pos, seek_data)
            except OSError:  # ENXIO: no data after pos
                return end
            h = os.lseek(fd, d, seek_hole)
            end = min(h, size)
            if h >= size:
                return end
            pos = h
    except OSError:
        return None
    return None
