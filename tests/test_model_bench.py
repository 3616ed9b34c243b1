"""``bench/model_bench.py --healthy-hours``: the long healthy run streams each node after
its own fit and prints the rate with its 95 % upper bound; bad values are one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "bench" / "model_bench.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=REPO)


@pytest.mark.slow
def test_healthy_hours_streams_own_models_and_bounds_the_rate() -> None:
    r = bench("--only", "healthy", "--quick", "--healthy-hours", "16", "--healthy-seeds", "1")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "2 nodes x 8 GPUs x 1.0 h scored after a 3 h fit each" in out
    nodes = re.findall(r"sim:healthy seed 1: (\d+) anomalies in (\d+) GPU-hours", out)
    assert [h for _, h in nodes] == ["8", "8"]  # both GPU models, 1 h x 8 GPUs each
    m = re.search(r"simulated healthy: (\d+) in ([\d,]+) GPU-hours .*95 % upper bound "
                  r"([\d.]+) per 1,000 GPU-hours; goal <= 0.01: (\w+ ?\w*)", out)
    assert m, out
    n, hours = int(m.group(1)), float(m.group(2).replace(",", ""))
    if n == 0:  # the rule of three
        assert abs(float(m.group(3)) - 3000 / hours) < 0.01 * 3000 / hours + 0.01
    assert m.group(4) == "NOT DEMONSTRATED"


def test_bad_healthy_hours_is_one_line() -> None:
    r = bench("--only", "healthy", "--healthy-hours", "-5")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "model_bench: --healthy-hours and --healthy-seeds must be positive"]


def test_bad_fit_hours_or_first_seed_is_one_line() -> None:
    for args in (("--healthy-fit-hours", "0.5"), ("--first-seed", "-1")):
        r = bench("--only", "healthy", *args)
        assert r.returncode == 2, args
        assert r.stderr.strip().splitlines() == [
            "model_bench: --healthy-fit-hours must be at least 1 (the daemon's minimum "
            "baseline) and --first-seed at least 0"]
