"""The state database under storage faults: a full disk moves it to memory with nothing
lost, it goes back to disk when it can, a corrupt file is moved aside and salvaged, and
a switch in the middle of other threads' work neither loses nor repeats a write.

A full disk is made with SQLite's own ``max_page_count`` (the write fails with
SQLITE_FULL exactly as on a full file system), so these run anywhere, as any user; the
real full file system is in tests/test_hostile_agent.py."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from watchdog.store.db import DB_NAME, connect
from watchdog.store.store import Store, storage_fault

STEPS = ("CREATE TABLE t (id INTEGER PRIMARY KEY, who TEXT NOT NULL, payload TEXT)",)


def make(tmp: Path) -> Store:
    db = Store(tmp / "state", clock=lambda: 0.0)
    db.migrate("test", STEPS)
    return db


def rows(db: Store) -> list[tuple[int, str]]:
    return db.run(lambda c: c.execute("SELECT id, who FROM t ORDER BY id").fetchall())


def on_disk(tmp: Path) -> list[tuple[int, str]]:
    c = sqlite3.connect(tmp / "state" / DB_NAME)
    try:
        return c.execute("SELECT id, who FROM t ORDER BY id").fetchall()
    finally:
        c.close()


def fill_disk(db: Store) -> None:
    """This thread's connection may not grow the file any more: the next write that needs
    a page fails with SQLITE_FULL ("database or disk is full")."""
    def cap(c: sqlite3.Connection) -> None:
        (pages,) = c.execute("PRAGMA page_count").fetchone()
        c.execute(f"PRAGMA max_page_count = {pages}")
    db.run(cap)


def big_insert(db: Store, i: int, who: str = "main") -> None:
    db.run(lambda c: c.execute("INSERT INTO t VALUES (?, ?, ?)", (i, who, "x" * 20_000)))


def test_a_full_disk_moves_the_state_to_memory_and_the_write_is_not_lost(tmp_path: Path) -> None:
    db = make(tmp_path)
    big_insert(db, 1)
    fill_disk(db)
    big_insert(db, 2)  # fails on disk, runs again in memory
    assert db.mode == "memory" and "disk is full" in (db.reason or "")
    assert [i for i, _ in rows(db)] == [1, 2]
    assert [i for i, _ in on_disk(tmp_path)] == [1]  # the disk has what it had
    events = db.take_events()
    assert [k for k, _ in events] == ["memory"]
    assert db.take_events() == []  # said once


def test_back_on_disk_when_it_can_be_written_with_everything_since(tmp_path: Path) -> None:
    t = [0.0]
    db = Store(tmp_path / "state", clock=lambda: t[0])
    db.migrate("test", STEPS)
    fill_disk(db)
    big_insert(db, 1)
    big_insert(db, 2)
    assert db.mode == "memory"
    assert not db.try_disk()  # not yet: attempts are paced
    t[0] += 31.0
    assert db.try_disk()  # a new connection has no page cap: the "disk" has room again
    assert db.mode == "disk"
    big_insert(db, 3)
    assert [i for i, _ in on_disk(tmp_path)] == [1, 2, 3]
    assert [k for k, _ in db.take_events()] == ["memory", "disk"]


def test_a_switch_while_other_threads_write_loses_and_repeats_nothing(tmp_path: Path) -> None:
    db = make(tmp_path)
    stop = threading.Event()
    done: dict[str, int] = {}

    def writer(name: str, base: int) -> None:
        n = 0
        while not stop.is_set() and n < 400:
            db.run(lambda c, i=base + n: c.execute(
                "INSERT INTO t VALUES (?, ?, ?)", (i, name, "y" * 500)))
            n += 1
        done[name] = n

    threads = [threading.Thread(target=writer, args=(f"w{k}", 10_000 * (k + 1)))
               for k in range(3)]
    for th in threads:
        th.start()
    fill_disk(db)
    for i in range(50):  # this thread's writes hit the cap and switch everyone to memory
        big_insert(db, 1 + i)
    stop.set()
    for th in threads:
        th.join(timeout=30)
    assert db.mode == "memory"
    assert db.try_disk(force=True)
    got = on_disk(tmp_path)
    ids = [i for i, _ in got]
    assert len(ids) == len(set(ids))  # nothing twice
    for k in range(3):  # nothing lost: every write each thread made is there
        assert sum(1 for _, w in got if w == f"w{k}") == done[f"w{k}"]
    assert sum(1 for _, w in got if w == "main") == 50


def test_garbage_in_place_of_the_database_is_moved_aside_and_a_fresh_one_starts(
        tmp_path: Path) -> None:
    d = tmp_path / "state"
    d.mkdir()
    (d / DB_NAME).write_bytes(os.urandom(50_000))
    db = make(tmp_path)
    assert db.mode == "disk"
    big_insert(db, 1)
    aside = list(d.glob(f"{DB_NAME}.corrupt-*"))
    assert len(aside) == 1 and aside[0].stat().st_size == 50_000  # kept for a person
    [(kind, text)] = db.take_events()
    assert kind == "corrupt" and str(aside[0]) in text


def _corrupt_pages(path: Path) -> None:
    """Keep the header page, overwrite every other page with noise."""
    c = sqlite3.connect(path)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(size - 4096))


def test_a_valid_header_over_garbage_pages_is_found_at_start(tmp_path: Path) -> None:
    db = make(tmp_path)
    for i in range(30):
        big_insert(db, i)
    db.close()
    _corrupt_pages(tmp_path / "state" / DB_NAME)
    db2 = make(tmp_path)
    assert db2.mode == "disk"
    assert [k for k, _ in db2.take_events()] == ["corrupt"]
    big_insert(db2, 99)
    assert 99 in [i for i, _ in on_disk(tmp_path)]


def test_corruption_while_running_is_salvaged_once_and_work_goes_on(tmp_path: Path) -> None:
    db = make(tmp_path)
    db.migrate("keep", ("CREATE TABLE k (v TEXT)", "INSERT INTO k VALUES ('kept')"))
    for i in range(30):
        big_insert(db, i)
    _corrupt_pages(tmp_path / "state" / DB_NAME)
    errors = 0
    for i in range(100, 110):  # units keep working; the first one finds the damage
        try:
            big_insert(db, i)
        except Exception:  # noqa: BLE001 - counted
            errors += 1
    assert errors == 0
    events = db.take_events()
    assert [k for k, _ in events] == ["corrupt"]  # once, not once per unit
    assert db.mode == "disk"  # a fresh file took its place
    assert len(list((tmp_path / "state").glob(f"{DB_NAME}.corrupt-*"))) == 1
    assert [i for i, _ in on_disk(tmp_path)][-10:] == list(range(100, 110))


def test_a_state_dir_that_cannot_exist_runs_from_memory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    db = Store(tmp_path / "file" / "state", clock=lambda: 0.0)
    db.migrate("test", STEPS)
    assert db.mode == "memory"
    big_insert(db, 1)
    assert [i for i, _ in rows(db)] == [1]
    assert [k for k, _ in db.take_events()] == ["memory"]


def test_a_silence_added_on_disk_while_in_memory_survives_the_write_back(
        tmp_path: Path) -> None:
    from watchdog.notify import store as st

    db = Store(tmp_path / "state", clock=lambda: 0.0)
    db.migrate("notify", st.STEPS)
    db.migrate("test", STEPS)
    fill_disk(db)
    big_insert(db, 1)
    assert db.mode == "memory"
    c = st.open_store(connect(tmp_path / "state"))  # `watchdog silence add`, disk has room
    st.add_silence(c, host=None, gpu="3", kind=None, starts_at=1.0, ends_at=9e9,
                   comment="maintenance", created_by="ops")
    c.close()
    assert db.try_disk(force=True)
    got = db.run(lambda c: st.silences(c, 2.0))
    assert [s["comment"] for s in got] == ["maintenance"]


@pytest.mark.parametrize(("error", "kind"), [
    (sqlite3.OperationalError("database or disk is full"), "unwritable"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "unwritable"),
    (sqlite3.DatabaseError("database disk image is malformed"), "corrupt"),
    (sqlite3.DatabaseError("file is not a database"), "corrupt"),
    (sqlite3.OperationalError("no such table: t"), None),
    (sqlite3.IntegrityError("UNIQUE constraint failed"), None),
    (ValueError("x"), None),
])
def test_only_storage_faults_move_the_database(error: BaseException, kind: str | None) -> None:
    assert storage_fault(error) == kind


def test_a_bug_in_a_unit_is_raised_not_hidden_in_memory(tmp_path: Path) -> None:
    db = make(tmp_path)
    with pytest.raises(sqlite3.OperationalError):
        db.run(lambda c: c.execute("SELECT * FROM no_such_table"))
    assert db.mode == "disk"
