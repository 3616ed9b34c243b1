"""The agent's status where ``watchdog status`` can read it while the state database
cannot be written (the state is in memory only: a full or read-only disk).

The file lives in memory too: systemd's ``RuntimeDirectory=`` (``/run/nvml-watchdog``,
``$RUNTIME_DIRECTORY``), else ``/dev/shm``; one file per state directory (named by a hash
of its path), mode 0640 like the database. The agent writes it only while it runs from
memory and removes it once the database is on disk again, so an old file never
outlives its use.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from watchdog.untyped import JsonDoc

SYSTEMD_RUNTIME = Path("/run/nvml-watchdog")
MAX_BYTES = 1 << 20  # a status document is a few KiB; never read more than this


def status_file(state_dir: str | os.PathLike[str]) -> Path:
    """Where the status of the agent on ``state_dir`` goes while it runs from memory."""
    env = os.environ.get("RUNTIME_DIRECTORY")
    if env:
        base = Path(env.split(":")[0])
    elif SYSTEMD_RUNTIME.is_dir():
        base = SYSTEMD_RUNTIME
    else:
        base = Path("/dev/shm")
    digest = hashlib.sha256(str(Path(state_dir).absolute()).encode()).hexdigest()[:16]
    return base / f"nvml-watchdog-status-{digest}.json"


def write(state_dir: str | os.PathLike[str], doc: JsonDoc) -> None:
    """Replace the file atomically (a reader never sees half a document). Raises OSError."""
    path = status_file(state_dir)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o640)
    try:
        os.write(fd, json.dumps(doc).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read(state_dir: str | os.PathLike[str]) -> JsonDoc | None:
    """The document, or None when there is none (or it cannot be read)."""
    path = status_file(state_dir)
    try:
        if path.is_symlink():
            return None
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_BYTES:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def remove(state_dir: str | os.PathLike[str]) -> None:
    try:
        status_file(state_dir).unlink()
    except OSError:
        pass
