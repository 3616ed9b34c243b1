"""The real-runs gate: other people's real jobs replayed as ``bench/real_runs.py`` does.

Every run of ``../shared/real-wandb``, ``real-telemetry`` and ``real-gpu`` is replayed
with the rules alone and with ``--model auto``, and scored against
``bench/real_runs_labels.yaml`` (written before the detector was tuned on the runs). On the
tuned runs and on the third held out of all tuning alike: no false critical page, at most
one false warning over all of them, and every labelled incident found (the out-of-memory
run warned before it died, the real H100 and H200 hangs paged). Skipped when ``../shared``
is absent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("WATCHDOG_SHARED", REPO.parent / "shared"))
TOTAL = re.compile(
    r"^(?P<name>tuned|held out|all)\s+(?P<runs>\d+) runs\s+(?P<hours>[\d.]+) busy GPU-h\s+"
    r"false critical\s+(?P<crit>\d+) .*false warning\s+(?P<warn>\d+) .*"
    r"labelled found (?P<found>\d+)/(?P<expected>\d+)$", re.M)
MIN_BUSY_H = {"tuned": 100.0, "held out": 30.0, "all": 150.0}  # the corpus as labelled
MAX_FALSE_WARNINGS = 1  # in all: the gate (rules and model together)


def _totals(model: str) -> tuple[dict[str, dict[str, float]], subprocess.CompletedProcess[str]]:
    if not (SHARED / "real-wandb").is_dir():
        pytest.skip(f"real runs not found at {SHARED}")
    done = subprocess.run([sys.executable, str(REPO / "bench" / "real_runs.py"),
                           "--model", model], capture_output=True, text=True, cwd=REPO,
                          timeout=1800, check=False)
    totals = {m["name"]: {k: float(v) for k, v in m.groupdict().items() if k != "name"}
              for m in TOTAL.finditer(done.stdout)}
    return totals, done


@pytest.mark.slow
@pytest.mark.real_telemetry
@pytest.mark.parametrize("model", ["off", "auto"])
def test_real_runs_raise_no_false_page_and_find_every_labelled_incident(model: str) -> None:
    totals, done = _totals(model)
    assert set(totals) == {"tuned", "held out", "all"}, done.stdout + done.stderr
    for name, t in totals.items():
        assert t["hours"] >= MIN_BUSY_H[name], (name, t)  # every run was read
        assert t["crit"] == 0, (name, done.stdout)
        assert t["found"] == t["expected"], (name, done.stdout)
    assert totals["tuned"]["expected"] >= 5  # the OOM warning and the real hangs
    assert totals["all"]["warn"] <= MAX_FALSE_WARNINGS, done.stdout
    assert "MISSED" not in done.stdout and "unreadable" not in done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
