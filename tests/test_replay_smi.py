"""The nvidia-smi --query-gpu CSV reader, on hand-made fixtures of each real variant."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from watchdog.errors import InputError
from watchdog.reasons import HW_SLOWDOWN, HW_THERMAL, SW_POWER_CAP, SYNC_BOOST
from watchdog.sources.base import RecordedSource
from watchdog.sources.replay import open_log

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _epoch(s: str) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()


def test_units_in_values_markers_errors_and_lost() -> None:
    rec = open_log(LOGS / "smi_units_in_values.csv")
    assert isinstance(rec, RecordedSource)
    f = rec.frame
    assert list(f["uuid"]) == ["GPU-0a1b", "GPU-2c3d", "GPU-0a1b", "GPU-2c3d", "GPU-0a1b"]
    assert f["memory.used"].tolist()[:2] == [1.0, 38000.0]  # "38000 MiB"
    assert f["power.draw"].iloc[1] == 250.0  # "250.00 W"
    assert f["utilization.gpu"].iloc[1] == 100.0  # "100 %"
    # [N/A], [Not Supported] and [Unknown Error] are missing, never 0
    assert math.isnan(f["utilization.gpu"].iloc[2])
    assert math.isnan(f["utilization.gpu"].iloc[4])
    assert math.isnan(f["power.draw"].iloc[2])
    assert f["pstate"].tolist()[0] == 0.0 and f["pstate"].iloc[4] == 2.0  # P0, P2
    # clocks_throttle_reasons.active is folded onto the catalogue's clocks_event_reasons
    assert f["clocks_event_reasons.active"].iloc[1] == SW_POWER_CAP
    assert f["lost"].tolist() == [False, False, False, True, False]
    assert f.loc[3, "power.draw":].isna().all()
    t1 = _epoch("2026-02-25T10:04:38.420")
    assert rec.errors == {(t1, "GPU-0a1b"): ("power.draw: Unknown Error",)}
    assert [d.name for d in rec.devices()] == ["NVIDIA A100-PCIE-40GB"] * 2
    assert rec.devices()[0].memory_total_mib == 40960.0


def test_ticks_give_samples_with_none_for_missing() -> None:
    rec = open_log(LOGS / "smi_units_in_values.csv")
    ticks = list(rec.ticks())
    assert [len(s) for _, s in ticks] == [2, 2, 1]
    t, samples = ticks[1]
    assert t == _epoch("2026-02-25T10:04:38.420")
    a, b = samples
    assert a.values["power.draw"] is None and a.values["utilization.gpu"] is None
    assert a.values["memory.used"] == 1.0
    assert a.errors == ("power.draw: Unknown Error",)
    assert b.lost and b.get("power.draw") is None


def test_frame_dtypes_and_order() -> None:
    f = open_log(LOGS / "smi_unsorted_truncated.csv").frame
    assert list(f.columns[:4]) == ["ts", "uuid", "index", "lost"]
    assert f["ts"].dtype == np.float64 and f["index"].dtype == np.int64
    assert f["lost"].dtype == bool and f["power.draw"].dtype == np.float64
    assert f["ts"].is_monotonic_increasing
    assert f["index"].tolist() == [0, 1, 0, 1]
    assert f["power.draw"].tolist() == [412.3, 688.1, 410.0, 690.0]


def test_truncated_last_line_dropped_with_warning() -> None:
    rec = open_log(LOGS / "smi_unsorted_truncated.csv")
    assert len(rec.frame) == 4
    assert len(rec.warnings) == 1 and "truncated last line" in rec.warnings[0]
    assert ":6:" in rec.warnings[0]


def test_individual_reason_columns_fold_into_bitmask() -> None:
    rec = open_log(LOGS / "smi_reason_columns.csv", host="node3")
    mask = rec.frame["clocks_event_reasons.active"].tolist()
    assert mask[0] == SW_POWER_CAP | SYNC_BOOST
    assert mask[1] == HW_SLOWDOWN | HW_THERMAL
    assert math.isnan(mask[3])  # all [N/A]: unknown, not "no reason"
    # no uuid column: stand-in identity from host and index
    assert rec.frame["uuid"].unique().tolist() == ["node3/gpu0", "node3/gpu1"]
    devs = rec.devices()
    assert devs[1].pci_bus_id == "00000000:2A:00.0"
    assert devs[0].clocks_max_sm_mhz == 1980.0
    assert rec.frame["enforced.power.limit"].iloc[0] == 700.0


def test_naive_times_are_utc_by_default_and_tz_shifts_them() -> None:
    path = LOGS / "smi_reason_columns.csv"
    utc = open_log(path).frame["ts"].iloc[0]
    assert utc == pytest.approx(_epoch("2026-04-19T14:28:10.123"), abs=1e-6)
    berlin = open_log(path, tz="Europe/Berlin").frame["ts"].iloc[0]
    assert utc - berlin == pytest.approx(2 * 3600)  # CEST is UTC+2
    with pytest.raises(InputError, match="unknown time zone"):
        open_log(path, tz="Mars/Olympus")


def test_iso_z_subsecond_times() -> None:
    f = open_log(LOGS / "smi_unsorted_truncated.csv").frame
    assert f["ts"].iloc[2] - f["ts"].iloc[0] == pytest.approx(0.3)
    assert f["ts"].iloc[0] == pytest.approx(_epoch("2026-04-19T14:28:10.100"))


def test_headerless_needs_numbered_mapping() -> None:
    path = LOGS / "smi_noheader.csv"
    with pytest.raises(InputError, match=r"smi_noheader\.csv:1: no header line"):
        open_log(path)
    rec = open_log(path, mapping={"timestamp": "1", "index": "2", "utilization.gpu": "3",
                                  "power.draw": "4"})
    assert rec.frame["power.draw"].tolist() == [412.3, 688.1, 410.0, 690.0]
    assert rec.frame["index"].tolist() == [0, 1, 0, 1]


def test_gpus_without_index_column_are_told_apart_by_order(tmp_path: Path) -> None:
    text = (LOGS / "smi_units_in_values.csv").read_text().splitlines()
    # drop the index and uuid columns: GPUs of one time step are numbered in file order
    rows = [",".join(x.split(",")[:1] + x.split(",")[3:]) for x in text[:3]]
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    rec = open_log(path)
    assert rec.frame["index"].tolist() == [0, 1]
    assert rec.frame["power.draw"].tolist() == [35.12, 250.0]
