"""``watchdog rules test --mutate``: thresholds no rule test pins are reported, pinned ones
are not, and the shipped rules' tests pin at least 90 % of their thresholds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.cli import main
from watchdog.pipeline.mutate import run

ROOT = Path(__file__).resolve().parents[1]

RULES = """\
rules:
  - name: busy
    kind: stall
    severity: warning
    condition: utilization.gpu >= 80
    for: 3s
"""
HEAD = """\
rule_files: [rules.yaml]
interval: 1s
tests:
"""
# util 80 fires (a threshold moved up to 106 would not); util 79 is silent (one moved down
# to 60 would fire); firing exactly 3 s after onset pins `for` from both sides
FIRES_AT_80 = """\
  - name: 80 for 3 s fires at 3 s
    series: {0: {utilization.gpu: "0x5 80x10"}}
    expect: [{kind: stall, fired_at: 8s}]
"""
SILENT_AT_79 = """\
  - name: 79 is silent
    series: {0: {utilization.gpu: "0x5 79x10"}}
    expect: []
"""
SILENT_AT_0 = """\
  - name: idle is silent
    series: {0: {utilization.gpu: "0x15"}}
    expect: []
"""


def _write(tmp_path: Path, cases: str) -> Path:
    (tmp_path / "rules.yaml").write_text(RULES)
    t = tmp_path / "tests.yaml"
    t.write_text(HEAD + cases)
    return t


def test_both_sides_pinned_leaves_no_survivor(tmp_path: Path) -> None:
    res = run([_write(tmp_path, FIRES_AT_80 + SILENT_AT_79)])
    assert res.broken == []
    assert sorted((m.field, m.old, m.new) for m in res.mutants) == [
        ("condition", "80", "106"), ("condition", "80", "60"),
        ("for", "3s", "2s"), ("for", "3s", "4s")]
    assert res.survivors == []
    assert res.score == 1.0


def test_only_the_unpinned_side_is_reported(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    tests = _write(tmp_path, FIRES_AT_80 + SILENT_AT_0)
    res = run([tests])
    assert [(m.rule, m.field, m.old, m.new) for m in res.survivors] == [
        ("busy", "condition", "80", "60")]
    assert res.survivors[0].where == f"{tmp_path / 'rules.yaml'}:5"
    assert main(["rules", "test", "--mutate", str(tests)]) == 0
    out = capsys.readouterr().out
    assert f"unpinned {tmp_path / 'rules.yaml'}:5: busy condition: 80 -> 60" in out
    assert "mutation score: 3/4 caught (75 %)" in out
    assert main(["rules", "test", "--mutate", "--min-score", "0.8", str(tests)]) == 1
    assert main(["rules", "test", "--mutate", "--min-score", "0.75", str(tests)]) == 0


def test_a_case_failing_already_is_reported_and_catches_nothing(tmp_path: Path) -> None:
    wrong = FIRES_AT_80.replace("fired_at: 8s", "fired_at: 50s")
    res = run([_write(tmp_path, wrong + SILENT_AT_0)])
    assert [b.split(": ", 1)[1] for b in res.broken] == ["80 for 3 s fires at 3 s"]
    assert {(m.field, m.new) for m in res.survivors} == {
        ("condition", "106"), ("condition", "60"), ("for", "2s"), ("for", "4s")}


def test_mutated_text_differs_only_in_the_number(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES.replace(
        "utilization.gpu >= 80", "mean(utilization.gpu, 10s) >= 80 and not throttle_bad > 0x4"))
    t = tmp_path / "tests.yaml"
    t.write_text(HEAD + FIRES_AT_80.replace("fired_at: 8s", "fired_at: 5s..30s"))
    srcs = {m.src for m in run([t]).mutants if m.field == "condition"}
    assert "mean(utilization.gpu, 8s) >= 80 and not throttle_bad > 0x4" in srcs
    assert "mean(utilization.gpu, 10s) >= 106 and not throttle_bad > 0x4" in srcs
    assert all("0x4" in s for s in srcs)  # bit masks are not thresholds


def test_bad_min_score_is_an_input_error(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    tests = _write(tmp_path, FIRES_AT_80)
    assert main(["rules", "test", "--mutate", "--min-score", "90", str(tests)]) == 2
    assert "--min-score" in capsys.readouterr().err
    assert main(["rules", "test", "--min-score", "0.9", str(tests)]) == 2
    assert "only with --mutate" in capsys.readouterr().err


@pytest.mark.slow
def test_shipped_rules_score_at_least_90_percent() -> None:
    """The README's command, as a subprocess: the shipped tests pin >= 90 % of thresholds."""
    p = subprocess.run([sys.executable, "-m", "watchdog", "rules", "test", "--mutate",
                        "rules/tests/", "--min-score", "0.90"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "mutation score:" in p.stdout
