"""The systemd unit: its key properties parsed, `systemd-analyze verify` clean and
`systemd-analyze security` exposure at most 2.0.

`verify` checks that ExecStart= names an executable, and ``/opt/nvml-watchdog`` does not
exist on a build machine, so it runs on a copy of the unit whose only change is that path
(pointing at the ``watchdog`` script of the environment running the tests); the test
asserts that the copy differs in that path and nothing else. `security --offline=yes`
rates the shipped file as it is. Without systemd-analyze (CI installs it with apt when it
can, see ``.ci/run``) those two tests skip and say why.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "config" / "nvml-watchdog.service"
SYSUSERS = REPO / "config" / "nvml-watchdog.sysusers.conf"
EXEC = "/opt/nvml-watchdog/bin/watchdog"
BUDGET = 2.0

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze not installed (apt-get install systemd)")


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values in order]}}``; comments and blank lines dropped."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        out.setdefault(section, {}).setdefault(key.strip(), []).append(value.strip())
    return out


def test_unit_key_properties() -> None:
    svc = parse_unit(UNIT.read_text())["Service"]
    assert svc["Type"] == ["notify"]
    assert svc["ExecStart"] == [f"{EXEC} run --config /etc/nvml-watchdog/watchdog.yaml"]
    assert re.fullmatch(r"\d+s?", svc["WatchdogSec"][0])
    assert svc["Restart"] == ["on-failure"]
    assert svc["StateDirectory"] == ["nvml-watchdog"]
    # a dedicated user, never root
    user = svc.get("User", [""])[-1]
    assert svc.get("DynamicUser") == ["yes"] or (user and user not in ("root", "0"))
    assert svc["DevicePolicy"] == ["closed"]
    allowed = " ".join(svc["DeviceAllow"])
    assert "/dev/nvidiactl" in allowed and "nvidia-frontend" in allowed
    assert "nvidia-uvm" not in allowed  # NVML needs no CUDA memory device
    assert svc["CapabilityBoundingSet"] == [""]
    assert "@system-service" in svc["SystemCallFilter"]
    assert svc["NoNewPrivileges"] == ["yes"] and svc["ProtectSystem"] == ["strict"]
    # the agent must still see job processes' /proc entries
    assert "ProtectProc" not in svc and "ProcSubset" not in svc
    doc = parse_unit(UNIT.read_text())["Unit"]["Documentation"]
    assert doc and not any("example.invalid" in d for d in doc)


def test_unit_user_is_the_one_sysusers_creates() -> None:
    svc = parse_unit(UNIT.read_text())["Service"]
    entry = next(line.split() for line in SYSUSERS.read_text().splitlines()
                 if line.startswith("u "))
    assert entry[1] == svc["User"][0] == svc["Group"][0]


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None,
                    reason="systemd-sysusers not installed")
def test_sysusers_file_creates_the_user(tmp_path: Path) -> None:
    """The install step `systemd-sysusers FILE`, into a scratch root."""
    (tmp_path / "etc").mkdir()
    r = subprocess.run(["systemd-sysusers", f"--root={tmp_path}", str(SYSUSERS)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text()
    assert re.search(r"^nvml-watchdog:x:\d+:\d+:.*:/var/lib/nvml-watchdog:", passwd, re.M)


@needs_analyze
def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "watchdog"
    assert script.is_file(), f"{script}: install the project (pip install -e .) first"
    copy = tmp_path / UNIT.name
    text = UNIT.read_text()
    copy.write_text(text.replace(EXEC, str(script)))
    # the copy differs from the shipped unit in the ExecStart path only
    diff = [(a, b) for a, b in zip(text.splitlines(), copy.read_text().splitlines(),
                                   strict=True) if a != b]
    assert [a for a, _ in diff if not a.startswith("#")] == [
        f"ExecStart={EXEC} run --config /etc/nvml-watchdog/watchdog.yaml"]
    r = subprocess.run([ANALYZE, "verify", str(copy)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(), \
        r.stdout + r.stderr


@needs_analyze
def test_systemd_analyze_verify_notices_a_broken_unit(tmp_path: Path) -> None:
    """The verify test can fail: the shipped ExecStart is not on this machine."""
    r = subprocess.run([ANALYZE, "verify", str(UNIT)], capture_output=True, text=True,
                       timeout=120)
    if Path(EXEC).exists():
        pytest.skip(f"{EXEC} is installed here")
    assert r.returncode != 0 and EXEC in r.stderr


def exposure(unit: Path) -> float:
    r = subprocess.run([ANALYZE, "security", "--offline=yes", "--no-pager", str(unit)],
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    return float(m.group(1))


@needs_analyze
def test_systemd_analyze_security_exposure_within_budget(tmp_path: Path) -> None:
    score = exposure(UNIT)
    assert score <= BUDGET, f"exposure {score} > {BUDGET}"
    # the measurement discriminates: the unhardened unit of old rates far worse
    bare = tmp_path / UNIT.name
    bare.write_text("[Service]\nType=notify\nExecStart=/bin/true\n")
    assert exposure(bare) > 5.0
