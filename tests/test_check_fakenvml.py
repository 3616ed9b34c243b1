"""``watchdog check`` on the real nvml source, with the fake NVML below nvidia-ml-py: each
fake scenario gives the exit code and the problem an operator should see."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from watchdog.check.judge import Status, judge
from watchdog.check.probe import burst_live
from watchdog.cli import main
from watchdog.clock import ManualClock
from watchdog.sources import SourceOptions, open_live
from watchdog.testing import fakenvml
from watchdog.testing.fakenvml.scenarios import Scenario, h100_node


@pytest.fixture
def fake(clock):
    """Install a fake scenario whose time is the test's manual clock; always uninstall."""
    def install(scenario):
        return fakenvml.install(scenario, time_fn=clock.now)
    yield install
    fakenvml.uninstall()


def check(capsys, *argv: str) -> tuple[int, dict, str]:
    """One reading (``--duration 0``: no waiting on the wall clock), JSON parsed."""
    rc = main(["check", "--json", "--duration", "0", *argv])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


@pytest.mark.parametrize("scenario", ["healthy", "bytes_strings", "xid_kmsg"])
def test_healthy_nodes_are_ok(fake, capsys, scenario):
    fake(scenario)
    rc, doc, err = check(capsys)
    assert (rc, doc["status"], doc["problems"]) == (0, "OK", []), err
    assert doc["driver"] and all(g["uuid"].startswith("GPU-") for g in doc["gpus"])


def test_healthy_node_counts_and_decodes(fake, capsys):
    fake("healthy")
    rc, doc, _ = check(capsys, "--expect-gpus", "8")
    assert rc == 0 and doc["gpu_count"] == 8
    g0 = doc["gpus"][0]
    assert g0["name"] == "NVIDIA H100 80GB HBM3" and g0["metrics"]["power.draw"] > 600
    assert "sw_power_cap" in g0["clock_events"]


def test_fewer_gpus_than_expected_is_critical(fake, capsys):
    fake("healthy")
    rc, doc, _ = check(capsys, "--expect-gpus", "9")
    assert rc == 2 and doc["problems"][0]["message"] == "found 8 GPUs, expected 9"


@pytest.mark.parametrize(("scenario", "words"), [
    ("no_library", "libnvidia-ml.so.1 not found"),
    ("init_failure", "driver not loaded"),
])
def test_no_nvml_is_unknown_with_the_remedy(fake, capsys, scenario, words):
    fake(scenario)
    rc, doc, err = check(capsys)
    assert rc == 3 and doc["status"] == "UNKNOWN" and doc["gpus"] == []
    assert words in err and err.count("\n") == 1
    assert words in doc["problems"][0]["message"]


def test_lost_gpu_is_critical(fake, capsys, clock):
    fake("gpu_lost")
    clock.advance(31.0)  # the scenario loses GPU 3 after 30 s
    rc, doc, _ = check(capsys)
    assert rc == 2
    assert [(p["gpu"], p["check"]) for p in doc["problems"]] == [(3, "gpu_lost")]
    assert doc["gpus"][3]["status"] == "CRITICAL" and doc["gpus"][2]["status"] == "OK"


def test_wedged_call_is_critical_and_names_the_call(fake, capsys):
    fake("blocking_call")
    rc, doc, _ = check(capsys, "--call-timeout", "0.2s")
    assert rc == 2
    (p,) = doc["problems"]
    assert (p["gpu"], p["check"], p["severity"]) == (2, "nvml_timeout", "CRITICAL")
    assert "nvmlDeviceGetPowerUsage" in p["message"]


def test_unsupported_fields_are_null_not_zero_and_not_errors(fake, capsys):
    fake("not_supported")
    rc, doc, _ = check(capsys)
    assert (rc, doc["problems"]) == (0, [])
    m = doc["gpus"][0]["metrics"]
    assert m["temperature.memory"] is None and m["fan.speed"] is None


@pytest.mark.parametrize(("code", "status"), [(79, Status.CRITICAL), (13, Status.WARNING)])
def test_xid_from_the_event_set(fake, clock, code, status):
    """The XID reaches the verdict through nvidia-ml-py's event-set calls into the fake."""
    node = h100_node()
    fake(Scenario("one_xid", node, xids=((0.0, 1, code),)))
    source = open_live("nvml", SourceOptions(), clock.now())
    try:
        watcher = source.xid_watcher
        assert watcher is not None and watcher.wait_for_events(10.0)
        b = burst_live(source, ManualClock(clock.now()), duration=0.0, interval=0.5)
    finally:
        source.close()
    v = judge(b.devices, b.samples, host=b.host, checked_at=b.end)
    assert [(p.gpu, p.check, p.severity) for p in v.problems] == [(1, "xid", status)]
    assert f"XID {code}" in v.problems[0].message


def test_xid_scenario_through_the_runner():
    """The documented command line, as a fresh process: XIDs 79 and 48 at start-up arrive
    through the event thread during the default burst; 79 and 48 are both CRITICAL."""
    proc = subprocess.run(
        [sys.executable, "-m", "watchdog.testing.fakenvml", "xid", "--", "watchdog", "check",
         "--json"], capture_output=True, text=True, timeout=60, check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 2 == doc["exit_code"], proc.stderr
    got = {(p["gpu"], p["severity"], p["message"].split(" (")[0]) for p in doc["problems"]}
    assert got == {(1, "CRITICAL", "XID 79"), (4, "CRITICAL", "XID 48")}
