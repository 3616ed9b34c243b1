"""``watchdog record``: live sources on an injected clock, log conversion, summaries, errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from watchdog.cli import main
from watchdog.clock import ManualClock
from watchdog.commands.record import record_live
from watchdog.records import DeviceInfo, ProcessInfo, Sample, XidEvent
from watchdog.sources import SourceOptions
from watchdog.sources.replay import open_log

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _fields(s: Sample) -> tuple:
    vals = {k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else v)
            for k, v in s.values.items()}
    return (s.ts, s.uuid, s.index, vals, s.processes, s.xids, s.lost, s.errors)


def test_record_sim_round_trips_what_the_simulator_produced(tmp_path: Path, capsys) -> None:
    from watchdog.sources.sim import SimSource

    out = tmp_path / "sim.wdrec"
    rc = main(["record", "--source", "sim:xid", "--gpus", "2", "--duration", "10m",
               "--interval", "5s", "--output", str(out), "--chunk", "50"])
    assert rc == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("recorded 2 GPUs, 240 samples over 9m55s") and str(out) in line
    rec = open_log(out)
    ticks = list(rec.ticks())
    assert len(ticks) == 120
    # the same seeded node sampled at the same times gives exactly what was recorded
    fresh = SimSource.from_spec("sim:xid", gpus=2, seed=0, start=ticks[0][0])
    assert rec.devices() == fresh.devices()
    for t, samples in ticks:
        assert [_fields(s) for s in samples] == [_fields(s) for s in fresh.sample(t)]
    assert [x.code for x in rec.xids] == [13]  # the injected XID made it through


class _Stub:
    """A tiny LiveSource: GPU 1 is lost from t0+2, processes, an XID and a read error."""

    host = "stub"

    def __init__(self, clock: ManualClock, cost: float = 0.0) -> None:
        self.clock, self.cost, self.closed = clock, cost, False
        self.t0 = clock.now()

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(index=0, uuid="GPU-0"), DeviceInfo(index=1, uuid="GPU-1")]

    def sample(self, now: float) -> list[Sample]:
        self.clock.advance(self.cost)  # reading takes clock time
        k = round(now - self.t0)
        lost = k >= 2
        return [
            Sample(ts=now, uuid="GPU-0", index=0, values={"power.draw": 100.0 + k,
                                                          "temperature.gpu": None},
                   processes=(ProcessInfo(pid=7, name="train", used_memory_mib=1.0),),
                   xids=(XidEvent(ts=now, uuid="GPU-0", index=0, code=48),) if k == 1 else (),
                   errors=("nvmlDeviceGetTemperature: timed out",) if k == 1 else ()),
            Sample(ts=now, uuid="GPU-1", index=1, values={} if lost else {"power.draw": 50.0},
                   lost=lost),
        ]

    def close(self) -> None:
        self.closed = True


def test_record_live_stub_round_trip(tmp_path: Path) -> None:
    clock = ManualClock(1_750_000_000.0)
    stub = _Stub(clock)
    out = tmp_path / "stub.wdrec"
    stats = record_live("stub", SourceOptions(), str(out), duration=4, interval=1,
                        source=stub, clock=clock)
    assert stub.closed and stats["samples"] == 8 and stats["span_s"] == 3.0
    expect = [s for t in range(4) for s in _Stub(ManualClock(1_750_000_000.0)).sample(
        1_750_000_000.0 + t)]
    got = [s for _, tick in open_log(out).ticks() for s in tick]
    assert [_fields(s) for s in got] == [_fields(s) for s in expect]


def test_slow_reads_skip_missed_ticks_instead_of_bunching(tmp_path: Path) -> None:
    clock = ManualClock(1_750_000_000.0)
    stats = record_live("stub", SourceOptions(), str(tmp_path / "s.wdrec"), duration=10,
                        interval=1, source=_Stub(clock, cost=2.5), clock=clock)
    ts = open_log(tmp_path / "s.wdrec").frame["ts"].unique() - 1_750_000_000.0
    assert ts.tolist() == [0.0, 3.0, 6.0, 9.0]
    assert stats["samples"] == 8


def test_convert_log(tmp_path: Path, capsys) -> None:
    src = LOGS / "smi_units_in_values.csv"
    out = tmp_path / "conv.wdrec"
    assert main(["record", "--source", str(src), "--output", str(out)]) == 0
    assert "recorded 2 GPUs, 5 samples over 0m02s" in capsys.readouterr().out
    back, orig = open_log(out), open_log(src)
    assert back.frame.equals(orig.frame) and back.errors == orig.errors
    assert back.host == orig.host == "smi_units_in_values"


def test_convert_with_map_and_tz(tmp_path: Path, capsys) -> None:
    out = tmp_path / "c.wdrec"
    rc = main(["record", "--source", str(LOGS / "custom_logger.csv"), "--output", str(out),
               "--map", "timestamp=when,index=gpu_id,power.draw=board_watts"])
    err = capsys.readouterr().err
    assert rc == 0 and "warning:" in err and "absurd" in err
    assert open_log(out).frame["power.draw"].iloc[0] == 250.5


@pytest.mark.parametrize("argv, needle", [
    (["--duration", "ten minutes"], "--duration: 'ten minutes' is not a duration"),
    (["--interval", "0s"], "--interval 0s: must be positive"),
    (["--source", "missing.csv"], "missing.csv: no such file"),
])
def test_bad_options_are_one_line_exit_2(tmp_path: Path, capsys, argv: list[str],
                                         needle: str) -> None:
    base = ["record", "--source", "sim", "--output", str(tmp_path / "o.wdrec")]
    rc = main(base + argv)
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_output_in_missing_folder(tmp_path: Path, capsys) -> None:
    rc = main(["record", "--source", "sim", "--duration", "5s",
               "--output", str(tmp_path / "no" / "such" / "x.wdrec")])
    assert rc == 2 and "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT inherited ignored"])
def test_a_signal_ends_a_live_recording_cleanly(tmp_path: Path, how: str) -> None:
    """``timeout``/``kill``/systemd stop with SIGTERM, and a recorder in a script's background
    inherits SIGINT ignored: either way the samples so far are written (the last chunk
    included, here the only one), the summary printed, exit 0. Seen on a real H100: a
    background ``watchdog record`` ignored ``kill -INT`` and its chunk was never written."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "live.wdrec"
    sig = signal.SIGTERM if how == "SIGTERM" else signal.SIGINT
    ignore = None if how == "SIGTERM" else (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    proc = subprocess.Popen(
        [sys.executable, "-m", "watchdog", "record", "--source", "sim", "--gpus", "2",
         "--realtime", "--interval", "0.2s", "--duration", "10m", "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # a few ticks in, all of them still in the chunk held in memory
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    assert f"{sig.name}: closing the recording" in stderr
    assert "Traceback" not in stderr
    assert stdout.startswith("recorded 2 GPUs, ")
    ticks = list(open_log(out).ticks())
    assert len(ticks) >= 3
    assert all(len(samples) == 2 for _, samples in ticks)
