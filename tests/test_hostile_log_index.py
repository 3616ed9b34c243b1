"""Hostile logs: a GPU index is 0 to 1023, or the log is refused with one line.

GPU indices of 1e30 and 2e30 in a CSV or ``nvidia-smi dmon`` log both wrapped to
INT64_MIN and merged into one GPU (pages read ``GPU -9223372036854775808``) while a numpy
warning leaked to the terminal; negative indices passed. Now an index is a whole number in
0..1023 (``watchdog.sources.replay.convert.MAX_GPU_INDEX`` says why), checked before any
cast: anything else is one ``FILE:LINE`` error, exit 2, and nothing else on stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_helpers import run

# end to end: every case runs the real command as a subprocess (the whole suite and
# bench/hostile.py run them; `pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

CSV_HEAD = "timestamp, index, power.draw [W], utilization.gpu [%]\n"
DMON_HEAD = "# gpu   pwr  gtemp    sm\n# Idx     W      C     %\n"


def _csv(tmp: Path, *indices: str) -> Path:
    f = tmp / "log.csv"
    f.write_text(CSV_HEAD + "".join(f"2024/01/01 00:00:0{t}.000, {i}, 100, 50\n"
                                    for t in range(3) for i in indices))
    return f


def _dmon(tmp: Path, *indices: str) -> Path:
    f = tmp / "dmon.log"
    f.write_text(DMON_HEAD + "".join(f"  {i}   100     40    50\n" for _ in range(3)
                                     for i in indices))
    return f


CASES = {
    "csv 1e30 and 2e30": (_csv, ("1e30", "2e30"), "GPU index 1e+30 is out of range 0-1023"),
    "csv -1": (_csv, ("0", "-1"), "GPU index -1 is out of range 0-1023"),
    "csv 1024": (_csv, ("0", "1024"), "GPU index 1024 is out of range 0-1023"),
    "csv 1.5": (_csv, ("1.5",), "GPU index 1.5 is not a whole number"),
    "dmon 1e30": (_dmon, ("0", "1e30"), "GPU index 1e+30 is out of range 0-1023"),
    "dmon -3": (_dmon, ("-3",), "GPU index -3 is out of range 0-1023"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_gpu_index_out_of_range_is_one_line(tmp_path: Path, case: str) -> None:
    """input: a log's GPU index out of 0-1023 is one FILE:LINE line, no numpy warning"""
    make, indices, words = CASES[case]
    f = make(tmp_path, *indices)
    o = run(["replay", str(f)], timeout=60)
    assert not o.timed_out and o.rc == 2, (o.rc, o.stderr[-1000:])
    lines = [x for x in o.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"watchdog: error: {f}:"), o.stderr
    assert words in lines[0], lines[0]
    assert "-9223372036854775808" not in o.stdout + o.stderr


def test_the_highest_index_still_replays(tmp_path: Path) -> None:
    """input: indices 0 and 1023 are two GPUs, replayed as such"""
    o = run(["replay", "--json", str(_csv(tmp_path, "0", "1023"))], timeout=60)
    assert o.rc == 0, o.stderr[-1000:]
    (src,) = json.loads(o.stdout)["sources"]
    assert src["gpus"] == 2
    assert "Warning" not in o.stderr
