"""The CSV reader parses a large log through a memory map: the same frame as from bytes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from watchdog.sources.replay import smi_csv
from watchdog.sources.replay.blob import HEAD, Blob

HEADER = "timestamp, index, uuid, utilization.gpu [%], power.draw [W], pstate\n"


def big_log(path: Path, truncated: bool = False) -> Path:
    rows = []
    for t in range(3000):  # > HEAD bytes: the file is not in memory after the head
        for g in range(2):
            rows.append(f"2026/04/19 14:{t // 60 % 60:02d}:{t % 60:02d}.000, {g}, GPU-{g}, "
                        f"{(t * 7 + g) % 101}, {100 + t % 50}.25, P0\n")
    text = HEADER + "".join(rows) + ("2026/04/19 15:00:00.000, 0, GPU-0, 5" if truncated else "")
    path.write_text(text)
    assert path.stat().st_size > HEAD
    return path


def read(path: Path, preload: bool) -> smi_csv.Recording:
    blob = Blob(str(path))
    if preload:
        blob.all()
    return smi_csv.read(str(path), blob, mapping=None, host="h", tz=None)


def test_memory_map_and_bytes_give_the_same_recording(tmp_path: Path) -> None:
    for truncated in (False, True):
        p = big_log(tmp_path / f"log{truncated}.csv", truncated)
        mapped, loaded = read(p, False), read(p, True)
        pd.testing.assert_frame_equal(mapped.frame, loaded.frame)
        assert mapped.warnings == loaded.warnings
        assert len(mapped.frame) == 6000 and mapped.frame["utilization.gpu"].iloc[3] == 8.0
        assert any("truncated" in w for w in mapped.warnings) == truncated


def test_the_reader_maps_the_file_only_when_it_is_not_in_memory(tmp_path: Path) -> None:
    p = big_log(tmp_path / "log.csv")
    blob = Blob(str(p))
    with blob.reader(blob.size) as f:
        assert not hasattr(f, "getvalue")  # a memory map, not a copy of the bytes
        assert f.read(9) == b"timestamp"
    assert not blob.loaded
    with blob.reader(10) as f:  # a prefix (a dropped truncated line): from the bytes
        assert f.read() == b"timestamp,"
