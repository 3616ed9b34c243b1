"""One agent per node: each GPU an agent watches is claimed by its UUID, host-wide.

The state directory's lock (:mod:`watchdog.store.lock`) keeps two agents off one database,
but a second ``watchdog run`` with another state directory (a user's own, a test config, a
container's) watched the same GPUs and doubled every page. What makes two agents "the
same" is the GPUs, and a GPU's UUID is the same from the host and from any container it is
given to (an index is not: a container numbers its GPUs from 0). So the agent takes an
exclusive ``flock`` on ``gpu-<UUID>.lock`` for every GPU it watches, in one directory for
the whole node, before it samples, and a second agent finding any of them held is refused
(exit 2) with the first one's pid and state directory (written into the file by its holder).

Where: ``$RUNTIME_DIRECTORY`` (the unit's ``RuntimeDirectory=``, ``/run/nvml-watchdog``),
else ``/run/nvml-watchdog`` itself, so the service and an agent started by hand meet in the
same place. ``flock`` is released by the kernel however the holder dies, and follows the
file, not the path: a container that bind-mounts the host's ``/run/nvml-watchdog`` (any
path, with ``RUNTIME_DIRECTORY`` pointing at it) meets the host's agents, across mount and
pid namespaces. Limits (docs/install.md): a container without that mount has its own
``/run`` and cannot see the host's claims (an abstract unix socket per UUID would not
either: it lives in the network namespace, and any local user could squat it); two units
with different ``RuntimeDirectory=`` names do not meet; a user who can neither use nor
create ``/run/nvml-watchdog`` runs unclaimed where it does not exist (no agent has claimed
anything then) and is refused where it does (an agent may hold it and cannot be checked).
The directory is 0750 and the files 0644, so only the service's user and group and root
can take a claim: nobody else can squat a GPU and keep the service from starting.

Simulated GPUs are nobody's: a ``sim`` source claims nothing.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from pathlib import Path

from watchdog.errors import InputError
from watchdog.untyped import JsonDoc

RUN_DIR = Path("/run/nvml-watchdog")
INFO_MAX = 4096  # bytes of holder information read from a claim file
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def claims_dir() -> Path:
    """Where the node's agents claim their GPUs."""
    env = os.environ.get("RUNTIME_DIRECTORY")
    return Path(env.split(":")[0]) if env else RUN_DIR


class SecondAgent(InputError):
    """Another agent watches (some of) these GPUs (exit 2)."""


class Claims:
    """The held claims (released by :meth:`release` or by the process ending)."""

    def __init__(self, held: list[tuple[int, Path]], where: Path) -> None:
        self.held = held
        self.where = where

    def release(self) -> None:
        for fd, path in self.held:
            try:
                os.unlink(path)  # while still locked: a waiter re-checks the inode
            except OSError:
                pass
            os.close(fd)
        self.held = []


def claim(uuids: list[str], info: JsonDoc) -> Claims | None:
    """Claim every GPU in ``uuids`` for this agent (``info``: what a second agent is told
    about it: pid, state directory, host). Returns the claims; None where they cannot be
    taken and no agent can hold any (see the module docs); raises :class:`SecondAgent`
    when another agent holds one, InputError when the claims cannot be checked."""
    d = claims_dir()
    try:
        d.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as e:
        if not d.exists():
            return None  # nobody could have claimed anything there either
        raise InputError(f"{d}: cannot check which agent watches these GPUs: "
                         f"{e.strerror or e}") from None
    held: list[tuple[int, Path]] = []
    try:
        for uuid in sorted(set(uuids)):
            held.append(_take(d / f"gpu-{_SAFE.sub('_', uuid)[:128]}.lock", uuid, uuids, info))
    except BaseException:
        Claims(held, d).release()
        raise
    return Claims(held, d)


def _take(path: Path, uuid: str, uuids: list[str], info: JsonDoc) -> tuple[int, Path]:
    """Lock ``path`` (exclusive, never waiting) and write ``info`` into it."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except PermissionError:
            try:  # another user's file (a crash left it): a read-only open locks as well
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError as e:
                raise InputError(f"{path.parent}: cannot check which agent watches GPU "
                                 f"{uuid}: {e.strerror or e} (run as root or the service's "
                                 "user, or add --shadow)") from None
        except OSError as e:
            raise InputError(f"{path}: cannot claim GPU {uuid}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            first = _read_info(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise InputError(f"{path}: cannot claim GPU {uuid}: {e.strerror or e}") from None
            raise SecondAgent(refusal(uuid, uuids, first)) from None
        try:  # the holder before us may have unlinked it on release: lock the live file
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                os.close(fd)
                continue
        except FileNotFoundError:
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except OSError:
            pass  # read-only: the claim holds, only the holder's name is missing
        return fd, path


def _read_info(fd: int) -> JsonDoc:
    try:
        doc = json.loads(os.pread(fd, INFO_MAX, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def refusal(uuid: str, uuids: list[str], first: JsonDoc) -> str:
    """The one line a second agent prints."""
    who = ", ".join(x for x in (
        f"pid {first['pid']}" if isinstance(first.get("pid"), int) else "",
        f"state {first['state_dir']}" if isinstance(first.get("state_dir"), str) else "")
        if x)
    more = f" (one of the {len(set(uuids))} GPUs here)" if len(set(uuids)) > 1 else ""
    return (f"GPU {uuid}{more} is watched by another nvml-watchdog agent"
            f"{f' ({who})' if who else ''}: a second agent would page everything twice; "
            "stop it, or run this one with --shadow (it watches and records, never notifies)")
