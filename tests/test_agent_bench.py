"""The live-cost bench (``bench/agent_bench.py``) keeps working, and the fake's GPU count.

No timing assertions: the bench's own run is the budget check. Here it must run the real
agent and gpustat on the fake and report sane, positive figures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.testing import fakenvml

ROOT = Path(__file__).resolve().parent.parent


def test_healthy_takes_a_gpu_count_with_unique_bus_ids() -> None:
    sc = fakenvml.get("healthy:64")
    assert len(sc.gpus) == 64
    assert len({g.pci_bus_id for g in sc.gpus}) == 64
    assert len({g.uuid for g in sc.gpus}) == 64
    assert fakenvml.get("healthy").gpus == fakenvml.get("healthy:8").gpus


@pytest.mark.parametrize("name", ["healthy:0", "healthy:x", "not_supported:4", "gpu_lost:2"])
def test_bad_gpu_count_is_refused(name: str) -> None:
    with pytest.raises(KeyError, match="unknown fake NVML scenario"):
        fakenvml.get(name)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_agent_bench_quick_runs_and_prints_a_verdict() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "agent_bench.py"), "--quick"],
                         capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr  # 1 = over budget, still a measurement
    lines = out.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["GPUs", "agent"]
    gpus, agent, gpustat, ratio, rss, verdict = lines[1].split()
    assert gpus == "8"
    assert float(agent) > 0 and float(gpustat) > 0 and float(rss) > 10
    assert abs(float(ratio) - float(agent) / float(gpustat)) < 0.02
    assert verdict == ("PASS" if out.returncode == 0 else "FAIL")
