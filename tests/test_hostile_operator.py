"""Hostile conditions, round 2 (issue 32, cases 11-15): no operator mistake mutes a page in
silence. Each case is what a new operator does following the README and docs/install.md:
a `silence add` without `--config`, relative paths in the config, a wrong Slack token, a
typo in the config during an incident, a second `watchdog run` beside the service, the
shipped Alertmanager route and fleet rules. Each test's first docstring line names the
case as an operator would (``bench/hostile.py`` prints it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_helpers import env

REPO = Path(__file__).resolve().parent.parent


def watchdog(*args: str, cwd: Path | str | None = None, timeout: float = 60.0,
             **extra: str) -> subprocess.CompletedProcess[str]:
    """``python -m watchdog ARGS`` as an operator runs it (HOME kept apart)."""
    return subprocess.run([sys.executable, "-m", "watchdog", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env=env(**extra))


def lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


# --- the two small ones --------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--json", "--bogus"], ["--bogus", "--json"],
                                  ["--json", "--duration", "soon"]])
def test_check_json_with_a_bad_option_prints_json(argv: list[str]) -> None:
    """operator: `check --json --bogus` prints the UNKNOWN verdict as JSON (exit 3), not
    plain text a script cannot parse"""
    r = watchdog("check", *argv)
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "UNKNOWN" and doc["exit_code"] == 3
    assert "bad command line" in doc["problems"][0]["message"], doc
    assert "error:" in r.stderr and "Traceback" not in r.stderr


def test_the_permission_error_names_each_who_once(tmp_path: Path) -> None:
    """operator: the permission error never reads "run it as root, as root, or as a member
    of group root" """
    from watchdog.store.db import _who_may

    d = tmp_path / "state"
    d.mkdir()
    import grp
    import pwd

    st = d.stat()
    owner, group = pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name
    text = _who_may(d)
    for word in {"root", owner, group}:
        assert text.count(f" {word}") == 1, text
    if os.geteuid() == 0:
        assert text == "run it as root"  # root's own directory: nobody else
        os.chown(d, 65534, 65534)
        other = pwd.getpwuid(65534).pw_name
        assert _who_may(d) == (f"run it as root, as {other}, or as a member of group "
                               f"{grp.getgrgid(65534).gr_name}")
