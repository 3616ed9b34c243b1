"""What each GPU is: the inventory NVML offers, read once when the source opens.

Runs on the GPU's lane through :meth:`DeviceReader.call`, so a missing value is None and a
wedged call is bounded like any other. Units: W (NVML gives mW), MiB, MHz, degrees C.
"""

from __future__ import annotations

from watchdog.records import DeviceInfo
from watchdog.sources.nvml.binding import NvmlObject
from watchdog.sources.nvml.errors import text
from watchdog.sources.nvml.reader import DeviceReader, MiB


def _w(mw: NvmlObject) -> float | None:
    return None if mw is None else float(mw) / 1000.0


def _f(x: NvmlObject) -> float | None:
    return None if x is None else float(x)


def cuda_version(v: int | None) -> str | None:
    """``12040`` -> ``"12.4"`` (NVML encodes major*1000 + minor*10)."""
    if not v:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


def read_inventory(r: DeviceReader, uuid: str, driver: str | None,
                   cuda: str | None) -> DeviceInfo:
    """The :class:`DeviceInfo` of ``r``'s GPU (``uuid`` already read)."""
    nv = r.nv
    pci = r.call("pci_bus_id", "nvmlDeviceGetPciInfo")
    limits = r.call("power_limits", "nvmlDeviceGetPowerManagementLimitConstraints")
    mem = r.call("memory_total", "nvmlDeviceGetMemoryInfo")
    mig = r.call("mig_mode", "nvmlDeviceGetMigMode")
    thr = nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
    gen = r.call("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration")
    width = r.call("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth")
    return DeviceInfo(
        index=r.index,
        uuid=uuid,
        name=text(r.call("name", "nvmlDeviceGetName")),
        pci_bus_id=text(pci.busId) if pci is not None else None,
        serial=text(r.call("serial", "nvmlDeviceGetSerial")),
        vbios_version=text(r.call("vbios", "nvmlDeviceGetVbiosVersion")),
        driver_version=driver,
        cuda_version=cuda,
        power_limit_enforced_w=_w(r.call("power_limit", "nvmlDeviceGetEnforcedPowerLimit")),
        power_limit_default_w=_w(
            r.call("power_limit_default", "nvmlDeviceGetPowerManagementDefaultLimit")),
        power_limit_min_w=_w(limits[0]) if limits is not None else None,
        power_limit_max_w=_w(limits[1]) if limits is not None else None,
        clocks_max_sm_mhz=_f(r.call("clocks_max_sm", "nvmlDeviceGetMaxClockInfo",
                                    nv.NVML_CLOCK_SM)),
        clocks_max_mem_mhz=_f(r.call("clocks_max_mem", "nvmlDeviceGetMaxClockInfo",
                                     nv.NVML_CLOCK_MEM)),
        memory_total_mib=mem.total / MiB if mem is not None else None,
        temp_slowdown_c=_f(r.call("temp_slowdown", "nvmlDeviceGetTemperatureThreshold", thr[0])),
        temp_shutdown_c=_f(r.call("temp_shutdown", "nvmlDeviceGetTemperatureThreshold", thr[1])),
        temp_max_operating_c=_f(r.call("temp_max_operating", "nvmlDeviceGetTemperatureThreshold",
                                       nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)),
        mig_mode=bool(mig[0]) if mig is not None else None,
        pcie_max_gen=int(gen) if gen is not None else None,
        pcie_max_width=int(width) if width is not None else None,
        gpm_supported=r.gpm is not None,
    )
