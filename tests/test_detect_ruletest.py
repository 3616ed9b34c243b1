"""Rule unit tests: series notation, pass/fail with a diff, the CLI and pytest collection."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from watchdog.cli import main
from watchdog.errors import InputError
from watchdog.pipeline.ruletest import load_cases, parse_series, run_case

pytest_plugins = ["pytester"]

RULES = """\
rules:
  - name: thermal
    kind: thermal_throttle
    severity: warning
    condition: hw_thermal or sw_thermal
    for: 5s
  - name: hw_slow
    kind: hw_slowdown
    severity: warning
    condition: hw_slowdown
    for: 5s
    inhibited_by: [thermal_throttle]
  - name: lost
    kind: gpu_lost
    severity: critical
    condition: lost
  - name: xid_bad
    kind: xid
    severity: critical
    condition: xid in (48, 79)
"""
TESTS = """\
rule_files: [../rules.yaml]
interval: 1s
tests:
  - name: thermal with hw slowdown is one incident
    series:
      0: {clocks_event_reasons.active: "0x4x10 0x48x20 0x4x10"}
    expect:
      - {kind: thermal_throttle, gpus: [0], started_at: 10s, fired_at: 15s, resolved_at: 30s}
    expect_absent: [hw_slowdown]
  - name: xid and lost
    interval: 2s
    series:
      "0-1": {utilization.gpu: "50x20"}
      1: {lost: "0x5 1x15"}
    xids: [{gpu: 0, at: 5s, code: 79}]
    expect:
      - {kind: xid, gpus: [0], fired_at: 6s}
      - {kind: gpu_lost, gpus: [1], fired_at: 9s..11s, resolved: false}
"""
FAILING = """\
rule_files: [../rules.yaml]
tests:
  - name: wrong expectation
    series:
      0: {clocks_event_reasons.active: "0x8x20"}
    expect:
      - {kind: hw_slowdown, fired_at: 3s}
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules.yaml").write_text(RULES)
    (tmp_path / "tests" / "good.yaml").write_text(TESTS)
    return tmp_path


@pytest.mark.parametrize(("text", "want"), [
    ("100x3", [100, 100, 100]),
    ("0 10 20", [0, 10, 20]),
    ("95+1x4", [95, 96, 97, 98]),
    ("10-2.5x3", [10, 7.5, 5]),
    ("_x2 7", [np.nan, np.nan, 7]),
    ("0x4x2 0x48x1", [4, 4, 72]),
    ("0x3", [0, 0, 0]),
    ("1e3", [1000]),
])
def test_series_notation(text: str, want: list[float]) -> None:
    np.testing.assert_array_equal(parse_series(text), np.array(want, dtype=float))


def test_bad_series_segment() -> None:
    with pytest.raises(ValueError, match="bad series segment 'abc'"):
        parse_series("1 abc")


def test_series_length_is_capped_before_expanding() -> None:
    """A series of a billion samples is refused while its text is read, not built."""
    from watchdog.pipeline.ruletest import MAX_SERIES

    assert len(parse_series(f"1x{MAX_SERIES}")) == MAX_SERIES
    for text in ("0x1000000000", f"1x{MAX_SERIES} 2", "0x4x" + "9" * 50):
        with pytest.raises(ValueError, match=f"more than {MAX_SERIES} samples"):
            parse_series(text)


def test_cases_pass(tree: Path) -> None:
    cases = load_cases(tree / "tests" / "good.yaml")
    assert [c.line for c in cases] == [4, 10]
    assert cases[1].interval == 2.0 and [d.index for d in cases[1].devices] == [0, 1]
    for c in cases:
        assert run_case(c) == []


def test_failure_is_a_diff(tree: Path) -> None:
    (tree / "tests" / "bad.yaml").write_text(FAILING)
    (case,) = load_cases(tree / "tests" / "bad.yaml")
    fails = run_case(case)
    assert fails[0] == "  missing:    kind=hw_slowdown fired_at=3s"
    assert fails[1].startswith("  unexpected: hw_slowdown rule=hw_slow gpus=[0] started_at=0s "
                               "fired_at=5s")


def test_unknown_metric_in_series_names_the_case(tree: Path) -> None:
    p = tree / "tests" / "typo.yaml"
    p.write_text(TESTS.replace("utilization.gpu", "utilisation.gpu"))
    with pytest.raises(InputError, match=r"typo.yaml:10: test xid and lost: series: unknown "
                                         r"metric 'utilisation.gpu'"):
        load_cases(p)


def test_misspelt_expectation_key_is_an_error(tree: Path) -> None:
    p = tree / "tests" / "typo.yaml"
    p.write_text(TESTS.replace("fired_at: 6s", "fired: 6s"))
    with pytest.raises(InputError, match=r"typo.yaml:10: test xid and lost: expect: unknown "
                                         r"key 'fired'"):
        load_cases(p)


def test_rules_test_command_exit_codes(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "test", str(tree / "tests")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 passed, 0 failed"
    (tree / "tests" / "bad.yaml").write_text(FAILING)
    assert main(["rules", "test", "-q", str(tree / "tests")]) == 1
    out = capsys.readouterr().out
    assert "FAIL " in out and "wrong expectation" in out and "ok " not in out
    assert out.splitlines()[-1] == "2 passed, 1 failed"
    assert main(["rules", "test", str(tree / "nope.yaml")]) == 2


def test_pytest_collects_one_item_per_case(tree: Path, pytester: pytest.Pytester) -> None:
    root = pytester.path / "rules"
    shutil.copytree(tree, root)
    (root / "tests" / "bad.yaml").write_text(FAILING)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "watchdog.testing.pytest_rules",
                                str(root))
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*missing:    kind=hw_slowdown fired_at=3s*"])
