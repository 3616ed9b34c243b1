"""``watchdog check`` end to end through ``watchdog.cli.main``: exit codes 0/1/2/3 and what
reaches stdout and stderr, with recorded ``nvidia-smi`` logs as the source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from watchdog.cli import main

HEADER = ("timestamp, index, uuid, name, utilization.gpu [%], utilization.memory [%], "
          "memory.used [MiB], memory.total [MiB], power.draw [W], enforced.power.limit [W], "
          "temperature.gpu, clocks.current.sm [MHz], clocks_event_reasons.active, "
          "pcie.link.gen.gpucurrent, pcie.link.width.current")


def lost(i: int) -> str:
    return f"GPU-{i:04d}, NVIDIA H100 80GB HBM3, " + ", ".join(["[GPU is lost]"] * 11)


def busy(i: int, *, power: str = "690.12 W", mask: str = "0x0000000000000014",
         mem: str = "70000 MiB", util: str = "100 %", mem_util: str = "40 %",
         clock: str = "1755 MHz", width: str = "16") -> str:
    return (f"GPU-{i:04d}, NVIDIA H100 80GB HBM3, {util}, {mem_util}, {mem}, 81559 MiB, "
            f"{power}, 700.00 W, 60, {clock}, {mask}, 5, {width}")


def write_log(tmp_path: Path, rows: dict[int, list[str]], seconds: int = 4) -> str:
    """A log with ``seconds`` ticks, 1 s apart; ``rows[i]`` gives GPU i's rest-of-row per tick
    (the last entry repeats; ``None`` leaves the GPU out of that tick)."""
    lines = [HEADER]
    for t in range(seconds):
        for i, seq in rows.items():
            rest = seq[min(t, len(seq) - 1)]
            if rest is not None:
                lines.append(f"2026/11/21 10:00:{t:02d}.000, {i}, {rest}")
    p = tmp_path / "node.csv"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["check", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_healthy_log_is_ok(tmp_path, capsys):
    log = write_log(tmp_path, {0: [busy(0)], 1: [busy(1)]})
    rc, out, err = run(capsys, "--source", log, "--expect-gpus", "2")
    assert rc == 0 and err == ""
    assert out.startswith("WATCHDOG OK - 2 GPUs healthy")
    assert "pwrcap,sync" in out


def test_lost_gpu_is_critical(tmp_path, capsys):
    log = write_log(tmp_path, {0: [busy(0)], 1: [busy(1), busy(1), lost(1)]})
    rc, out, _ = run(capsys, "--source", log, "--json")
    doc = json.loads(out)
    assert rc == 2 == doc["exit_code"] and doc["status"] == "CRITICAL"
    assert [(p["gpu"], p["check"]) for p in doc["problems"]] == [(1, "gpu_lost")]


def test_only_the_last_moments_of_a_log_are_judged(tmp_path, capsys):
    """A GPU lost early in the log and back by its end does not fail the check now."""
    log = write_log(tmp_path, {0: [lost(0), busy(0)]}, seconds=6)
    rc, _, _ = run(capsys, "--source", log, "--duration", "2s")
    assert rc == 0
    rc, _, _ = run(capsys, "--source", log, "--duration", "10s")
    assert rc == 2


def test_gpu_that_vanished_before_the_end_of_the_log_is_critical(tmp_path, capsys):
    log = write_log(tmp_path, {0: [busy(0)], 1: [busy(1), busy(1), None]}, seconds=6)
    rc, out, _ = run(capsys, "--source", log, "--json")
    doc = json.loads(out)
    assert rc == 2 and doc["problems"][0]["check"] == "gpu_lost"
    assert "vanished" in doc["problems"][0]["message"]


def test_fewer_gpus_than_expected_is_critical(tmp_path, capsys):
    log = write_log(tmp_path, {0: [busy(0)], 1: [busy(1)]})
    rc, out, _ = run(capsys, "--source", log, "--expect-gpus", "8")
    assert rc == 2 and out.startswith("WATCHDOG CRITICAL - node: found 2 GPUs, expected 8")


@pytest.mark.parametrize(("rest", "check"), [
    (busy(0, mask="0x0000000000000020"), "thermal_throttle"),
    (busy(0, mask="0x0000000000000048"), "thermal_throttle"),
    (busy(0, power="98.00 W", mask="0x0000000000000000", mem_util="0 %", clock="1980 MHz"),
     "comm_hang"),
])
def test_warnings_exit_1(tmp_path, capsys, rest, check):
    log = write_log(tmp_path, {0: [rest]})
    rc, out, _ = run(capsys, "--source", log, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["status"] == "WARNING"
    assert [p["check"] for p in doc["problems"]] == [check]


def test_hw_slowdown_without_thermal_is_critical(tmp_path, capsys):
    """rules/throttle.yaml: hw_slowdown (0x8 / power brake 0x80, no thermal bit) is
    critical; with the HW thermal bit (0x48 above) it is thermal_throttle, a warning."""
    log = write_log(tmp_path, {0: [busy(0, mask="0x0000000000000088")]})
    rc, out, _ = run(capsys, "--source", log)
    assert rc == 2 and "HW slowdown" in out and "hw_slowdown" in out


def test_missing_file_is_unknown_with_one_line_on_stderr(tmp_path, capsys):
    rc, out, err = run(capsys, "--source", str(tmp_path / "nope.csv"))
    assert rc == 3
    assert err.count("\n") == 1 and "nope.csv: no such file" in err
    assert out.startswith("WATCHDOG UNKNOWN - node: ")


def test_unknown_still_prints_json(tmp_path, capsys):
    bad = tmp_path / "garbage.csv"
    bad.write_bytes(b"\x00\x01\x02binary\xff\xfe" * 50)
    rc, out, err = run(capsys, "--source", str(bad), "--json")
    doc = json.loads(out)
    assert rc == 3 == doc["exit_code"] and doc["status"] == "UNKNOWN"
    assert doc["gpus"] == [] and doc["problems"][0]["severity"] == "UNKNOWN"
    assert err.startswith("watchdog: error: ") and "Traceback" not in err


@pytest.mark.parametrize("argv", [["--duration", "soon"], ["--expect-gpus", "-1"],
                                  ["--interval", "x"], ["--no-such-option"]])
def test_bad_command_line_is_unknown_not_critical(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(["check", *argv])
    out, err = capsys.readouterr()
    assert e.value.code == 3
    assert out == "WATCHDOG UNKNOWN - bad command line\n" and "error:" in err


def test_internal_error_is_unknown(tmp_path, capsys, monkeypatch):
    """A probe that cannot judge says UNKNOWN (3), never crashes with a traceback."""
    import watchdog.check.main as check_main

    def broken(*_a, **_k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(check_main, "judge", broken)
    log = write_log(tmp_path, {0: [busy(0)]})
    rc, out, err = run(capsys, "--source", log)
    assert rc == 3 and "internal error: ZeroDivisionError: boom" in err
    assert "Traceback" not in err and out.startswith("WATCHDOG UNKNOWN")


def test_help_documents_exit_codes(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "3 UNKNOWN" in out and "Bad input is UNKNOWN here" in out
