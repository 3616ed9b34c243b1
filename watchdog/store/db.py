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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


class StateOpenError(InputError):
    """The state database cannot be opened; ``fault`` says why: ``corrupt`` (not a
    database, or damaged), ``denied`` (permissions), ``missing``, or ``unwritable``."""

    def __init__(self, message: str, fault: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.fault = fault
        self.detail = detail or message  # the cause without the path


DB_MODE = 0o640  # the service's group may read status and alerts (docs/install.md)
DIR_MODE = 0o750


def connect(state_dir: str | os.PathLike[str], *, create: bool = True,
            readonly: bool = False) -> sqlite3.Connection:
    """Open ``state_dir/state.db`` (creating the folder, mode 0750, when ``create``).

    Raises :class:`StateOpenError` (an InputError: one line naming the path, exit 2) when
    it cannot be opened. ``readonly`` opens an existing database for reading only
    (``watchdog status``, ``alerts``): a truly read-only open, which works for a member of
    the service's group and on a read-only file system. The database and its ``-wal`` and
    ``-shm`` are never followed through a symbolic link (a root command would otherwise
    write wherever the link points).
    """
    d = Path(state_dir)
    path = d / DB_NAME
    try:
        return _connect(d, path, create, readonly)
    except PermissionError:
        raise StateOpenError(f"{path}: permission denied: {_who_may(d)}", "denied") \
            from None


def _connect(d: Path, path: Path, create: bool, readonly: bool) -> sqlite3.Connection:
    _refuse_links(path)
    if readonly or not create:
        if not path.exists():
            if not os.access(d, os.X_OK) and d.exists():
                raise StateOpenError(f"{d}: permission denied: {_who_may(d)}", "denied")
            raise StateOpenError(f"{path}: no agent state here (has `watchdog run` started "
                                 "with this config?)", "missing")
    else:
        try:
            d.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        except OSError as e:
            raise StateOpenError(f"{d}: cannot create the state directory: "
                                 f"{e.strerror or e}", "unwritable") from None
    try:
        _adopt_owner(path)
        if readonly:
            conn = _open_readonly(path)
        else:
            existed = path.exists()
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000,
                                   check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            if not existed:
                _share_with_group(path)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except PermissionError:
        raise StateOpenError(f"{path}: permission denied: {_who_may(path)}", "denied") \
            from None
    except (sqlite3.Error, OSError) as e:
        if not readonly and _read_only_fs(d):
            raise StateOpenError(f"{path}: {d} is on a read-only file system", "unwritable",
                                 "read-only file system") from None
        if not os.access(d, os.X_OK) or (not readonly and not os.access(d, os.W_OK)):
            what = "read" if readonly else "change"
            raise StateOpenError(f"{path}: permission denied (cannot {what} the agent's "
                                 f"state): {_who_may(d)}", "denied", str(e)) from None
        raise StateOpenError(f"{path}: cannot open the state database: {e}",
                             _fault_of(e, path), str(e)) from None
    return conn


def _open_readonly(path: Path) -> sqlite3.Connection:
    """``mode=ro`` (beside a running agent: reads its WAL through the shared ``-shm``);
    where that cannot work without writing (no ``-shm`` yet and no right to create it:
    the agent is stopped and we are not its user, or a read-only mount), an immutable
    open, which is exact when nobody writes."""
    if not os.access(path, os.R_OK):
        raise PermissionError(path)
    last: sqlite3.Error | None = None
    for query in ("mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"file:{path}?{query}", uri=True,
                                   timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False,
                                   isolation_level=None)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error as e:
            last = e
            if "malformed" in str(e) or "not a database" in str(e):
                break
    assert last is not None
    raise last


def _read_only_fs(d: Path) -> bool:
    try:
        return bool(os.statvfs(d).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _refuse_links(path: Path) -> None:
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if p.is_symlink():
            raise StateOpenError(f"{p} is a symbolic link: refusing to follow it (move it "
                                 "away; the agent creates its own files)", "denied")


def _share_with_group(path: Path) -> None:
    """A new database is readable by the service's group (the unit's ``UMask=0077`` would
    make it 0600); its ``-wal`` and ``-shm`` take the same mode (SQLite copies it)."""
    try:
        os.chmod(path, DB_MODE)
    except OSError:
        pass


def _who_may(path: Path) -> str:
    """Who can read it: the owner, its group, or root."""
    try:
        import grp
        import pwd

        st = path.stat() if path.exists() else path.parent.stat()
        owner = pwd.getpwuid(st.st_uid).pw_name
        group = grp.getgrgid(st.st_gid).gr_name
    except (OSError, KeyError):
        return "run it as root or as the service's user"
    who = ["root"] + [f"as {owner}"] * (owner != "root")
    if group != "root":
        who.append(f"as a member of group {group}")
    if len(who) == 1:
        return "run it as root"
    return "run it as " + ", ".join(who[:-1]) + (", or " if len(who) > 2 else " or ") + who[-1]


def _fault_of(e: BaseException, path: Path) -> str:
    text = str(e).lower()
    if "not a database" in text or "malformed" in text:
        return "corrupt"
    if "readonly" in text or "read-only" in text or "unable to open" in text:
        return "unwritable"
    return "unwritable" if path.exists() else "missing"


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
        with transaction(conn):
            for stmt in _split(steps[k]):
                conn.execute(stmt)
            conn.execute("INSERT INTO schema_version(component, version) VALUES (?, ?) "
                         "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                         (component, k + 1))


def _split(script: str) -> list[str]:
    """A migration script's statements (``;``-separated; no ``;`` inside literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One atomic write (the connections run in autocommit mode, so BEGIN is explicit).
    A failed COMMIT (a full disk) leaves nothing half-written: the rollback is attempted
    and the original error goes on."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise
