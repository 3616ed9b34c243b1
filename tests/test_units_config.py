"""Durations, the daemon config file, and the console notifier's wording."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from watchdog import config
from watchdog.errors import InputError
from watchdog.incident import Incident
from watchdog.notify.console import ConsoleNotifier, gpus_phrase
from watchdog.report.table import duration
from watchdog.units import duration_in, format_duration, number_in, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0), ("0.2s", 0.2),
    ("250ms", 0.25), (" 2M ", 120.0), ("1d", 86400.0),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "ten", "5x", "-3", "3 m", "m5", "nan", "1h-5m"])
def test_bad_durations_name_the_option(text: str) -> None:
    with pytest.raises(InputError, match="--interval"):
        parse_duration(text, what="--interval")


@pytest.mark.parametrize("text", ["99999999999999999999999999999999d", "1e400", "inf",
                                  "-inf", "NaN", "9" * 400 + "s", "36600000d"])
def test_durations_never_overflow(text: str) -> None:
    with pytest.raises(InputError, match="--interval"):
        parse_duration(text, what="--interval")


def test_duration_in_names_the_range() -> None:
    assert duration_in("100ms", 0.1, 3600, what="interval") == pytest.approx(0.1)
    assert duration_in("1h", 0.1, 3600, what="interval") == 3600.0
    with pytest.raises(InputError, match=r"^interval: '1ms' is out of range \(100ms to 1h\)$"):
        duration_in("1ms", 0.1, 3600, what="interval")
    assert [format_duration(x) for x in (0.1, 0, 90, 600, 3600, 86400 * 3650)] == [
        "100ms", "0s", "90s", "10m", "1h", "3650d"]


@pytest.mark.parametrize(("value", "kwargs", "message"), [
    (float("inf"), {}, "not a finite number"), (float("nan"), {}, "not a finite number"),
    (True, {}, "not a number"), ("3", {}, "not a number"), (0, {"lo_open": True}, "out of range"),
    (11, {}, "out of range"), (2.5, {"integer": True}, "not an integer"),
    (-1, {"integer": True}, "out of range"),
])
def test_number_in_refuses(value: object, kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InputError, match=f"^x: .*{message}"):
        number_in(value, 0, 10, what="x", **kwargs)


def test_number_in_accepts_the_ends() -> None:
    assert number_in(0, 0, 10, what="x") == 0.0
    assert number_in(10, 0, 10, what="x", integer=True) == 10
    assert number_in(10.0, 0, 10, what="x", lo_open=True) == 10.0


def test_config_loads_and_validates(tmp_path: Path) -> None:
    p = tmp_path / "w.yaml"
    p.write_text("source: sim:comm_hang\ninterval: 5s\nrules: [a.yaml, b/]\nspeed: 2\n")
    c = config.load(p)
    # rule paths are the config folder's (issue 32: not the current directory's)
    assert (c.source, c.interval, c.rules, c.speed) == (
        "sim:comm_hang", 5.0, (str(tmp_path / "a.yaml"), str(tmp_path / "b")), 2.0)
    empty = _write(tmp_path, "")
    assert config.load(empty) == config.Config(path=str(empty))


@pytest.mark.parametrize(("text", "message"), [
    ("source: nvml\nintreval: 5s\n", r"w.yaml:2: unknown setting 'intreval'"),
    ("interval: soon\n", r"w.yaml:1: interval: 'soon' is not a duration"),
    ("interval: 0\n", r"w.yaml:1: interval must be positive \(100ms to 1h\)"),
    ("source: [1\n", r"w.yaml:\d+: invalid YAML"),
    ("- a\n- b\n", r"expected a mapping"),
    ("speed: fast\n", r"w.yaml:1: speed: 'fast' is not a number"),
])
def test_config_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        config.load(_write(tmp_path, text))


def test_missing_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read config"):
        config.load(tmp_path / "nope.yaml")


def test_gpu_lists_and_durations_read_well() -> None:
    assert gpus_phrase(["0", "1", "2", "3", "5", "7", "6"]) == "GPUs 0-3,5-7"
    assert gpus_phrase(["4"]) == "GPU 4"
    assert duration(185) == "3m05s" and duration(42) == "42s" and duration(7300) == "2h01m"


def test_console_notifier_says_what_and_where() -> None:
    inc = Incident(kind="comm_hang", severity="critical", host="node7", gpus=["0", "1", "2"],
                   uuids=["a", "b", "c"], started_at=1_000.0, fired_at=1_150.0,
                   resolved_at=None, rule="comm_hang", summary="100% util at 95 W")
    out = io.StringIO()
    ConsoleNotifier(out, color=False)("firing", inc)
    inc.resolved_at = 1_600.0
    ConsoleNotifier(out, color=False)("resolved", inc)
    first, second = out.getvalue().splitlines()
    assert "FIRING" in first and "CRITICAL" in first
    assert "node7 GPUs 0-2: 100% util at 95 W" in first
    assert "(for 2 min 30 s)" in first
    assert "RESOLVED" in second and "lasted 10 min" in second


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "w.yaml"
    p.write_text(text)
    return p
