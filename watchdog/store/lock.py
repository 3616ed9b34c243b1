"""One agent per state directory: an exclusive ``flock`` on the directory itself.

Why ``flock`` on the directory: the kernel drops the lock when its holder dies, however it
dies (a restart after ``kill -9`` is never blocked by a stale pid file), and a directory
can be locked even when it is read-only (the agent then runs from memory, but still
alone). The lock is taken before anything in the directory is read or changed, so a
second agent, or a start that is then refused, changes nothing. The holder's pid comes
from ``/proc/locks``, for the one line the second agent prints.

A state directory that does not exist and cannot be created is locked through a file in
the runtime or temporary directory named after its path.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

from watchdog.errors import InputError


class StateLock:
    """The held lock (released by :meth:`release` or by the process ending)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    def release(self) -> None:
        if self.fd >= 0:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = -1


def acquire(state_dir: str | os.PathLike[str]) -> StateLock:
    """Lock ``state_dir`` for this process, or raise InputError (exit 2) naming the pid
    of the agent that holds it."""
    d = Path(state_dir)
    try:
        d.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError:
        pass  # read-only or forbidden parent: locked through a stand-in file below
    target = d if d.is_dir() else _stand_in(d)
    try:
        flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if target == d else os.O_CREAT)
        fd = os.open(target, flags, 0o600)
    except OSError as e:
        raise InputError(f"{d}: cannot lock the state directory: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = holder(fd)
        os.close(fd)
        who = f"pid {pid}" if pid else "another process"
        raise InputError(f"{d}: another nvml-watchdog agent ({who}) is running on this "
                         "state directory; stop it first (one agent per node and state "
                         "directory)") from None
    except OSError as e:
        os.close(fd)
        raise InputError(f"{d}: cannot lock the state directory: {e.strerror or e}") from None
    return StateLock(fd, target)


def holder(fd: int) -> int | None:
    """The pid holding a ``flock`` on the file behind ``fd`` (from ``/proc/locks``)."""
    return _holder(os.fstat(fd))


def holder_of(path: str | os.PathLike[str]) -> int | None:
    """The pid holding a ``flock`` on ``path`` (a state directory), without opening it:
    a command asking whether an agent runs there never takes (nor needs) the lock."""
    return _holder(os.stat(path))


def _holder(st: os.stat_result) -> int | None:
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:131074 0 EOF" (blocked waiters have "->")
        if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
            continue
        try:
            major, minor, ino = parts[5].split(":")
            if (int(major, 16), int(minor, 16), int(ino)) == want:
                return int(parts[4])
        except ValueError:
            continue
    return None


def _stand_in(d: Path) -> Path:
    """Where to lock a state directory that cannot exist: a file per path in the runtime
    directory (``$RUNTIME_DIRECTORY``, ``$XDG_RUNTIME_DIR``) or the temporary one."""
    base = os.environ.get("RUNTIME_DIRECTORY") or os.environ.get("XDG_RUNTIME_DIR") or \
        tempfile.gettempdir()
    digest = hashlib.sha256(str(d.absolute()).encode()).hexdigest()[:16]
    return Path(base.split(":")[0]) / f"nvml-watchdog-{digest}.lock"
