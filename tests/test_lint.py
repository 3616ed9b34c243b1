"""The code base stays ruff-clean (the house style is enforced by the test suite)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    res = subprocess.run([ruff, "check", "--no-cache", "."],
                         cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
