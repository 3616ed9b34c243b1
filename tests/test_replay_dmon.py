"""The nvidia-smi dmon reader: header/unit lines, repeated headers, '-', with/without -o DT."""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from watchdog.sources.replay import open_log

LOGS = Path(__file__).parent / "fixtures" / "logs"


def test_dmon_with_date_time() -> None:
    rec = open_log(LOGS / "dmon_dt.log")
    f = rec.frame
    assert rec.format == "dmon"
    t0 = datetime(2026, 4, 19, 14, 28, 10, tzinfo=UTC).timestamp()
    assert f["ts"].tolist() == [t0, t0, t0 + 1, t0 + 1, t0 + 2]
    assert f["power.draw"].tolist() == [63.0, 61.0, 240.0, 238.0, 241.0]
    assert f["clocks.sm"].iloc[2] == 1410.0 and f["clocks.mem"].iloc[2] == 1593.0
    assert f["temperature.memory"].iloc[0] == 44.0
    assert math.isnan(f["utilization.memory"].iloc[4])  # '-' is missing, not 0
    assert f["uuid"].unique().tolist() == ["dmon_dt/gpu0", "dmon_dt/gpu1"]
    assert any("truncated last line" in w for w in rec.warnings)


def test_dmon_repeated_headers_and_synthesised_times(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    path.write_bytes((LOGS / "dmon_plain.log").read_bytes())
    os.utime(path, (1_800_000_000, 1_800_000_000))
    rec = open_log(path, dmon_interval=2.0)
    f = rec.frame
    assert len(f) == 6  # the repeated '# gpu' and '# Idx' lines are skipped
    assert f["ts"].tolist() == [1_799_999_996.0] * 2 + [1_799_999_998.0] * 2 + \
        [1_800_000_000.0] * 2
    assert math.isnan(f["utilization.gpu"].iloc[1])
    assert f["utilization.gpu"].iloc[2] == 100.0
    assert any("no times" in w for w in rec.warnings)


def test_dmon_row_with_wrong_field_count_is_named(tmp_path: Path) -> None:
    from watchdog.errors import InputError

    lines = (LOGS / "dmon_plain.log").read_text().splitlines()
    lines[3] = lines[3] + " 7"
    path = tmp_path / "bad.log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"bad\.log:4: 13 fields, expected 12"):
        open_log(path)


def test_dmon_csv_format() -> None:
    rec = open_log(LOGS / "dmon_csv.log")
    f = rec.frame
    assert rec.format == "dmon" and len(f) == 2
    assert f["power.draw"].tolist() == [70.0, 72.0]
    assert f["clocks.sm"].tolist() == [1980.0, 1980.0]
    assert math.isnan(f["utilization.gpu"].iloc[1])
