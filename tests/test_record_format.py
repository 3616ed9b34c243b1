"""The own recording format (.wdrec) round-trips every field of Sample and the inventory."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from watchdog.errors import InputError
from watchdog.records import DeviceInfo, ProcessInfo, Sample, XidEvent
from watchdog.sources.replay import open_log
from watchdog.sources.replay.recording_writer import RecordingWriter

DEVICES = [
    DeviceInfo(index=0, uuid="GPU-aaaa", name="NVIDIA H100 80GB HBM3", pci_bus_id="0000:18:00.0",
               power_limit_enforced_w=700.0, memory_total_mib=81559.0, mig_mode=False,
               pcie_max_gen=5, pcie_max_width=16, gpm_supported=True),
    DeviceInfo(index=1, uuid="GPU-bbbb", name="NVIDIA H100 80GB HBM3"),
]


def _samples() -> list[Sample]:
    out = []
    for k in range(10):
        t = 1_750_000_000.0 + 0.5 * k
        out.append(Sample(
            ts=t, uuid="GPU-aaaa", index=0,
            values={"power.draw": 400.0 + k, "utilization.gpu": 100.0,
                    "clocks_event_reasons.active": float(0x14), "temperature.memory": None},
            processes=(ProcessInfo(pid=4242, name="python", used_memory_mib=70000.0,
                                   job_id="123", container=None),) if k % 2 == 0 else None,
            xids=(XidEvent(ts=t - 0.2, uuid="GPU-aaaa", index=0, code=79, source="nvml",
                           message="fell off the bus"),) if k == 7 else ()))
        out.append(Sample(
            ts=t, uuid="GPU-bbbb", index=1,
            values={} if k >= 8 else {"power.draw": 90.0, "utilization.gpu": 0.0},
            processes=(), lost=k >= 8,
            errors=("nvmlDeviceGetPowerUsage: timed out after 2.0 s",) if k == 5 else ()))
    return out


def _fields(s: Sample) -> tuple:
    vals = {k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else v)
            for k, v in s.values.items()}
    return (s.ts, s.uuid, s.index, vals, s.processes, s.xids, s.lost, s.errors)


def test_round_trip_every_sample_field(tmp_path: Path) -> None:
    path = tmp_path / "node.wdrec"
    samples = _samples()
    with RecordingWriter(path, host="node7", devices=DEVICES, source="sim",
                         chunk_rows=3) as w:
        w.write(samples)
    rec = open_log(path)
    assert rec.format == "recording"
    assert rec.host == "node7"
    assert rec.devices() == DEVICES
    got = [s for _, tick in rec.ticks() for s in tick]
    assert [_fields(s) for s in got] == [_fields(s) for s in samples]
    assert [x.code for x in rec.xids] == [79]
    assert rec.warnings == []


def test_frame_contract(tmp_path: Path) -> None:
    path = tmp_path / "node.wdrec"
    with RecordingWriter(path, host="n", devices=DEVICES) as w:
        w.write(_samples())
    f = open_log(path).frame
    assert list(f.columns[:4]) == ["ts", "uuid", "index", "lost"]
    assert str(f["ts"].dtype) == "float64" and str(f["index"].dtype) == "int64"
    assert f["lost"].dtype == bool
    assert f["ts"].is_monotonic_increasing
    # None is NaN in the frame, never 0
    assert f["temperature.memory"].isna().all()
    assert f.loc[f["lost"], "power.draw"].isna().all()


def test_interrupted_recording_loses_at_most_last_chunk(tmp_path: Path) -> None:
    path = tmp_path / "crash.wdrec"
    w = RecordingWriter(path, host="n", devices=DEVICES, chunk_rows=4)
    w.write(_samples())  # 20 samples -> 5 chunks written, nothing buffered
    size_full = path.stat().st_size
    w._f.close()  # simulate a crash: no end record
    rec = open_log(path)
    assert len(rec.frame) == 20
    assert any("not closed" in x for x in rec.warnings)
    # cut into the middle of the last chunk: that chunk is dropped, the rest loads
    path.write_bytes(path.read_bytes()[: size_full - 50])
    rec = open_log(path)
    assert len(rec.frame) == 16
    assert any("dropped" in x for x in rec.warnings)


def test_converted_log_round_trips_frame(tmp_path: Path) -> None:
    src = Path(__file__).parent / "fixtures" / "logs" / "smi_units_in_values.csv"
    rec = open_log(src)
    out = tmp_path / "conv.wdrec"
    with RecordingWriter(out, host=rec.host, devices=rec.devices()) as w:
        w.write_recording(rec)
    back = open_log(out)
    assert back.frame.equals(rec.frame)
    assert back.errors == rec.errors
    assert back.devices() == rec.devices()


def test_damaged_manifest_is_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.wdrec"
    path.write_bytes(b"WDREC\x00" + b"M" + (5).to_bytes(8, "little") + b"hello" + b"\0" * 4)
    with pytest.raises(InputError, match=r"bad\.wdrec"):
        open_log(path)
