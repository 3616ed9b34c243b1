"""Small things a user hit (issue 8, item 6), each through the real command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.detect.lang import LangError, compile_expr, max_window
from watchdog.incident import Incident
from watchdog.notify.console import ConsoleNotifier
from watchdog.units import parse_duration


def _wd(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", *argv], capture_output=True,
                          text=True, timeout=300)


def _log(tmp_path: Path) -> Path:
    p = tmp_path / "one.csv"
    rows = [f"2026/04/19 10:00:{t:02d}.000, 0, 50 %, 300 W" for t in range(5)]
    p.write_text("timestamp, index, utilization.gpu [%], power.draw [W]\n" + "\n".join(rows)
                 + "\n")
    return p


def test_plot_into_missing_folder_fails_before_work(tmp_path: Path) -> None:
    target = tmp_path / "nope" / "t.png"
    r = _wd("replay", str(_log(tmp_path)), "--plot", str(target))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""  # before the table
    assert "no such folder" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_one_gpu_is_singular(tmp_path: Path) -> None:
    r = _wd("replay", str(_log(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert "1 GPU," in r.stdout and "1 GPUs" not in r.stdout


def test_interval_zero_says_so() -> None:
    r = _wd("replay", "sim:healthy", "--interval", "0", "--duration", "30m")
    assert r.returncode == 2
    assert "--interval 0: must be positive" in r.stderr and "<" not in r.stderr


def test_list_metrics_exists_and_names_the_map_targets() -> None:
    r = _wd("record", "--list-metrics")
    assert r.returncode == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines()[1:]]
    assert "power.draw" in names and "memory.used" in names
    assert "timestamp" in r.stdout.splitlines()[0]
    bad = _wd("replay", "x.csv", "--map", "powr.draw=p")
    assert bad.returncode == 2 and "watchdog record --list-metrics" in bad.stderr
    help_text = re.sub(r"-\s+", "-", " ".join(_wd("replay", "--help").stdout.split()))
    assert "watchdog record --list-metrics" in help_text and "power.draw=#5" in help_text


@pytest.mark.parametrize(("text", "seconds"), [("0h30m", 1800.0), ("90s", 90.0),
                                               ("250ms", 0.25), ("1m30s", 90.0)])
def test_one_duration_grammar(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert max_window(compile_expr(f"mean(utilization.gpu, {text}) > 5")) == seconds


def test_rule_windows_read_compound_and_day_durations() -> None:
    # parsed as durations (then range-checked), not a syntax error at the "30m"
    for text in ("1h30m", "1d"):
        with pytest.raises(LangError, match="out of range"):
            compile_expr(f"mean(utilization.gpu, {text}) > 5")


def test_console_line_has_no_duplicated_gpu_prefix() -> None:
    import io
    buf = io.StringIO()
    inc = Incident(kind="xid", severity="critical", host="n1", gpus=["7"], uuids=["GPU-7"],
                   started_at=0.0, fired_at=0.0, resolved_at=None, rule="xid",
                   summary="GPU 7 XID 13: an application fault", evidence={}, labels={})
    ConsoleNotifier(stream=buf, color=False)("firing", inc)
    line = buf.getvalue()
    assert "GPU 7 XID 13" in line and "GPU 7: GPU 7" not in line
