"""Rule files: valid ones load; every error is one FILE:LINE line naming the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.cli import main
from watchdog.detect import load_rules
from watchdog.errors import InputError
from watchdog.incident import KINDS, OWN_KINDS

GOOD = """\
rules:
  - name: hot
    kind: thermal_throttle
    severity: warning
    condition: sw_thermal or hw_thermal
    for: 10s
    evidence:
      temp: max(temperature.gpu, 30s)
    summary: "thermal slowdown at {temp:.0f} C on GPU {gpus}"
    runbook: https://example.invalid/hot
  - name: slow
    kind: hw_slowdown
    severity: warning
    condition: hw_slowdown
    inhibited_by: [thermal_throttle]
  - name: hung
    kind: comm_hang
    severity: critical
    scope: node
    condition: count(mean(utilization.gpu, 30s) > 95) >= 2
    for: learned(default=3m, min=60s, margin=30s)
    clear: mean(power_rel, 30s) > 40%
    keep_firing_for: 20s
"""


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_file_loads_in_inhibition_order(tmp_path: Path) -> None:
    rules = load_rules([write(tmp_path, GOOD)])
    assert [r.name for r in rules] == ["hot", "slow", "hung"]
    hung = rules.by_name["hung"]
    assert hung.learned is not None and hung.learned.default == 180.0
    assert hung.learned.min == 60.0 and hung.learned.margin == 30.0
    assert hung.keep_firing_for == 20.0 and hung.scope == "node"
    assert rules.inhibitors(rules.by_name["slow"]) == [rules.by_name["hot"]]
    assert rules.by_name["hot"].line == 2


def test_inhibitor_is_ordered_before_the_inhibited_rule(tmp_path: Path) -> None:
    text = GOOD.replace("inhibited_by: [thermal_throttle]", "inhibited_by: [hung]")
    names = [r.name for r in load_rules([write(tmp_path, text)])]
    assert names.index("hung") < names.index("slow")


@pytest.mark.parametrize(("old", "new", "line", "words"), [
    ("kind: thermal_throttle", "kind: thermal_throtle", 3, "kind 'thermal_throtle'"),
    ("severity: warning\n    condition: sw", "severity: loud\n    condition: sw", 4,
     "severity 'loud'"),
    ("for: 10s", "for: soon", 6, "'soon' is not a duration"),
    ("for: 10s", "for: learned(min=1m)", 6, "default= is required"),
    ("condition: sw_thermal or hw_thermal", "condition: sw_thermal or hw_thermale", 5,
     "unknown metric or signal 'hw_thermale' at column 15"),
    ("condition: sw_thermal or hw_thermal", "condition: sw_thermal or", 5,
     "found end of expression"),
    ("    runbook:", "    runbok:", 10, "unknown key 'runbok'"),
    ("{temp:.0f} C", "{temp.real} C", 9, "only plain names"),
    ("{temp:.0f} C", "{tmp} C", 9, "unknown field {tmp}"),
    ("https://example.invalid/hot", "example.invalid/hot", 10, "no such file"),
    ("https://example.invalid/hot", "ftp://example.invalid/hot", 10,
     "neither an http(s) URL nor a file path"),
    ("name: slow", "name: hot", 11, "duplicate rule name (first defined at"),
    ("inhibited_by: [thermal_throttle]", "inhibited_by: [nosuch]", 15, "unknown rule or kind"),
    ("count(mean(utilization.gpu, 30s) > 95)", "count(count(lost) > 1)", 20, "nested"),
    ("scope: node\n    condition: count(mean(utilization.gpu, 30s) > 95) >= 2",
     "scope: gpu\n    condition: count(mean(utilization.gpu, 30s) > 95) >= 2", 20,
     "only in scope: node"),
])
def test_errors_name_file_line_and_problem(tmp_path: Path, old: str, new: str, line: int,
                                           words: str) -> None:
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(InputError) as e:
        load_rules([p])
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: "), msg
    assert words in msg, msg
    assert "\n" not in msg


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    a = write(tmp_path, GOOD, "a.yaml")
    b = write(tmp_path, "- name: hot\n  kind: xid\n  severity: critical\n  condition: xid > 0\n",
              "b.yaml")
    with pytest.raises(InputError) as e:
        load_rules([tmp_path])
    assert str(e.value).startswith(f"{b}:1: rule hot: duplicate rule name")
    assert f"{a}:2" in str(e.value)


def test_inhibition_cycle_is_an_error(tmp_path: Path) -> None:
    text = GOOD.replace("    for: 10s\n", "    for: 10s\n    inhibited_by: [slow]\n", 1)
    with pytest.raises(InputError, match="inhibited_by cycle"):
        load_rules([write(tmp_path, text)])


@pytest.mark.parametrize(("text", "words"), [
    ("rules: [\n", "invalid YAML"),
    ("", "no rules"),
    ("tests: []\n", "unexpected top-level key 'tests'"),
    ("rules: 3\n", "expected a list of rules"),
    ("- name: x\n  kind: xid\n", "missing required key 'severity'"),
])
def test_malformed_files(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        load_rules([write(tmp_path, text)])


def test_missing_path_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such rule file"):
        load_rules([tmp_path / "nope.yaml"])


def test_rules_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, GOOD)
    assert main(["rules", "check", str(p)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"ok {p}:2: hot kind=thermal_throttle")
    assert out[-1] == "3 rule(s) in 1 file(s): ok"
    bad = write(tmp_path, GOOD.replace("kind: comm_hang", "kind: hang"), "bad.yaml")
    assert main(["rules", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    # every kind a rule may raise: all but the agent's own
    assert err.strip() == (f"watchdog: error: {bad}:17: rule hung: kind 'hang' is not one of: "
                           f"{', '.join(k for k in KINDS if k not in OWN_KINDS)}")
    assert "comm_hang, stall" in err and "agent" not in err.split("one of:")[1]


def test_the_example_in_docs_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "rules.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    (rule,) = load_rules([write(tmp_path, example)])
    assert rule.name == "comm_hang_gpu" and rule.learned is not None
    assert set(rule.evidence) == {"util", "power", "power_pct"}
