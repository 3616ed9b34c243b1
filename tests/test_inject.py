"""The fault injector (watchdog.testing.inject, rawlog) on a small log of its own: a copy
reads back as the original, faults keep the log's format and land where labelled, and
columns are removed, derived and thinned as asked. (The real logs are in
tests/test_real_recall.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from watchdog.detect import load_rules
from watchdog.pipeline.replay import detect
from watchdog.sources.replay import open_log
from watchdog.testing import inject
from watchdog.testing.rawlog import RawLog

HEADER = ("timestamp, index, name, utilization.gpu [%], memory.used [MiB], "
          "memory.total [MiB], power.draw [W], power.limit [W], enforced.power.limit [W], "
          "temperature.gpu, clocks.current.sm [MHz], clocks_event_reasons.active")


def write_log(path: Path, seconds: int = 900, gpus: int = 2, idle_w: float = 74.0) -> Path:
    """Two H100s at 1 s: 60 s idle (``idle_w``), then training at 100 % (650 W +- noise)."""
    rng = np.random.default_rng(0)
    lines = [HEADER]
    for t in range(seconds):
        stamp = f"2026/11/22 10:{t // 60:02d}:{t % 60:02d}.{(t * 7) % 1000:03d}"
        for g in range(gpus):
            busy = t >= 60
            power = 650 + rng.normal(0, 8) if busy else idle_w + rng.normal(0, 0.5)
            util = 100 if busy else 0
            temp = 60 if busy else 30
            mask = "0x0000000000000004" if busy and t % 7 == 0 else "0x0000000000000000"
            lines.append(f"{stamp}, {g}, NVIDIA H100 80GB HBM3, {util} %, "
                         f"{7000 if busy else 0} MiB, 81559 MiB, {power:.2f} W, 700.00 W, "
                         f"700.00 W, {temp}, 1980 MHz, {mask}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return write_log(tmp_path / "smi.csv")


def test_an_untouched_copy_reads_back_as_the_original(log: Path, tmp_path: Path) -> None:
    raw = RawLog(log)
    copy = raw.write(tmp_path / "copy.csv")
    a, b = open_log(log, host="h").frame, open_log(copy, host="h").frame
    assert a.equals(b)
    assert raw.interval() == pytest.approx(1.0, abs=0.01)
    assert raw.idle_w(0) == pytest.approx(74.0, abs=1.0)


@pytest.mark.parametrize(("frac", "idle"), [(0.34, True), (0.36, False)])
def test_an_idle_level_above_a_third_of_the_limit_is_a_loaded_pause(
        tmp_path: Path, frac: float, idle: bool) -> None:
    from watchdog.testing.rawlog import IDLE_MAX_FRAC

    assert IDLE_MAX_FRAC == 0.35
    raw = RawLog(write_log(tmp_path / "smi.csv", seconds=200, idle_w=frac * 700.0))
    got = raw.idle_w(0)
    assert (got == pytest.approx(frac * 700.0, abs=1.0)) if idle else got is None
    # the hang then draws 1.5x the idle power the caller gives
    lab = inject.hang(raw, raw.busy_time(120.0), duration=60.0, idle_w=40.0, gpus=[0])
    hung = raw.values("power.draw")[(raw.gpu == 0) & (raw.ts >= lab.onset) & (raw.ts < lab.end)]
    level = 1.5 * (frac * 700.0 if idle else 40.0)
    assert np.median(hung) == pytest.approx(level, rel=0.05)


def test_a_hang_goes_in_at_its_time_in_the_log_s_own_format(log: Path, tmp_path: Path) -> None:
    raw = RawLog(log)
    onset = raw.busy_time(200.0)
    lab = inject.hang(raw, onset, duration=300.0)
    assert lab.kind == "comm_hang" and lab.gpus == (0, 1)
    assert lab.onset == onset and lab.end == onset + 300.0
    assert lab.inserted_s >= 300.0 and lab.moved(onset + 1) == onset + 1 + lab.inserted_s
    text = raw.write(tmp_path / "hang.csv").read_text()
    hung = [ln for ln in text.splitlines()[1:] if ", 100 %, " in ln and float(
        ln.split(",")[6].split()[0]) < 200]
    assert hung and all(ln.split(",")[6].endswith(" W") for ln in hung)  # units kept
    assert all(ln.split(",")[-1].strip().startswith("0x") for ln in hung)  # hex kept
    rec = open_log(tmp_path / "hang.csv")
    incs = detect(rec, load_rules())
    assert [i.kind for i in incs] == ["comm_hang"]
    assert incs[0].fired_at - lab.onset < 150 + 60


def test_the_rows_after_a_fault_move_on_by_its_duration(log: Path) -> None:
    raw = RawLog(log)
    last = raw.end
    lab = inject.stall(raw, raw.busy_time(200.0), duration=600.0)
    assert raw.end == pytest.approx(last + lab.inserted_s, abs=0.01)
    assert np.all(np.diff(raw.ts[raw.gpu == 0]) > 0)  # times still increase per GPU


def test_thermal_climbs_then_holds_while_power_falls(log: Path, tmp_path: Path) -> None:
    raw = RawLog(log)
    lab = inject.thermal(raw, raw.busy_time(200.0), slowdown_c=87.0)
    assert lab.kind == "thermal_throttle" and len(lab.gpus) == 1
    rows = (raw.gpu == lab.gpus[0]) & (raw.ts >= lab.onset + 30) & (raw.ts < lab.end)
    assert np.all(np.abs(raw.values("temperature.gpu")[rows] - 88.0) <= 1.0)
    assert np.nanmean(raw.values("power.draw")[rows]) < 0.75 * 650
    assert np.all(raw.values("clocks_event_reasons.active")[rows].astype(int) & 0x20)


def test_memory_leaks_to_the_limit_in_30_min_then_the_job_dies(log: Path) -> None:
    raw = RawLog(log)
    lab = inject.memory_pressure(raw, raw.start + 300.0)
    assert lab.end - lab.onset == 1800.0
    gpu0 = raw.gpu == 0
    leak = gpu0 & (raw.ts >= lab.onset) & (raw.ts < lab.end)
    used = raw.values("memory.used")[leak]
    assert np.all(np.diff(used) >= 0) and used[-1] >= 0.99 * 81559  # steady, to the limit
    minute = np.diff(used).sum() / ((raw.ts[leak][-1] - raw.ts[leak][0]) / 60.0)
    assert 0.9 * (81559 - used[0]) / 30 <= minute <= 1.1 * (81559 - used[0]) / 30
    dead = gpu0 & (raw.ts >= lab.end) & (raw.ts < lab.end + 300.0)
    assert np.all(raw.values("memory.used")[dead] <= 1.0)
    assert np.all(raw.values("utilization.gpu")[dead] == 0.0)


def test_drop_removes_a_group_and_whatever_stands_in_for_it(log: Path, tmp_path: Path
                                                             ) -> None:
    raw = RawLog(log)
    raw.drop("limit", "clocks", "reasons", "name")
    rec = open_log(raw.write(tmp_path / "bare.csv"))
    assert "enforced.power.limit" not in rec.metrics  # power.limit went too
    assert "clocks.sm" not in rec.metrics and "clocks_event_reasons.active" not in rec.metrics
    assert rec.devices()[0].name is None


def test_derived_columns_read_as_the_metrics_they_stand_for(log: Path, tmp_path: Path
                                                            ) -> None:
    raw = RawLog(log)
    raw.derive("free")
    raw.derive("tlimit", max_operating_c=87.0)
    raw.drop("total", "name")
    f = open_log(raw.write(tmp_path / "derived.csv")).frame
    assert "memory.total" not in f.columns
    assert (f["memory.free"] + f["memory.used"]).eq(81559).all()
    assert (f["temperature.gpu"] + f["temperature.gpu.tlimit"]).eq(87).all()


def test_thinning_keeps_one_sample_per_gpu_per_step(log: Path, tmp_path: Path) -> None:
    raw = RawLog(log)
    raw.thin(30.0)
    f = open_log(raw.write(tmp_path / "thin.csv")).frame
    steps = np.diff(f.loc[f["index"] == 1, "ts"].to_numpy())
    assert len(f) == 2 * 30 and np.allclose(steps, 30.0, atol=1.0)
