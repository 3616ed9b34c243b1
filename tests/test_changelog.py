"""The CHANGELOG is by release and its latest release is what ``watchdog --version``
prints (and the tag the Kubernetes manifests run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from watchdog import __version__

REPO = Path(__file__).resolve().parent.parent


def releases() -> list[str]:
    text = (REPO / "CHANGELOG.md").read_text()
    return re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.MULTILINE)


def test_the_latest_release_is_the_version_the_command_prints() -> None:
    got = subprocess.run([sys.executable, "-m", "watchdog", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert got.stdout.split() == ["nvml-watchdog", __version__]
    assert releases()[0] == __version__, releases()


def test_releases_are_newest_first_and_say_how_to_upgrade() -> None:
    versions = [tuple(int(x) for x in v.split(".")) for v in releases()]
    assert versions == sorted(versions, reverse=True) and len(versions) >= 2
    text = (REPO / "CHANGELOG.md").read_text()
    latest = text.split(f"## [{releases()[0]}]", 1)[1].split("\n## [", 1)[0]
    assert "### Upgrading from" in latest
    assert not re.search(r"\bissue \d+", text)  # users' words: no internal issue numbers


def test_the_manifests_run_this_release() -> None:
    manifest = (REPO / "config" / "kubernetes" / "nvml-watchdog.yaml").read_text()
    tags = set(re.findall(r"image: nvml-watchdog:(\S+)", manifest))
    assert tags == {__version__}
