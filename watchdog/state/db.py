"""Open the state database: WAL, one writer, safe against a second process.

Why SQLite in WAL mode: the agent writes every few seconds (learned levels, status,
incidents, the alerting outbox) while commands such as ``watchdog status`` or ``watchdog
silence add`` read or write from another process; WAL lets readers run beside the writer
and a ``busy_timeout`` makes a second writer wait instead of failing. ``synchronous=FULL``
makes a committed transaction survive power loss, not only a killed process: an outbox
row marked sent must stay sent.

Ownership: the service runs as its own user (systemd ``DynamicUser=``). A command run as
root that created ``state.db-wal`` or ``-shm`` would leave files the service can no longer
open, so :func:`connect` run as root against a database owned by another user first takes
that user's identity (effective uid/gid) for the rest of the process. Commands that touch
the state call it before anything else.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from watchdog.errors import InputError

DB_NAME = "state.db"
BUSY_TIMEOUT_MS = 10_000


def default_state_dir() -> Path:
    """``$STATE_DIRECTORY`` (first entry) or the per-user state folder."""
    env = os.environ.get("STATE_DIRECTORY")
    if env:
        return Path(env.split(":")[0])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "nvml-watchdog"


def resolve_state_dir(configured: str | os.PathLike[str] | None) -> Path:
    """The state directory: the configured one, else :func:`default_state_dir`."""
    return Path(configured).expanduser() if configured else default_state_dir()


def _adopt_owner(path: Path) -> None:
    """Running as root on another user's state: become that user (see module doc)."""
    if os.geteuid() != 0:
        return
    probe = path if path.exists() else path.parent
    try:
        st = probe.stat()
    except OSError:
        return
    if st.st_uid == 0:
        return
    os.setegid(st.st_gid)
    os.seteuid(st.st_uid)


def connect(state_dir: str | os.PathLike[str], *, create: bool = True,
            readonly: bool = False) -> sqlite3.Connection:
    """Open ``state_dir/state.db`` (creating the folder, mode 0700, when ``create``).

    Raises :class:`InputError` with one line naming the path when it cannot be opened.
    ``readonly`` opens an existing database for reading only (``watchdog status``).
    """
    d = Path(state_dir)
    path = d / DB_NAME
    if readonly or not create:
        if not path.exists():
            raise InputError(f"{path}: no agent state here (has `watchdog run` started "
                             "with this config?)")
    else:
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{d}: cannot create the state directory: "
                             f"{e.strerror or e}") from None
    try:
        _adopt_owner(path)
        if readonly:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                   timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False,
                                   isolation_level=None)
        else:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000,
                                   check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except (sqlite3.Error, OSError) as e:
        raise InputError(f"{path}: cannot open the state database: {e}") from None
    return conn


def migrate(conn: sqlite3.Connection, component: str, steps: Sequence[str]) -> None:
    """Bring ``component``'s tables to ``len(steps)``: step ``k`` (a SQL script) runs once.

    Each component (``"agent"``, ``"notify"``, …) owns its list; steps are only ever
    appended, never edited, so an old database upgrades in place. A database written by a
    newer version (more steps than known) is refused rather than misread.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                 "component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM schema_version WHERE component = ?",
                       (component,)).fetchone()
    have = row[0] if row else 0
    if have > len(steps):
        raise InputError(f"state database: {component} tables are at version {have}, this "
                         f"nvml-watchdog knows {len(steps)}: upgrade nvml-watchdog")
    for k in range(have, len(steps)):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _split(steps[k]):
                conn.execute(stmt)
            conn.execute("INSERT INTO schema_version(component, version) VALUES (?, ?) "
                         "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                         (component, k + 1))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _split(script: str) -> list[str]:
    """A migration script's statements (``;``-separated; no ``;`` inside literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]
