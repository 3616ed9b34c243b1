"""The fake NVML through nvidia-ml-py's real binding code: scenarios, errors, ctypes filling."""

from __future__ import annotations

import subprocess
import sys
import threading

import pynvml as N
import pytest

from watchdog.testing import fakenvml
from watchdog.testing.fakenvml.__main__ import main as runner_main
from watchdog.testing.fakenvml.scenarios import GpuSpec, Scenario


@pytest.fixture
def install(clock):
    fakes = []

    def _install(scenario):
        fakes.append(fakenvml.install(scenario, time_fn=clock.now))
        return fakes[-1]

    yield _install
    fakenvml.uninstall()


def test_healthy_node_inventory_through_binding(install):
    install("healthy")
    N.nvmlInit()
    assert N.nvmlDeviceGetCount() == 8
    h = N.nvmlDeviceGetHandleByIndex(3)
    assert N.nvmlDeviceGetIndex(h) == 3
    assert N.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert N.nvmlDeviceGetUUID(h).startswith("GPU-4f1c0003")
    assert N.nvmlDeviceGetPciInfo(h).busId == "00000000:5D:00.0"
    assert N.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000
    assert N.nvmlSystemGetDriverVersion() == "550.90.07"
    assert N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
    N.nvmlShutdown()


def test_readings_follow_injected_time(install, clock):
    install("healthy")
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetUtilizationRates(h).gpu == 100
    busy = N.nvmlDeviceGetPowerUsage(h)
    e0 = N.nvmlDeviceGetTotalEnergyConsumption(h)
    clock.advance(57.0)  # GPU 0 is in its checkpoint dip at 56-60 s of each minute
    assert N.nvmlDeviceGetUtilizationRates(h).gpu == 0
    assert N.nvmlDeviceGetPowerUsage(h) < busy / 3
    assert N.nvmlDeviceGetTotalEnergyConsumption(h) > e0


def test_memory_v2_excludes_reserved(install):
    install("healthy")
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    v1 = N.nvmlDeviceGetMemoryInfo(h)
    v2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    assert v2.reserved > 0
    assert v1.used - v2.used == v2.reserved


def test_field_values_fill_each_status(install):
    install("not_supported")
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    fv = N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, N.NVML_FI_DEV_MEMORY_TEMP])
    assert fv[0].nvmlReturn == N.NVML_SUCCESS and fv[0].value.ullVal == 0
    assert fv[1].nvmlReturn == N.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetFanSpeed(h)


def test_process_list_two_call_protocol(install):
    install("healthy")
    N.nvmlInit()
    procs = N.nvmlDeviceGetComputeRunningProcesses(N.nvmlDeviceGetHandleByIndex(2))
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(41002, 72_000 * 1024 * 1024)]


def test_gpu_lost_after_scripted_time(install, clock):
    install("gpu_lost")
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(3)
    assert N.nvmlDeviceGetPowerUsage(h) > 0
    clock.advance(31.0)
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlDeviceGetPowerUsage(h)
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlDeviceGetHandleByIndex(3)
    assert N.nvmlDeviceGetPowerUsage(N.nvmlDeviceGetHandleByIndex(2)) > 0


def test_no_library_makes_binding_loader_fail(install):
    install("no_library")
    with pytest.raises(N.NVMLError_LibraryNotFound):
        N.nvmlInit()


def test_init_failure(install):
    install("init_failure")
    with pytest.raises(N.NVMLError_DriverNotLoaded):
        N.nvmlInit()


def test_calls_before_init_are_uninitialized(install):
    install("healthy")
    with pytest.raises(N.NVMLError_Uninitialized):
        N.nvmlDeviceGetCount()


def test_missing_function_is_function_not_found(install):
    install("bytes_strings")
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(N.NVMLError_FunctionNotFound):
        N.nvmlDeviceGetCurrentClocksEventReasons(h)
    assert N.nvmlDeviceGetCurrentClocksThrottleReasons(h) & 0x10


def test_blocking_call_blocks_until_released(install):
    fake = install("blocking_call")
    N.nvmlInit()
    h2 = N.nvmlDeviceGetHandleByIndex(2)
    assert N.nvmlDeviceGetPowerUsage(N.nvmlDeviceGetHandleByIndex(1)) > 0  # other GPUs fine
    result = []
    t = threading.Thread(target=lambda: result.append(N.nvmlDeviceGetPowerUsage(h2)))
    t.start()
    assert fake.blocked.wait(5)
    assert result == [] and t.is_alive()
    fake.release()
    t.join(5)
    assert result and result[0] > 0


def test_event_set_delivers_scripted_xids(install, clock):
    install("xid")
    N.nvmlInit()
    es = N.nvmlEventSetCreate()
    for i in range(8):
        N.nvmlDeviceRegisterEvents(N.nvmlDeviceGetHandleByIndex(i),
                                   N.nvmlEventTypeXidCriticalError, es)
    got = []
    for _ in range(2):
        d = N.nvmlEventSetWait_v2(es, 0)
        got.append((N.nvmlDeviceGetIndex(d.device), d.eventData))
    assert sorted(got) == [(1, 79), (4, 48)]
    with pytest.raises(N.NVMLError_Timeout):
        N.nvmlEventSetWait_v2(es, 0)  # XID 13 is due at t=5 s
    clock.advance(5)
    d = N.nvmlEventSetWait_v2(es, 0)
    assert (N.nvmlDeviceGetIndex(d.device), d.eventData) == (6, 13)
    N.nvmlEventSetFree(es)


def test_custom_scenario_dataclass(install):
    sc = Scenario("one", (GpuSpec(name="Custom GPU", unsupported=frozenset(
        {"nvmlDeviceGetPowerUsage"})),))
    install(sc)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetName(h) == "Custom GPU"
    with pytest.raises(N.NVMLError_NotSupported):
        N.nvmlDeviceGetPowerUsage(h)


def test_uninstall_restores_binding(install):
    before = N.nvmlLib
    install("healthy")
    assert N.nvmlLib is not before
    fakenvml.uninstall()
    assert N.nvmlLib is before


def test_runner_rejects_unknown_scenario(capsys):
    assert runner_main(["nonesuch", "--", "watchdog", "--version"]) == 2
    assert "unknown fake NVML scenario" in capsys.readouterr().err


def test_runner_runs_gpustat_on_fake():
    out = subprocess.run([sys.executable, "-m", "watchdog.testing.fakenvml", "healthy", "--",
                          "gpustat", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json

    doc = json.loads(out.stdout)
    assert len(doc["gpus"]) == 8
    assert doc["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert doc["gpus"][0]["enforced.power.limit"] == 700


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "nvml"


def test_yaml_scenario(install, clock):
    install(str(FIXTURES / "mixed_node.yaml"))
    N.nvmlInit()
    assert N.nvmlSystemGetDriverVersion() == "535.161.08"
    h1 = N.nvmlDeviceGetHandleByIndex(1)
    assert N.nvmlDeviceGetName(h1) == "Tesla V100-PCIE-16GB"
    assert N.nvmlDeviceGetEnforcedPowerLimit(h1) == 250_000
    assert N.nvmlDeviceGetFieldValues(h1, [83])[0].nvmlReturn == N.NVML_ERROR_NOT_SUPPORTED
    clock.advance(11)
    with pytest.raises(N.NVMLError_GpuIsLost):
        N.nvmlDeviceGetPowerUsage(h1)


def test_yaml_scenario_rejects_unknown_keys():
    from watchdog.testing.fakenvml import from_dict

    with pytest.raises(TypeError):
        from_dict({"name": "x", "gpus": [{"nmae": "typo"}]})
