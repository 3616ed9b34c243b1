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
@pytest.mark.slow
def test_agent_bench_quick_runs_and_prints_a_verdict() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "agent_bench.py"), "--quick"],
                         capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr  # 1 = over budget, still a measurement
    lines = out.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["GPUs", "agent"]
    gpus, agent, gpustat, ratio, rss, verdict, label = lines[1].split()
    assert (gpus, label) == ("8", "rules")
    assert float(agent) > 0 and float(gpustat) > 0 and float(rss) > 10
    assert abs(float(ratio) - float(agent) / float(gpustat)) < 0.02
    assert verdict == ("PASS" if out.returncode == 0 else "FAIL")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.slow
def test_agent_bench_measures_the_agent_again_with_a_model(tmp_path: Path) -> None:
    """``--model FILE``: a second row, "full", for the agent scoring with a trained model
    and alerting on (the budget counts both); the bench refuses to report it unless the
    agent loaded the model."""
    model = tmp_path / "m.wdm"
    subprocess.run([sys.executable, "-m", "watchdog", "train", "--source", "sim:healthy",
                    "--duration", "2h", "--output", str(model)], check=True,
                   capture_output=True, timeout=120, cwd=ROOT)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "agent_bench.py"), "--quick",
                          "--model", str(model)],
                         capture_output=True, text=True, timeout=150, check=False, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr
    rows = [line.split() for line in out.stdout.strip().splitlines()[1:]]
    assert [(r[0], r[6]) for r in rows] == [("8", "rules"), ("8", "full")]
    assert float(rows[1][1]) > 0 and float(rows[1][4]) > 10
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "agent_bench.py"), "--quick",
                          "--model", str(tmp_path / "missing.wdm")],
                         capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert bad.returncode == 2 and "no such file" in bad.stderr


@pytest.mark.slow
def test_steady_state_bench_reports_rss_every_five_data_minutes() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "steady_state.py"), "--gpus",
                          "2", "--minutes", "10", "--interval", "5"],
                         capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr  # 1 = over budget, still a measurement
    rows = [line.split() for line in out.stdout.splitlines()[1:-1]]
    assert [(r[0], r[1]) for r in rows] == [("2", "5"), ("2", "10")], out.stdout
    assert all(float(r[2]) > 0 and float(r[4]) > 0 for r in rows)
    assert out.stdout.splitlines()[-1].startswith("peak RSS ")
