"""A large log read in parts on a worker thread gives what the whole-file read gives.

The size thresholds are lowered so that a log of a few thousand rows is cut into many
parts. Every check compares with the whole-file reader (``smi_csv.read`` + ``detect``): the
frame, the inventory, row errors, merged warnings, incidents, the JSON document, and
for logs the parts cannot serve (out of order, a GPU appearing late, a short row, another
timestamp layout) that the command falls back and still gives the same answer or error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog import cli
from watchdog.detect import load_rules
from watchdog.pipeline.replay import detect, detect_parts
from watchdog.sources.replay import open_log, open_parts, smi_csv
from watchdog.sources.replay import parts as parts_mod
from watchdog.sources.replay.blob import Blob
from watchdog.sources.replay.parts import NotInParts, merge_warnings

HEADER = ("timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], "
          "memory.total [MiB], power.draw [W], power.limit [W], temperature.gpu, "
          "clocks.sm [MHz], pstate, clocks_throttle_reasons.active")


def stamp(k: int, iso: bool) -> str:
    t = pd.Timestamp("2025-11-21T08:00:00") + pd.Timedelta(seconds=k)
    return t.isoformat() if iso else t.strftime("%Y/%m/%d %H:%M:%S.000")


def write_log(path: Path, *, ticks: int = 900, gpus: int = 4, iso: bool = False,
              seed: int = 0) -> Path:
    """Busy at two power levels, a checkpoint pause, then a hang; a few absurd powers, an
    [Unknown Error] and a lost GPU reading scattered through the file."""
    rng = np.random.default_rng(seed)
    lines = [HEADER]
    for k in range(ticks):
        phase = 3 if k >= ticks - 300 else (2 if k % 400 >= 360 else k // 200 % 2)
        for g in range(gpus):
            util = (100, 100, 0, 100)[phase] - int(rng.integers(0, 2))
            power = f"{(650, 380, 120, 100)[phase] + rng.normal(0, 3):.2f}"
            if rng.random() < 0.004:
                power = "-5.00"  # absurd: missing plus a warning
            if rng.random() < 0.002:
                power = "[Unknown Error]"
            temp = "[GPU is lost]" if (k == 500 and g == 1) else str(40 + g)
            lines.append(f"{stamp(k, iso)}, {g}, GPU-{g:08x}, {util}, 70000, 81559, "
                         f"{power}, 700.00, {temp}, 1980, P0, 0x{4 if phase < 2 else 0:016x}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parts_mod, "MIN_BYTES", 1)
    monkeypatch.setattr(parts_mod, "FIRST_BYTES", 4096)
    monkeypatch.setattr(parts_mod, "PART_BYTES", 16384)


def serial(log: Path, tz: str | None = None):  # type: ignore[no-untyped-def]
    """The whole-file reader, whatever the size (``open_log`` reads a large log in parts)."""
    return smi_csv.read(str(log), Blob(str(log)), mapping=None, host=log.stem, tz=tz)


def incidents(incs: list) -> list[dict]:  # type: ignore[type-arg]
    return [i.to_json() for i in incs]


@pytest.mark.parametrize("iso", [False, True], ids=["fixed-width-times", "iso-times"])
def test_parts_give_the_whole_file_answer(tmp_path: Path, small_parts: None,
                                          iso: bool) -> None:
    log = write_log(tmp_path / "n1.csv", iso=iso)
    rules = load_rules(None)
    whole = serial(log)
    with open_parts(log) as parts:
        assert parts is not None and parts.aligned is not iso
        got = detect_parts(parts, rules)
        assert len(parts.read) > 10  # really cut into many parts
        rec = parts.whole()
    pd.testing.assert_frame_equal(rec.frame, whole.frame)
    assert rec.devices() == whole.devices()
    assert rec.errors == whole.errors and rec.errors  # the [Unknown Error] rows
    assert rec.warnings == whole.warnings
    assert any("absurd value" in w for w in rec.warnings)
    assert incidents(got) == incidents(detect(whole, rules))
    assert sorted(i.kind for i in got) == ["comm_hang", "gpu_lost"]
    assert sum("absurd value" in w for w in rec.warnings) == 2  # util and power


def test_replay_command_output_is_the_same_in_parts(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    log = str(write_log(tmp_path / "n2.csv"))
    outs = []
    for min_bytes in (1 << 40, 1):  # whole file, then parts
        monkeypatch.setattr(parts_mod, "MIN_BYTES", min_bytes)
        monkeypatch.setattr(parts_mod, "FIRST_BYTES", 4096)
        monkeypatch.setattr(parts_mod, "PART_BYTES", 16384)
        assert cli.main(["replay", log, "--json"]) == 0
        out, err = capsys.readouterr()
        outs.append((json.loads(out), err))
    assert outs[0] == outs[1]
    assert "absurd value" in outs[0][1]  # the warning, once
    assert outs[0][1].count("absurd value") == 2  # util and power, once each


def shuffle_two_ticks(log: Path) -> None:
    lines = log.read_text().splitlines()
    k = len(lines) // 2
    lines[k], lines[k + 8] = lines[k + 8], lines[k]  # rows out of time order
    log.write_text("\n".join(lines) + "\n")


def late_gpu(log: Path) -> None:
    lines = log.read_text().splitlines()
    lines.append(lines[-1].replace(", 3, GPU-00000003,", ", 9, GPU-00000009,"))
    log.write_text("\n".join(lines) + "\n")


def other_layout(log: Path) -> None:
    lines = log.read_text().splitlines()
    k = len(lines) * 3 // 4
    lines[k] = lines[k].replace("2025/11/21 ", "2025-11-21T", 1)
    log.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("spoil", [shuffle_two_ticks, late_gpu, other_layout])
def test_logs_the_parts_cannot_serve_fall_back_to_the_whole_file(
        tmp_path: Path, small_parts: None, spoil, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
        ) -> None:
    log = write_log(tmp_path / "n3.csv")
    spoil(log)
    with open_parts(log) as parts, pytest.raises(NotInParts):
        detect_parts(parts, load_rules(None))
    assert cli.main(["replay", str(log), "--json"]) == 0  # read whole instead
    doc = json.loads(capsys.readouterr().out)
    want = detect(serial(log), load_rules(None))
    assert doc["incidents"] == incidents(want)


def test_a_short_row_deep_in_a_large_log_is_named_like_the_whole_file_read(
        tmp_path: Path, small_parts: None, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path / "n4.csv")
    lines = log.read_text().splitlines()
    lines[2500] = ", ".join(lines[2500].split(", ")[:5])
    log.write_text("\n".join(lines) + "\n")
    assert cli.main(["replay", str(log), "--json"]) == 2
    err = capsys.readouterr().err
    assert "n4.csv:2501: 5 fields, expected 12" in err and "Traceback" not in err


def test_merged_warnings_count_absurd_values_across_parts() -> None:
    head = ["f.csv:9: truncated last line dropped"]
    lines = ["f.csv:5: column 'power.draw': 2 absurd value(s) such as -5 W treated as missing",
             "f.csv:1: ignored unknown column(s): foo",
             "f.csv:70: column 'power.draw': 3 absurd value(s) such as 1e+09 W treated as "
             "missing",
             "f.csv:1: ignored unknown column(s): foo"]
    lines.insert(0, "f.csv:80: column 'temperature.gpu': 1 absurd value(s) such as 999 C "
                    "treated as missing")
    assert merge_warnings(head, lines, ["ts", "power.draw", "temperature.gpu"]) == [
        "f.csv:9: truncated last line dropped",
        "f.csv:1: ignored unknown column(s): foo",
        "f.csv:5: column 'power.draw': 5 absurd value(s) such as -5 W treated as missing",
        "f.csv:80: column 'temperature.gpu': 1 absurd value(s) such as 999 C treated as "
        "missing"]


def test_small_logs_and_other_formats_are_read_whole(tmp_path: Path) -> None:
    log = write_log(tmp_path / "n5.csv", ticks=20)
    assert open_parts(log) is None  # under MIN_BYTES


def test_parts_read_naive_times_in_the_given_zone(tmp_path: Path, small_parts: None) -> None:
    log = write_log(tmp_path / "n6.csv")
    rules = load_rules(None)
    whole = serial(log, tz="America/New_York")
    with open_parts(log, tz="America/New_York") as parts:
        assert parts is not None and not parts.aligned  # zone: the general time parser
        got = detect_parts(parts, rules)
        rec = parts.whole()
    pd.testing.assert_frame_equal(rec.frame, whole.frame)
    assert rec.frame["ts"].iloc[0] == serial(log).frame["ts"].iloc[0] + 5 * 3600
    assert incidents(got) == incidents(detect(whole, rules))


@pytest.mark.parametrize("spoil", [None, shuffle_two_ticks])
def test_open_log_of_a_large_log_joins_its_parts(tmp_path: Path, small_parts: None,
                                                 spoil) -> None:  # type: ignore[no-untyped-def]
    """open_log reads a large log in parts (or whole, when the parts cannot serve it)."""
    log = write_log(tmp_path / "n7.csv")
    if spoil is not None:
        spoil(log)
    got, want = open_log(log), serial(log)
    pd.testing.assert_frame_equal(got.frame, want.frame)
    assert (got.devices(), got.errors, got.warnings) == (want.devices(), want.errors,
                                                         want.warnings)



@st.composite
def logs(draw):  # type: ignore[no-untyped-def]
    """A random nvidia-smi log: GPUs, ticks, per-GPU millisecond jitter, missing rows,
    [N/A] and error fields, a lost GPU, CRLF endings, now and then rows out of order."""
    gpus = draw(st.integers(1, 4))
    ticks = draw(st.integers(20, 160))
    jitter = draw(st.booleans())
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    lines = [HEADER]
    for k in range(ticks):
        # nvidia-smi stamps each GPU's row when it reads it: later GPUs, later times
        offsets = np.sort(rng.integers(0, 900, gpus)) if jitter else np.zeros(gpus, int)
        for g in range(gpus):
            if rng.random() < 0.03:
                continue  # a missing row
            t = pd.Timestamp("2025-11-21T08:00:00") + pd.Timedelta(
                milliseconds=1000 * k + int(offsets[g]))
            power = f"{rng.normal(400, 150):.2f}"
            if rng.random() < 0.02:
                power = rng.choice(["[N/A]", "[Unknown Error]", "-3.00"])
            temp = "[GPU is lost]" if rng.random() < 0.005 else str(int(rng.integers(30, 90)))
            lines.append(f"{t.strftime('%Y/%m/%d %H:%M:%S.%f')[:23]}, {g}, GPU-{g:08x}, "
                         f"{int(rng.integers(0, 101))}, 70000, 81559, {power}, 700.00, "
                         f"{temp}, {int(rng.integers(900, 1981))}, P0, "
                         f"0x{int(rng.choice([0, 4, 0x14, 0x40, 0x48])):016x}")
    if draw(st.booleans()) and len(lines) > 20:
        i = int(rng.integers(2, len(lines) - 10))
        lines[i], lines[i + 7] = lines[i + 7], lines[i]
    end = "\r\n" if draw(st.booleans()) else "\n"
    return end.join(lines) + end


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(logs())
def test_random_logs_read_in_parts_equal_the_whole_file_read(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(parts_mod, "MIN_BYTES", 1)
        mp.setattr(parts_mod, "FIRST_BYTES", 1024)
        mp.setattr(parts_mod, "PART_BYTES", 2048)
        log = Path(tmp) / "r.csv"
        log.write_bytes(text.encode())
        want = serial(log)
        got = open_log(log)  # in parts, or whole when the parts cannot serve it
        pd.testing.assert_frame_equal(got.frame, want.frame)
        assert (got.devices(), got.errors, got.warnings) == (want.devices(), want.errors,
                                                             want.warnings)
        rules = load_rules(None)
        with open_parts(log) as parts:
            assert parts is not None
            try:
                incs = detect_parts(parts, rules)
            except NotInParts:
                return  # the command reads it whole: that is the path compared above
        assert incidents(incs) == incidents(detect(want, rules))
