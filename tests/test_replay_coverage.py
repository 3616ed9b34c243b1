"""`watchdog replay` on logs that lack a column the rules would read first (issue 18):
each rule falls back or says it cannot judge, once per log on stderr and in ``--json``
"coverage"; a page that stood on a fallback says so. Small synthetic
``nvidia-smi --format=csv`` logs written in tmp_path."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from watchdog import cli

T0 = 1_763_712_000.0  # 2025-11-21T08:00:00Z
H100 = "NVIDIA H100 80GB HBM3"

Row = dict[str, str]


def write_log(path: Path, columns: list[str], seconds: int, step: int,
              row: Callable[[int], Row]) -> Path:
    """One GPU, a sample every ``step`` s for ``seconds`` s; ``row(t)`` gives the values
    of ``columns`` (nvidia-smi's header names) at second ``t``."""
    lines = [", ".join(["timestamp", "index", *columns])]
    for t in range(0, seconds, step):
        stamp = datetime.fromtimestamp(T0 + t, tz=UTC).strftime(
            "%Y/%m/%d %H:%M:%S.000")
        vals = row(t)
        lines.append(", ".join([stamp, "0", *(vals[c] for c in columns)]))
    path.write_text("\n".join(lines) + "\n")
    return path


def replay(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """``watchdog replay PATH --json``: the document and stderr."""
    assert cli.main(["replay", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def coverage(doc: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [c for c in doc["coverage"] if c["rule"] == rule]


def said_on_stderr(err: str, rule: str, text: str) -> bool:
    """Whether stderr has ``rule`` (alone or among rules sharing the reason) with
    ``text`` on one line."""
    for line in err.splitlines():
        head, _, rest = line.strip().partition(": ")
        if rule in [r.strip() for r in head.split(",")] and text in rest:
            return True
    return False


def fired_s(inc: dict[str, Any]) -> float:
    return datetime.fromisoformat(inc["fired_at"]).timestamp() - T0


# --- no power column ------------------------------------------------------------------------


def test_a_log_without_power_says_the_hang_rule_cannot_judge(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cols = ["name", "utilization.gpu [%]", "memory.used [MiB]", "memory.total [MiB]",
            "temperature.gpu"]

    def row(t: int) -> Row:  # training, then 100 % util with nothing else to tell
        return {"name": H100, "utilization.gpu [%]": "100 %",
                "memory.used [MiB]": "40000 MiB", "memory.total [MiB]": "81559 MiB",
                "temperature.gpu": "60"}

    doc, err = replay(write_log(tmp_path / "nopower.csv", cols, 600, 1, row), capsys)
    assert doc["incidents"] == []
    (note,) = coverage(doc, "comm_hang")
    assert note["judged"] is False and "no power.draw column" in note["note"]
    assert said_on_stderr(err, "comm_hang", "no power.draw column"), err
    assert "cannot judge this log" in err


# --- memory total from used + free ----------------------------------------------------------


def test_memory_total_from_used_and_free_still_pages_memory_pressure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # no memory.total and no name (the catalogue cannot stand in): used + free is all
    total = 81559
    cols = ["utilization.gpu [%]", "memory.used [MiB]", "memory.free [MiB]", "power.draw [W]"]

    def row(t: int) -> Row:  # a leak from 90 % at 0.25 % a minute, read every 10 s
        used = round(0.90 * total + 0.0025 * total * t / 60)
        return {"utilization.gpu [%]": "100 %", "memory.used [MiB]": f"{used} MiB",
                "memory.free [MiB]": f"{total - used} MiB", "power.draw [W]": "600.00 W"}

    doc, err = replay(write_log(tmp_path / "nototal.csv", cols, 1500, 10, row), capsys)
    (inc,) = [i for i in doc["incidents"] if i["kind"] == "memory_pressure"]
    assert inc["gpus"] == ["0"]
    assert fired_s(inc) == 960  # 15 min of growth watched, then for: 1m
    assert inc["evidence"]["total"] == pytest.approx(total)
    assert "used + free" in inc["summary"]
    (note,) = coverage(doc, "memory_pressure")
    assert note["judged"] is True and "used + free" in note["note"]
    assert "no memory.total column" in note["note"]
    assert said_on_stderr(err, "memory_pressure", "used + free"), err
    assert [i["kind"] for i in doc["incidents"]] == ["memory_pressure"]


# --- thermal slowdown from the catalogue ----------------------------------------------------


def test_thermal_without_bits_or_clocks_pages_at_the_catalogue_slowdown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an H100 SXM by its name: no reason bits, no clocks, no T.Limit. Busy at 650 W and
    # 73 C; from 240 s its temperature climbs 0.2 C/s to 91 C (87 C, the catalogue's
    # slowdown, at 310 s) and from 300 s its power falls to 450 W. Seven minutes: too
    # short for the no-reference fallback (10 min after the GPU was first seen working),
    # so only the catalogue's figure can page it.
    cols = ["name", "utilization.gpu [%]", "memory.used [MiB]", "memory.total [MiB]",
            "power.draw [W]", "temperature.gpu"]

    def row(t: int) -> Row:
        temp = min(91.0, 73.0 + max(0, t - 240) * 0.2)
        power = 650.0 - min(200.0, max(0, t - 300) * 200.0 / 30.0)
        return {"name": H100, "utilization.gpu [%]": "100 %",
                "memory.used [MiB]": "60000 MiB", "memory.total [MiB]": "81559 MiB",
                "power.draw [W]": f"{power:.2f} W", "temperature.gpu": f"{temp:.0f}"}

    doc, err = replay(write_log(tmp_path / "hot.csv", cols, 420, 1, row), capsys)
    assert [i["kind"] for i in doc["incidents"]] == ["thermal_throttle"]
    (inc,) = doc["incidents"]
    assert 0 < fired_s(inc) - 310 <= 60  # within 1 min of reaching the slowdown
    assert inc["evidence"]["limit_c"] == pytest.approx(87.0)
    assert "slows down at 87 C" in inc["summary"]
    notes = [c["note"] for c in coverage(doc, "thermal_throttle")]
    assert all(c["judged"] for c in coverage(doc, "thermal_throttle"))
    assert any("slowdown at 87 C from the catalogue" in n for n in notes), notes
    assert any("no clock-event reasons column" in n for n in notes), notes
    assert said_on_stderr(err, "thermal_throttle", "slowdown at 87 C from the catalogue"), err


def test_the_same_climb_at_steady_power_raises_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: at the catalogue's slowdown but with the power not falling (a hot
    room, not a slowdown yet), no page: the power drop is the confirmation."""
    cols = ["name", "utilization.gpu [%]", "power.draw [W]", "temperature.gpu"]

    def row(t: int) -> Row:
        temp = min(91.0, 73.0 + max(0, t - 240) * 0.2)
        return {"name": H100, "utilization.gpu [%]": "100 %", "power.draw [W]": "650.00 W",
                "temperature.gpu": f"{temp:.0f}"}

    doc, _ = replay(write_log(tmp_path / "warm.csv", cols, 420, 1, row), capsys)
    assert doc["incidents"] == []


# --- sparse sampling ------------------------------------------------------------------------


def test_a_log_sampled_every_30_s_still_pages_a_hang_and_says_it_widened(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # busy at 650 W for 10 min, then hung: 100 % util at 110 W, clocks up, for 10 min
    cols = ["utilization.gpu [%]", "power.draw [W]", "power.limit [W]", "clocks.sm [MHz]",
            "clocks_event_reasons.active"]

    def row(t: int) -> Row:
        hung = t >= 600
        return {"utilization.gpu [%]": "100 %",
                "power.draw [W]": f"{110.0 if hung else 650.0:.2f} W",
                "power.limit [W]": "700.00 W", "clocks.sm [MHz]": "1980 MHz",
                "clocks_event_reasons.active": "0x0000000000000000"}

    doc, err = replay(write_log(tmp_path / "sparse.csv", cols, 1200, 30, row), capsys)
    assert [i["kind"] for i in doc["incidents"]] == ["comm_hang"]
    (inc,) = doc["incidents"]
    # in time: the rule's `for` + 1 min, plus two samples (a fault shows only at one)
    assert 0 < fired_s(inc) - 600 <= inc["evidence"]["for_s"] + 60 + 2 * 30
    assert "sparse log: windows widened to 45 s" in inc["summary"]
    (note,) = coverage(doc, "*")
    assert note["judged"] is True
    assert note["note"] == ("sampled every 30 s: windows shorter than 45 s widened to 45 s, so a "
                            "fault shorter than 45 s plus its rule's for: is not paged")
    assert "every rule: sampled every 30 s" in err


def test_a_log_sampled_every_second_widens_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cols = ["utilization.gpu [%]", "power.draw [W]", "power.limit [W]"]

    def row(t: int) -> Row:
        return {"utilization.gpu [%]": "100 %", "power.draw [W]": "650.00 W",
                "power.limit [W]": "700.00 W"}

    doc, err = replay(write_log(tmp_path / "dense.csv", cols, 300, 1, row), capsys)
    assert coverage(doc, "*") == [] and "widened" not in err
