"""NvmlSource against a real GPU and driver; skipped where libnvidia-ml.so.1 cannot load."""

from __future__ import annotations

import ctypes
import time

import pytest

from watchdog import catalogue
from watchdog.sources.nvml import NvmlSource


def _have_nvml() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _have_nvml(), reason="libnvidia-ml.so.1 not loadable")]


@pytest.fixture
def real():
    from watchdog.testing import fakenvml

    fakenvml.uninstall()  # make sure no fake is left in the binding
    s = NvmlSource(call_timeout=5.0)
    yield s
    s.close()


def test_real_inventory(real):
    devs = real.devices()
    assert devs, "NVML enumerates no GPU"
    for d in devs:
        assert d.uuid.startswith(("GPU-", "MIG-"))
        assert d.name and d.driver_version and d.cuda_version
        assert d.memory_total_mib and d.memory_total_mib > 1024
        assert d.power_limit_enforced_w is None or 10 < d.power_limit_enforced_w < 2000


def test_real_samples_are_plausible(real):
    t0 = time.time()
    first = real.sample(t0)
    second = real.sample(t0 + 1.0)
    assert len(first) == len(real.devices())
    for s in second:
        assert not s.lost, s.errors
        assert set(s.values) == set(catalogue.SOURCE_NAMES)  # the agent adds nvml.errors
        v = s.values
        assert 0 <= v["utilization.gpu"] <= 100
        # an idle H100 with no process reports 0 MiB used (seen on a real one)
        assert 0 <= v["memory.used"] <= v["memory.total"]
        assert v["power.draw"] is None or 1 < v["power.draw"] < 2000
        assert 10 < v["temperature.gpu"] < 110
        assert v["clocks.sm"] is not None and v["clocks_event_reasons.active"] is not None
        if real.devices()[s.index].gpm_supported:
            assert v["gpm.sm_activity"] is not None and 0 <= v["gpm.sm_activity"] <= 100


def test_the_daemon_watches_the_real_gpus(tmp_path):
    """`watchdog run --source nvml` on the real driver: it samples every GPU without NVML
    errors, writes its status, and stops cleanly."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "STATE_DIRECTORY": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "watchdog", "run", "--source", "nvml",
                        "--duration", "5s"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    s = subprocess.run([sys.executable, "-m", "watchdog", "status", "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    doc = json.loads(s.stdout)
    assert doc["source_state"] == "ok" and doc["gpus"] and doc["ticks"] >= 4
    assert doc["nvml_errors"]["total"] == 0
