"""Copying the agent's state between databases when the file on disk fails: the whole
database when it is sound (SQLite's backup API), table by table when it is damaged (what
can still be read survives, a damaged table starts empty), and the silences an operator
added on disk while the agent ran from memory, merged back before the memory copy is
written over the file (:mod:`watchdog.store.store`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def copy_to_memory(src: sqlite3.Connection | None) -> tuple[sqlite3.Connection, bool]:
    """A new in-memory database holding what ``src`` holds: the whole file (backup API)
    when it is sound, else the tables that can still be read. ``(memory, copied any)``."""
    mem = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    if src is None:
        return mem, False
    try:
        src.backup(mem)
        if mem.execute("PRAGMA quick_check").fetchone()[0] == "ok":
            return mem, True
    except sqlite3.Error:
        pass
    mem.close()  # a damaged copy would fail every unit: salvage table by table instead
    mem = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    return mem, copy_tables(src, mem) > 0


def salvage_from(path: Path) -> sqlite3.Connection | None:
    """An in-memory copy of what can still be read from a damaged database file."""
    try:
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    mem = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    try:
        n = copy_tables(src, mem)
    finally:
        src.close()
    if n == 0:
        mem.close()
        return None
    return mem


def copy_tables(src: sqlite3.Connection, dst: sqlite3.Connection) -> int:
    """Copy the schema, then each table whose rows can be read; returns rows copied. A
    damaged table starts empty, the rest survive."""
    try:
        schema = src.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                             "AND name NOT LIKE 'sqlite_%' ORDER BY type = 'index'").fetchall()
    except sqlite3.Error:
        return 0
    for _type, _name, sql in schema:
        try:
            dst.execute(sql.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)
                        .replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1))
        except sqlite3.Error:
            continue
    copied = 0
    for type_, name, _sql in schema:
        if type_ != "table":
            continue
        try:
            rows = src.execute(f'SELECT * FROM "{name}"').fetchall()
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                dst.executemany(f'INSERT OR REPLACE INTO "{name}" VALUES ({marks})', rows)
            copied += len(rows)
        except sqlite3.Error:
            continue
    return copied


def merge_silences(disk: sqlite3.Connection, mem: sqlite3.Connection) -> None:
    """Silences added or expired on disk by ``watchdog silence`` while the agent ran in
    memory (the disk had room for them, not yet for the agent): keep them, or writing the
    memory copy back would drop them."""
    cols = "host, gpu, kind, starts_at, ends_at, comment, created_by"
    try:
        rows = disk.execute(f"SELECT {cols}, expired_at FROM notify_silences").fetchall()
        have = {r[:-1]: r[-1] for r in mem.execute(
            f"SELECT {cols}, expired_at FROM notify_silences")}
    except sqlite3.Error:
        return
    for r in rows:
        key, expired = r[:-1], r[-1]
        if key not in have:
            mem.execute(f"INSERT INTO notify_silences ({cols}, expired_at) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, ?)", r)
        elif expired is not None and have[key] is None:
            mem.execute("UPDATE notify_silences SET expired_at = ? WHERE host IS ? AND gpu IS ? "
                        "AND kind IS ? AND starts_at = ? AND ends_at = ? AND comment = ? AND "
                        "created_by = ?", (expired, *key))
