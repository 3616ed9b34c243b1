"""A log file's bytes, read lazily: the head and tail first, the whole only when needed.

The CSV fast path needs only the first lines (header, first row) and the last line
(truncated?) before handing the path to ``pandas.read_csv``; reading the whole file into
memory first would cost as much again as a plain ``read_csv``. Line-by-line layouts (for
messages about a bad row) and the other formats ask for :meth:`Blob.all`.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
from collections.abc import Iterator
from typing import IO

from watchdog.errors import InputError

HEAD = 65536


class Blob:
    """Lazy access to the bytes of ``path``; every OS error is an :class:`InputError`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._all: bytes | None = None
        self.dropped = 0  # repeated header lines removed by drop_repeats
        try:
            with open(path, "rb") as f:
                self.size = os.fstat(f.fileno()).st_size
                self.head = f.read(HEAD)
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory, not a log file") from None
        except PermissionError:
            raise InputError(f"{path}: permission denied (cannot read)") from None
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
        if len(self.head) < HEAD:  # small file (or a pipe): we have it all
            self._all = self.head
            self.size = len(self.head)

    @property
    def loaded(self) -> bool:
        """Whether the whole file is in memory already."""
        return self._all is not None

    def all(self) -> bytes:
        """The whole file."""
        if self._all is None:
            try:
                with open(self.path, "rb") as f:
                    self._all = f.read()
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
