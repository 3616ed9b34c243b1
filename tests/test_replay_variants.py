"""Real nvidia-smi log variants (issue 8, item 3), each from a small log written here.

Each test names a variant seen in a real log that used to fail or mislead: a header
repeated by a logging loop, the table output, a header that does not match its rows,
``power.draw.instant`` / ``power.limit`` beside their own fields, UUIDs without an index,
a header-only log. Plus: one clock-event bit table, importable without pandas.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from watchdog import reasons
from watchdog.errors import InputError
from watchdog.sources.replay import open_log, smi_columns

HEADER = ("timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], "
          "memory.total [MiB], power.draw [W]")


def _row(t: int, gpu: int, util: int = 50, used: int = 1000, power: float = 300.0) -> str:
    return (f"2026/04/19 10:00:{t:02d}.{gpu * 7:03d}, {gpu}, GPU-{'ab'[gpu % 2]}{gpu}, "
            f"{util} %, {used} MiB, 81559 MiB, {power} W")


def _write(tmp_path: Path, text: str, name: str = "gpu.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_repeated_headers_are_skipped_and_counted(tmp_path: Path) -> None:
    lines = []
    for t in range(5):  # `while true; do nvidia-smi --query-gpu=… --format=csv; done`
        lines.append(HEADER)
        lines += [_row(t, 0), _row(t, 1)]
    rec = open_log(_write(tmp_path, "\n".join(lines) + "\n"))
    assert len(rec.frame) == 10
    assert sorted(set(rec.frame["index"])) == [0, 1]
    assert any("4 repeated header line(s) skipped" in w for w in rec.warnings)


def test_repeated_headers_crlf_and_back_to_back(tmp_path: Path) -> None:
    lines = [HEADER, HEADER, _row(0, 0), HEADER, HEADER, _row(1, 0), HEADER]
    rec = open_log(_write(tmp_path, "\r\n".join(lines) + "\r\n"))
    assert len(rec.frame) == 2
    assert any("4 repeated header line(s)" in w for w in rec.warnings)


def test_table_output_is_explained(tmp_path: Path) -> None:
    table = ("+-----------------------------------------------------------------------------+\n"
             "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
             "|-------------------------------+----------------------+----------------------+\n")
    p = _write(tmp_path, table)
    with pytest.raises(InputError) as e:
        open_log(p)
    msg = str(e.value)
    assert "table output" in msg and "--format=csv -l 1" in msg and "--map" not in msg
    assert msg.startswith(f"{p}:1:")


def test_header_not_matching_rows_read_by_column_number(tmp_path: Path) -> None:
    # the header misses a field every row has (a wrong --query-gpu edit)
    header = "timestamp, index, utilization.gpu [%], power.draw [W]"
    rows = [f"2026/04/19 10:00:0{t}.000, 0, 9, {40 + t} %, {200 + t} W" for t in range(3)]
    p = _write(tmp_path, header + "\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match="mismatched columns"):
        open_log(p)
    rec = open_log(p, mapping={"timestamp": "#1", "index": "#2",
                               "utilization.gpu": "#4", "power.draw": "#5"})
    assert list(rec.frame["power.draw"]) == [200.0, 201.0, 202.0]
    assert list(rec.frame["utilization.gpu"]) == [40.0, 41.0, 42.0]
    assert any("header line ignored" in w for w in rec.warnings)
    # the README's command line
    r = subprocess.run([sys.executable, "-m", "watchdog", "replay", str(p), "--map",
                        "timestamp=#1,index=#2,utilization.gpu=#4,power.draw=#5", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert '"samples": 3' in r.stdout


def test_instant_power_and_both_limits_are_no_repeat(tmp_path: Path) -> None:
    header = ("timestamp, index, power.draw.instant [W], power.draw [W], power.limit [W], "
              "enforced.power.limit [W]")
    rows = [f"2026/04/19 10:00:0{t}.000, 0, 500.5 W, 400.0 W, 700.00 W, 650.00 W"
            for t in range(3)]
    rec = open_log(_write(tmp_path, header + "\n" + "\n".join(rows) + "\n"))
    assert not any("repeats" in w for w in rec.warnings), rec.warnings
    assert set(rec.frame["power.draw"]) == {400.0}  # the averaged field, not the instant
    assert set(rec.frame["enforced.power.limit"]) == {650.0}  # enforced, not requested


def test_instant_power_alone_is_power(tmp_path: Path) -> None:
    header = "timestamp, index, power.draw.instant [W], power.limit [W]"
    rows = [f"2026/04/19 10:00:0{t}.000, 0, 500.5 W, 700.00 W" for t in range(2)]
    rec = open_log(_write(tmp_path, header + "\n" + "\n".join(rows) + "\n"))
    assert set(rec.frame["power.draw"]) == {500.5}
    assert set(rec.frame["enforced.power.limit"]) == {700.0}


def test_uuids_without_index_numbered_by_first_appearance(tmp_path: Path) -> None:
    header = "timestamp, uuid, power.draw [W]"
    order = ["GPU-ffff", "GPU-0000", "GPU-8888"]  # nvidia-smi's order, not sorted
    rows = [f"2026/04/19 10:00:0{t}.000, {u}, {100 + i} W" for t in range(2)
            for i, u in enumerate(order)]
    rec = open_log(_write(tmp_path, header + "\n" + "\n".join(rows) + "\n"))
    first = rec.frame[rec.frame["ts"] == rec.frame["ts"].min()]
    by_index = dict(zip(first["index"], first["uuid"], strict=True))
    assert by_index == {0: "GPU-ffff", 1: "GPU-0000", 2: "GPU-8888"}


@pytest.mark.parametrize("text", [HEADER + "\n", HEADER + "\n\n", "\n" + HEADER])
def test_header_only_log_is_an_error(tmp_path: Path, text: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(InputError, match="no samples"):
        open_log(p)


def test_header_only_log_exits_2(tmp_path: Path) -> None:
    p = _write(tmp_path, HEADER + "\n")
    r = subprocess.run([sys.executable, "-m", "watchdog", "replay", str(p)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no samples" in r.stderr and "Traceback" not in r.stderr


def test_one_clock_event_table() -> None:
    assert smi_columns.REASON_BITS is reasons.SMI_COLUMNS
    assert set(reasons.SMI_COLUMNS.values()) == set(reasons.REASONS)
    assert reasons.parse_mask("0x0000000000000048") == 0x48
    assert reasons.parse_mask(" 4 ") == 4
    with pytest.raises(ValueError):
        reasons.parse_mask("Active")


def test_individual_reason_columns_fold_through_the_table(tmp_path: Path) -> None:
    header = ("timestamp, index, power.draw [W], clocks_event_reasons.hw_thermal_slowdown, "
              "clocks_event_reasons.applications_clocks_setting")
    rows = ["2026/04/19 10:00:00.000, 0, 100 W, Active, Active",
            "2026/04/19 10:00:01.000, 0, 100 W, Not Active, Active"]
    rec = open_log(_write(tmp_path, header + "\n" + "\n".join(rows) + "\n"))
    mask = rec.frame["clocks_event_reasons.active"].to_numpy()
    assert np.array_equal(mask, [reasons.HW_THERMAL | reasons.APPLICATIONS_CLOCKS,
                                 reasons.APPLICATIONS_CLOCKS])


def test_reasons_imports_without_pandas() -> None:
    code = "import sys, watchdog.reasons; print('pandas' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def _throttled_log(tmp_path: Path, name: str, extra_header: str = "", extra: str = "") -> Path:
    header = ("timestamp, index, name, utilization.gpu [%], temperature.gpu, clocks.sm [MHz], "
              "power.draw [W], clocks_event_reasons.active" + extra_header)
    rows = [f"2026/04/19 10:{t // 60:02d}:{t % 60:02d}.000, 0, {name}, 100 %, 91, 300 MHz, "
            f"250 W, 0x0000000000000048{extra}" for t in range(60)]
    return _write(tmp_path, header + "\n" + "\n".join(rows) + "\n")


def _summaries(path: Path) -> list[str]:
    import json
    r = subprocess.run([sys.executable, "-m", "watchdog", "replay", str(path), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    return [i["summary"] for i in json.loads(r.stdout)["incidents"]]


def test_throttle_percentage_from_the_model_table(tmp_path: Path) -> None:
    # throttled from the first line to 300 MHz, no clocks.max.sm: 300/1980 = 15 %, not 100 %
    text = " ".join(_summaries(_throttled_log(tmp_path, "NVIDIA H100 80GB HBM3")))
    assert "thermal slowdown" in text
    assert "SM clock at 15% of max" in text, text


def test_summary_optional_segments() -> None:
    from watchdog.detect.grouping import render
    t = "holds[ {mem_pct:.0f}% of] their memory, {power:.0f} W, {x:.0f}%"
    nan = float("nan")
    assert render(t, {"mem_pct": 93.4, "power": 1.0, "x": 2.0}) == \
        "holds 93% of their memory, 1 W, 2%"
    assert render(t, {"mem_pct": nan, "power": 1.0, "x": nan}) == \
        "holds their memory, 1 W, ?%"


def test_memory_used_above_total_is_not_used(tmp_path: Path) -> None:
    rows = [_row(t, 0, used=1000) for t in range(3)] + [_row(3, 0, used=90_000)]
    rec = open_log(_write(tmp_path, HEADER + "\n" + "\n".join(rows) + "\n"))
    used = rec.frame["memory.used"].to_numpy()
    assert list(used[:3]) == [1000.0] * 3 and np.isnan(used[3])
    hits = [w for w in rec.warnings if "memory.used above memory.total" in w]
    assert len(hits) == 1 and ":5:" in hits[0], rec.warnings


def test_recording_without_samples_is_an_error(tmp_path: Path) -> None:
    from watchdog.records import DeviceInfo
    from watchdog.sources.replay.recording_writer import RecordingWriter

    out = tmp_path / "empty.wdrec"
    with RecordingWriter(out, host="n1", devices=[DeviceInfo(index=0, uuid="GPU-0")],
                         source="test"):
        pass
    r = subprocess.run([sys.executable, "-m", "watchdog", "replay", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no samples" in r.stderr


def test_rows_of_one_query_are_one_tick(tmp_path: Path) -> None:
    # nvidia-smi stamps each GPU as it reads it: 1-22 ms apart within one query
    rows = [f"2026/04/19 10:00:{t:02d}.{1 + 3 * g + t % 3:03d}, {g}, GPU-{g}, 50 %, 10 MiB, "
            f"81559 MiB, 300 W" for t in range(4) for g in range(8)]
    rec = open_log(_write(tmp_path, HEADER + "\n" + "\n".join(rows) + "\n"))
    ticks = rec.frame.groupby("ts")["index"].apply(list)
    assert len(ticks) == 4 and all(v == list(range(8)) for v in ticks)
    assert abs(float(rec.frame["ts"].iloc[8]) - float(rec.frame["ts"].iloc[0]) - 1.0) < 0.01


def test_snap_keeps_separate_ticks_apart() -> None:
    from watchdog.sources.replay.frame import snap_ticks
    ts = np.array([0.0, 0.005, 0.010, 1.0, 1.004, 1.1, 1.12])
    idx = np.array([0, 1, 2, 0, 1, 1, 2])  # a repeated GPU index starts a new tick
    assert list(snap_ticks(ts, idx)) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.1, 1.1]


def test_a_log_without_a_gpu_column_numbers_the_rows_of_each_query(tmp_path: Path) -> None:
    """No index or UUID column (a real 2-GPU TITAN X log at 0.1 s): each query's rows are
    stamped 2-3 ms apart and the queries 100 ms apart, so every query is one tick of two
    GPUs; a query whose second row is missing has GPU 0 only (GPU 1 is not renumbered)."""
    rows = ["timestamp, power.draw [W], utilization.gpu [%]"]
    for k in range(20):
        t = 6.256 + 0.1 * k
        rows.append(f"2025/12/05 02:37:{t:06.3f}, 17.6, 0 %")
        if k != 7:
            rows.append(f"2025/12/05 02:37:{t + 0.003 + 0.001 * (k % 2):06.3f}, 16.2, 0 %")
    rec = open_log(_write(tmp_path, "\n".join(rows) + "\n"))
    f = rec.frame
    assert f.groupby("index").size().to_dict() == {0: 20, 1: 19}
    assert (f.loc[f["index"] == 1, "power.draw"] == 16.2).all()
    assert (f.loc[f["index"] == 0, "power.draw"] == 17.6).all()


def test_order_in_tick_splits_queries_just_over_50_ms_apart() -> None:
    ts = np.array([0.0, 0.05, 0.10, 0.1501, 0.1502, 0.30, 0.31, 0.32])
    assert smi_columns._order_in_tick(ts).tolist() == [0, 1, 2, 0, 1, 0, 1, 2]


def test_a_one_gpu_log_whose_rows_jitter_closer_than_50_ms_stays_one_gpu() -> None:
    ts = 0.11 * np.arange(40)
    ts[20] = ts[19] + 0.03  # one reading late, the next on time
    assert set(smi_columns._order_in_tick(ts).tolist()) == {0}
