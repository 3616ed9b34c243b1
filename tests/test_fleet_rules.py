"""The fleet rules for Prometheus: ``watchdog rules export --prometheus`` prints the shipped
file, real ``promtool`` accepts it and its unit tests pass (tests/prometheus/, written by
make_fleet_test.py), and what the rules read is what the agent exports."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus; .ci/run "
                             "installs it)")


def export() -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", "rules", "export", "--prometheus"],
                          capture_output=True, text=True, timeout=60, cwd="/")


def test_export_prints_the_shipped_rule_file() -> None:
    out = export()
    assert out.returncode == 0, out.stderr
    assert out.stdout == (REPO / "rules" / "prometheus" / "fleet.yml").read_text()


def test_export_needs_a_target() -> None:
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "export"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--prometheus" in out.stderr


@needs_promtool
def test_promtool_accepts_the_exported_rules(tmp_path: Path) -> None:
    f = tmp_path / "fleet.yml"
    f.write_text(export().stdout)
    out = subprocess.run([PROMTOOL, "check", "rules", str(f)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@needs_promtool
def test_the_rules_promtool_unit_tests_pass() -> None:
    out = subprocess.run([PROMTOOL, "test", "rules", "fleet_test.yml"], capture_output=True,
                         text=True, timeout=120, cwd=REPO / "tests" / "prometheus")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_unit_test_file_is_what_its_script_writes() -> None:
    sys.path.insert(0, str(REPO / "tests" / "prometheus"))
    try:
        import make_fleet_test
    finally:
        sys.path.pop(0)
    assert make_fleet_test.render() == make_fleet_test.OUT.read_text(), \
        "run python tests/prometheus/make_fleet_test.py"


def test_the_contract_culprit_alert() -> None:
    doc = yaml.safe_load((REPO / "rules" / "prometheus" / "fleet.yml").read_text())
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}
    culprits = [a for name, a in alerts.items() if "Culprit" in name]
    assert len(culprits) == 1
    from watchdog.units import parse_duration

    assert parse_duration(culprits[0]["for"]) <= 60
    assert "node" in culprits[0]["annotations"]["summary"]
    for a in alerts.values():  # every alert says which job, and runbook has an anchor
        assert a["annotations"]["runbook"].startswith("docs/fleet.md#")
    fleet_doc = (REPO / "docs" / "fleet.md").read_text().lower()
    for name in alerts:
        assert f"#### {name.lower()}" in fleet_doc or f"### {name.lower()}" in fleet_doc, name


def test_every_series_the_rules_read_is_one_the_agent_exports() -> None:
    text = (REPO / "rules" / "prometheus" / "fleet.yml").read_text()
    used = set(re.findall(r"\b(watchdog_[a-z_]+)", text))
    from watchdog.service import metrics

    exported = {name for _, name, _, _ in metrics.GPU_GAUGES} | {
        "watchdog_gpu_power_busy_ratio", "watchdog_gpu_clock_slowdown", "watchdog_gpu_lost",
        "watchdog_gpu_hang", "watchdog_gpu_stall", "watchdog_gpu_fault",
        "watchdog_build_info", "watchdog_job_info", "watchdog_incidents",
        # the agent's own health (issue 32): source, ticks (a counter), sinks
        "watchdog_source_up", "watchdog_ticks_total", "watchdog_notify_sink_up"}
    # the per-kind gauges are named in the list of kinds (watchdog/incident.py)
    src = (REPO / "watchdog" / "service" / "metrics.py").read_text() + \
        (REPO / "watchdog" / "incident.py").read_text()
    for name in used:  # a counter is named without _total in the code
        assert name in exported and f'"{name.removesuffix("_total")}"' in src, name
    # never Prometheus's own target label `job`: every selector and grouping says job_id
    assert not re.search(r"[{,(]\s*job\s*(=|!=|=~|!~|[,)])", text)
