"""The store (the agent's SQLite state database) as its threads use it: on disk while
the disk takes writes, in memory while it does not, back on disk as soon as it can be
written again.

Why: a page that is due must go out even when ``/var`` is full, the state directory is
read-only or missing, or ``state.db`` rots. Every component (learned state, incidents,
the alerting policy and outbox, the delivery workers) does its database work as *units*
through :meth:`Store.run`: one function that runs on a connection and either completes
or raises. When a unit fails because of the storage (disk full, read-only, I/O error,
corruption) it is rolled back, the database is copied into memory (SQLite's backup API;
table by table when the file is damaged), and the unit runs again there. Pages keep
flowing from the in-memory outbox. Every ``RESTORE_EVERY_S`` the agent tries to write the
memory copy back (:meth:`Store.try_disk`); once that works, the database is on disk
again with everything that happened meanwhile, and nothing was sent twice.

Consistency: a unit holds a shared lock while it runs; the switch between disk and memory
holds it exclusively, so every unit lands entirely before the copy (and is in it) or
entirely after (and runs on the new database). In memory all units share one connection
and run one at a time. Deliveries take seconds and happen outside units: a worker reads
its row in one unit, sends, and records the result in another.

A corrupt file (found by ``PRAGMA quick_check`` at start or by any unit later) is moved
aside as ``state.db.corrupt-<UTC time>`` (kept for a person to look at; its ``-wal`` and
``-shm`` beside it) and a fresh database takes its place, with whatever could be read out
of the damaged one. The agent reports each of these as an ``agent`` incident
(:meth:`take_events`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from watchdog.errors import InputError
from watchdog.store import salvage
from watchdog.store.db import DB_NAME, StateOpenError, connect, migrate
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.store")
T = TypeVar("T")

#: primary SQLite result codes that mean "the storage failed", not "the SQL is wrong"
FULL = {sqlite3.SQLITE_FULL}
UNWRITABLE = {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY,
              sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM}
CORRUPT = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
RESTORE_EVERY_S = 30.0  # monotonic seconds between attempts to go back to disk


def storage_fault(e: BaseException) -> str | None:
    """``"corrupt"``, ``"unwritable"`` or None (not a storage problem) for an exception."""
    if isinstance(e, InputError):
        return "unwritable"
    if not isinstance(e, sqlite3.Error):
        return None
    code = getattr(e, "sqlite_errorcode", None)
    text = str(e).lower()
    if code is not None:
        primary = code & 0xFF
        if primary in CORRUPT:
            return "corrupt"
        if primary in UNWRITABLE:
            return "unwritable"
    if "malformed" in text or "not a database" in text:
        return "corrupt"
    if any(w in text for w in ("disk is full", "readonly", "disk i/o", "unable to open")):
        return "unwritable"
    return None


class _RWLock:
    """Many units at once, or one switch. Reentrant for a thread's nested units; a waiting
    switch goes before new units (a steady stream of units cannot starve it)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0
        self._local = threading.local()

    @contextmanager
    def shared(self) -> Iterator[None]:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            with self._cond:
                while self._writer or self._waiting_writers:
                    self._cond.wait()
                self._readers += 1
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                with self._cond:
                    self._readers -= 1
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class Store:
    """The state database of one agent (or one test): ``run(fn)`` does a unit of work.

    ``mode`` is ``"disk"`` or ``"memory"``; ``reason`` says why it is in memory.
    ``clock`` (monotonic seconds) paces the attempts to go back to disk."""

    def __init__(self, state_dir: str | Path, *, create: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / DB_NAME
        self._create = create
        self._clock = clock
        self.mode = "disk"
        self.reason: str | None = None
        self.memory_since: float | None = None  # clock time
        self.generation = 0
        self._rw = _RWLock()
        self._mem: sqlite3.Connection | None = None
        self._mem_lock = threading.RLock()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._components: dict[str, Sequence[str]] = {}
        self._events: list[tuple[str, str]] = []
        self._events_lock = threading.Lock()
        self._next_restore = -1e18
        self._announced = False  # the switch to memory was reported (log, event)
        self._closed = False
        self._open()

    # --- opening ----------------------------------------------------------------------------
    def _open(self) -> None:
        """Disk if the file opens, passes ``quick_check`` and takes a write; else memory."""
        try:
            conn = connect(self.dir, create=self._create)
        except StateOpenError as e:
            if e.fault == "corrupt":
                self._corrupt_at_start(e.detail)
            else:
                self._to_memory(f"cannot open {self.path}: {e.detail}", copy=self._readable)
            return
        try:
            check = conn.execute("PRAGMA quick_check").fetchone()
            if check is None or check[0] != "ok":
                raise sqlite3.DatabaseError(f"database disk image is malformed ({check})")
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                         "component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
            conn.execute("BEGIN IMMEDIATE")  # a write lock: fails on a read-only file
            conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            conn.close()
            if storage_fault(e) == "corrupt":
                self._corrupt_at_start(_short(e))
            else:
                self._to_memory(f"cannot write {self.path}: {_short(e)}", copy=self._readable)
            return
        self._remember(conn)
        self._local.conn = (self.generation, conn)

    def _readable(self) -> sqlite3.Connection | None:
        """A read-only view of the file on disk (to copy into memory), or None."""
        if not self.path.is_file():
            return None
        for uri in (f"file:{self.path}?mode=ro", f"file:{self.path}?immutable=1"):
            try:
                c = sqlite3.connect(uri, uri=True, check_same_thread=False)
                c.execute("SELECT count(*) FROM sqlite_master").fetchone()
                return c
            except sqlite3.Error:
                continue
        return None

    def _corrupt_at_start(self, why: str) -> None:
        aside = self._move_aside()
        saved = salvage.salvage_from(aside) if aside else None
        self._event("corrupt", f"{self.path} was corrupt ({why}): moved aside to {aside}"
                    if aside else f"{self.path} is corrupt ({why}) and could not be moved "
                    "aside")
        try:
            conn = connect(self.dir, create=self._create)
            if saved is not None:
                salvage.copy_tables(saved, conn)
            self._remember(conn)
            self._local.conn = (self.generation, conn)
        except (InputError, sqlite3.Error) as e2:
            self._to_memory(f"cannot start a fresh {self.path}: {_short(e2)}",
                            copy=lambda: saved)
        if saved is not None:
            saved.close()

    # --- components --------------------------------------------------------------------------
    def migrate(self, component: str, steps: Sequence[str]) -> None:
        """Create or upgrade ``component``'s tables (kept, to set up a fresh database)."""
        self._components[component] = steps
        self.run(lambda c: migrate(c, component, steps))

    # --- units ---------------------------------------------------------------------------------
    def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` as one unit; on a storage fault, roll back, move the database
        to memory and run it there (where it cannot fail for the disk's sake)."""
        for _attempt in range(3):
            with self._rw.shared():
                gen = self.generation
                if self.mode == "memory":
                    with self._mem_lock:
                        assert self._mem is not None
                        return fn(self._mem)
                conn = self._thread_conn()
                try:
                    return fn(conn)
                except Exception as e:
                    fault = storage_fault(e)
                    if fault is None:
                        raise
                    _rollback(conn)
                    err = e
            self._fault(gen, fault, err)
        raise InputError(f"{self.path}: the state database keeps failing: {_short(err)}")

    def _thread_conn(self) -> sqlite3.Connection:
        held = getattr(self._local, "conn", None)
        if held is not None and held[0] == self.generation:
            return held[1]
        conn = connect(self.dir, create=self._create)
        self._remember(conn)
        self._local.conn = (self.generation, conn)
        return conn

    def _remember(self, conn: sqlite3.Connection) -> None:
        with self._conns_lock:
            self._conns.append(conn)

    # --- switching -----------------------------------------------------------------------------
    def _fault(self, gen: int, fault: str, err: BaseException) -> None:
        with self._rw.exclusive():
            if self.generation != gen:  # another thread switched already
                return
            if fault == "corrupt":
                self._corrupt_running(err)
            else:
                self._to_memory_locked(f"cannot write {self.path}: {_short(err)}")

    def _to_memory(self, reason: str, copy: Callable[[], sqlite3.Connection | None]) -> None:
        with self._rw.exclusive():
            self._to_memory_locked(reason, copy)

    def _to_memory_locked(self, reason: str,
                          copy: Callable[[], sqlite3.Connection | None] | None = None,
                          announce: bool = True) -> None:
        src = copy() if copy is not None else self._any_disk_conn()
        mem, copied = salvage.copy_to_memory(src)
        if src is not None and copy is not None:
            src.close()
        self._install_schema(mem)
        self._close_disk_conns()
        self._mem, self.mode, self.reason = mem, "memory", reason
        self.memory_since = self._clock()
        self._next_restore = self._clock() + RESTORE_EVERY_S
        self.generation += 1
        if not copied and src is not None:
            log.error("state database: the old state could not be read, it starts over")
        if announce:
            self._announce_memory()

    def _announce_memory(self) -> None:
        self._announced = True
        log.error("state database in MEMORY ONLY: %s. Detection and alerting go on; what "
                  "happens now is written to disk once it can be (retried every %.0f s)",
                  self.reason, RESTORE_EVERY_S)
        self._event("memory", self.reason or "")

    def _corrupt_running(self, err: BaseException) -> None:
        """Salvage into memory, move the file aside, start a fresh one from memory; only
        if that fresh start fails is the agent left in memory (and says so)."""
        reason = f"{self.path} became corrupt ({_short(err)})"
        self._to_memory_locked(reason, announce=False)
        aside = self._move_aside()
        self._event("corrupt", f"{reason}: moved aside to {aside}" if aside else reason)
        if not self._restore_locked():
            self._announce_memory()

    def _any_disk_conn(self) -> sqlite3.Connection | None:
        with self._conns_lock:
            return self._conns[0] if self._conns else None

    def _install_schema(self, conn: sqlite3.Connection) -> None:
        """Every component's tables on a copy. A salvaged copy may hold the tables without
        their ``schema_version`` row (that table was the damaged one): the tables came
        from this very agent, so they are current."""
        for component, steps in self._components.items():
            try:
                migrate(conn, component, steps)
            except sqlite3.OperationalError as e:
                if "already exists" not in str(e):
                    log.error("state database: cannot set up %s tables: %s", component, e)
                    continue
                conn.execute("INSERT OR REPLACE INTO schema_version (component, version) "
                             "VALUES (?, ?)", (component, len(steps)))
            except (sqlite3.Error, InputError) as e:
                log.error("state database: cannot set up %s tables: %s", component, e)

    def _close_disk_conns(self) -> None:
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except sqlite3.Error:
                pass

    def _move_aside(self) -> Path | None:
        """Rename ``state.db`` (and its -wal/-shm) to ``state.db.corrupt-<UTC time>``."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = self.path.with_name(f"{DB_NAME}.corrupt-{stamp}")
        try:
            self.path.rename(aside)
        except OSError as e:
            log.error("cannot move the corrupt %s aside: %s", self.path, e)
            return None
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(DB_NAME + suffix)
            try:
                side.rename(aside.with_name(aside.name + suffix))
            except OSError:
                pass
        return aside

    # --- back to disk ----------------------------------------------------------------------------
    def try_disk(self, force: bool = False) -> bool:
        """In memory: try to write everything back to disk (at most every
        ``RESTORE_EVERY_S`` unless ``force``); True when the database is on disk."""
        if self.mode == "disk":
            return True
        if not force and self._clock() < self._next_restore:
            return False
        with self._rw.exclusive():
            return self._restore_locked()

    def _restore_locked(self) -> bool:
        if self.mode == "disk":
            return True
        self._next_restore = self._clock() + RESTORE_EVERY_S
        assert self._mem is not None
        try:
            disk = connect(self.dir, create=self._create)
        except InputError:
            return False
        try:
            salvage.merge_silences(disk, self._mem)
            self._mem.backup(disk)
            disk.execute("PRAGMA quick_check").fetchone()
        except sqlite3.Error as e:
            disk.close()
            if storage_fault(e) == "corrupt":
                aside = self._move_aside()
                self._event("corrupt", f"{self.path} was corrupt ({_short(e)}): moved aside "
                            f"to {aside}")
                return self._restore_fresh()
            log.debug("state database still not writable: %s", e)
            return False
        return self._on_disk(disk)

    def _restore_fresh(self) -> bool:
        try:
            disk = connect(self.dir, create=self._create)
            assert self._mem is not None
            self._mem.backup(disk)
        except (InputError, sqlite3.Error):
            return False
        return self._on_disk(disk)

    def _on_disk(self, disk: sqlite3.Connection) -> bool:
        was = self.reason
        if self._mem is not None:
            self._mem.close()
        self._mem, self.mode, self.reason, self.memory_since = None, "disk", None, None
        self.generation += 1
        self._remember(disk)
        self._local.conn = (self.generation, disk)
        if self._announced:
            self._announced = False
            log.warning("state database back on disk (%s): everything kept in memory since "
                        "is written", self.path)
            self._event("disk", was or "")
        return True

    # --- reporting -------------------------------------------------------------------------------
    def _event(self, kind: str, text: str) -> None:
        with self._events_lock:
            self._events.append((kind, text))

    def take_events(self) -> list[tuple[str, str]]:
        """What happened to the storage since the last call: ``("memory", why)``,
        ``("disk", why it had been in memory)``, ``("corrupt", what was done)``."""
        with self._events_lock:
            out, self._events = self._events, []
        return out

    def status(self) -> JsonDoc:
        """For ``watchdog status``: where the state lives now and why."""
        return {"path": str(self.path), "mode": self.mode, "reason": self.reason}

    def close(self) -> None:
        """Close every connection (the memory copy is lost: try :meth:`try_disk` first)."""
        if self._closed:
            return
        self._closed = True
        with self._rw.exclusive():
            self._close_disk_conns()
            if self._mem is not None:
                self._mem.close()
                self._mem = None


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]
