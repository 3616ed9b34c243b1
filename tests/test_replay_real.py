"""Every real log in ../shared/real-telemetry loads (skipped when the folder is absent).

Custom-column logs are read through a mapping, as a user would with ``--map``:

* karpathy__nanoGPT: ``timestamp,gpu_index,temperature_C,utilization_gpu_percent,power_W``.
* Leo-hxu: the author's re-export (``gpu_id,power_w,sm_clock_mhz,…``).
* ciscoaiteam: whole-node BMC power only. Each node's column is mapped as the
  ``power.draw`` of one pseudo-GPU (one load per node); its 0 W collector dropouts are
  read as missing, not as 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from watchdog.sources.replay import open_log
from watchdog.testing.real_telemetry import NANOGPT, READINGS, data_files

pytestmark = pytest.mark.real_telemetry

MAPPINGS = {folder: ways[0][0] for folder, ways in READINGS.items()}


def test_every_real_log_loads(real_telemetry: Path) -> None:
    files = data_files(real_telemetry)
    assert len(files) >= 13
    for path in files:
        rec = open_log(path, mapping=MAPPINGS.get(path.parent.name))
        f = rec.frame
        lines = path.read_bytes().count(b"\n")
        assert len(f) >= lines - 1, path  # every complete data line became a row
        assert f["ts"].is_monotonic_increasing, path
        assert f["ts"].iloc[0] > 1.7e9, path  # 2023 or later: times parsed, not invented
        assert len(rec.metrics) >= 1 and not f[rec.metrics].isna().all().all(), path


def test_real_gpu_counts_and_values(real_telemetry: Path) -> None:
    rec = open_log(real_telemetry / "karpathy__nanoGPT" / "gpu_metrics@b443a1c3.csv",
                   mapping=NANOGPT)
    assert len(rec.frame) == 36112 and len(rec.devices()) == 8
    assert rec.frame["power.draw"].max() == pytest.approx(697, abs=1)
    dash = open_log(next((real_telemetry / "DarshEllisd__GPU-Power-Capping-").glob("clk525*")))
    assert {"clocks.sm", "pstate", "pcie.link.gen.current"} <= set(dash.metrics)
    assert dash.frame["clocks.sm"].iloc[-1] == 525.0


def test_truncated_real_log(real_telemetry: Path) -> None:
    rec = open_log(real_telemetry / "fridanl__thesis-mas" / "nvidia-smi.log")
    assert len(rec.frame) == 104
    assert any("truncated last line" in w for w in rec.warnings)
    assert rec.frame["memory.used"].max() == 90098.0
    assert rec.devices()[0].name == "NVIDIA H100 NVL"


def test_node_power_log_zero_is_missing(real_telemetry: Path) -> None:
    path = real_telemetry / "ciscoaiteam__hpc-mlperf-benchmarks" / "power_log.csv"
    n1 = open_log(path, mapping={"power.draw": "n1_watts"}, host="node1")
    n2 = open_log(path, mapping={"power.draw": "n2_watts"}, host="node2")
    assert n1.frame["power.draw"].isna().sum() == 17
    assert n2.frame["power.draw"].isna().sum() == 16
    assert not (n1.frame["power.draw"] == 0).any()
    assert math.isclose(n2.frame["power.draw"].max(), 7782.0)
    assert n1.frame["uuid"].iloc[0] == "node1/gpu0"
