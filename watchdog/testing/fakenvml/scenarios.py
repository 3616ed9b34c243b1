"""Scripted scenarios for the fake NVML: what each GPU is and how its readings move in time.

A :class:`Scenario` is plain data (YAML-able with ``dataclasses.asdict``): a list of
:class:`GpuSpec` plus node-wide behaviour (missing library, failing ``nvmlInit``, a call that
blocks, XID events). Per-time readings come from :func:`readings`, a deterministic function
of the GPU spec and the scenario time ``t`` (seconds since the fake was installed, taken
from an injectable time function), so tests with a manual clock see exact values.

Units follow NVML, not the catalogue (the point is to exercise our conversions): power in
mW, memory in bytes, energy in mJ, violation time in ns, clocks in MHz.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

MiB = 1024 * 1024


@dataclass(frozen=True)
class GpuSpec:
    """One fake GPU. ``unsupported`` lists NVML function names (``nvmlDeviceGetFanSpeed``)
    and field ids (``"FI:82"``) answering NOT_SUPPORTED; ``lost_after`` (s) makes every call
    for this GPU answer GPU_IS_LOST from then on."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:18:00.0"
    serial: str = "1650123000000"
    vbios: str = "96.00.74.00.01"
    memory_total_mib: int = 81559
    memory_reserved_mib: int = 527
    power_limit_mw: int = 700_000
    power_min_mw: int = 200_000
    power_max_mw: int = 700_000
    idle_power_mw: int = 72_000
    busy_power_mw: int = 690_000
    max_sm_mhz: int = 1980
    max_mem_mhz: int = 2619
    temp_slowdown: int = 87
    temp_shutdown: int = 92
    temp_gpu_max: int = 85
    pcie_max_gen: int = 5
    pcie_max_width: int = 16
    gpm: bool = True
    nvlink: bool = True
    fan: bool = False
    processes: tuple[tuple[int, int], ...] = ()  # (pid, used MiB)
    unsupported: frozenset[str] = frozenset()
    lost_after: float | None = None


@dataclass(frozen=True)
class Blocking:
    """``function`` called for GPU ``gpu`` (None = any) blocks until the fake is released."""

    function: str
    gpu: int | None = None


@dataclass(frozen=True)
class Scenario:
    """A whole fake node. ``missing`` lists functions the library does not export (older
    drivers); ``xids`` are ``(t, gpu index, code)`` delivered by the event set from time t."""

    name: str
    gpus: tuple[GpuSpec, ...]
    driver_version: str = "550.90.07"
    cuda_version: int = 12040
    library_missing: bool = False
    init_error: int | None = None
    missing: frozenset[str] = frozenset()
    blocking: Blocking | None = None
    xids: tuple[tuple[float, int, int], ...] = ()
    events_supported: bool = True


def h100_node(n: int = 8) -> tuple[GpuSpec, ...]:
    """``n`` H100 SXM 80GB with realistic inventory, one training process each."""
    buses = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
    return tuple(
        GpuSpec(uuid=f"GPU-4f1c{i:04x}-8a0e-5d2b-9c33-1a2b3c4d5e{i:02x}",
                pci_bus_id=f"{i // 8:08X}:{buses[i % 8].upper()}:00.0",
                serial=f"16501230{i:05d}", processes=((41000 + i, 72_000),))
        for i in range(n))


A100_PCIE = GpuSpec(
    name="NVIDIA A100-PCIE-40GB", memory_total_mib=40960, memory_reserved_mib=0,
    power_limit_mw=250_000, power_min_mw=150_000, power_max_mw=250_000,
    idle_power_mw=35_000, busy_power_mw=240_000, max_sm_mhz=1410, max_mem_mhz=1215,
    temp_slowdown=92, temp_shutdown=95, temp_gpu_max=88, pcie_max_gen=4, gpm=False,
    nvlink=False)

# What a 450/470-era V100/T4 driver stack answers NOT_SUPPORTED to (passive boards, no GPM).
_OLD_UNSUPPORTED = frozenset({
    "nvmlDeviceGetFanSpeed", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetRemappedRows",
    "nvmlGpmQueryDeviceSupport", "nvmlDeviceGetMemoryInfo_v2", "FI:82", "FI:83", "FI:142",
    "FI:143", "FI:144", "FI:145", "FI:38", "FI:45", "FI:52", "FI:59", "nvmlDeviceGetMigMode",
    "nvmlDeviceGetViolationStatus", "nvmlDeviceGetPcieThroughput"})


def _scenario(name: str) -> Scenario:
    name, _, count = name.partition(":")
    if count:
        if not count.isdigit() or not 1 <= int(count) <= 1024:
            raise KeyError(f"{name}:{count}")
        if name not in _SIZED:
            raise KeyError(f"{name}:{count}")
    node = h100_node(int(count) if count else 8)
    if name == "healthy":
        return Scenario("healthy", node)
    if name == "not_supported":
        old = tuple(
            replace(A100_PCIE, name="Tesla V100-PCIE-16GB", uuid=f"GPU-0ld{i:05d}-aaaa-bbbb",
                    pci_bus_id=f"00000000:{0x3b + i:02X}:00.0", memory_total_mib=16160,
                    max_sm_mhz=1380, max_mem_mhz=877, pcie_max_gen=3,
                    unsupported=_OLD_UNSUPPORTED, processes=())
            for i in range(2))
        return Scenario("not_supported", old, driver_version="470.239.06", cuda_version=11040)
    if name == "gpu_lost":
        gpus = list(node)
        gpus[3] = replace(gpus[3], lost_after=30.0)
        return Scenario("gpu_lost", tuple(gpus))
    if name == "no_library":
        return Scenario("no_library", node, library_missing=True)
    if name == "init_failure":
        return Scenario("init_failure", node, init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    if name == "blocking_call":
        return Scenario("blocking_call", node, blocking=Blocking("nvmlDeviceGetPowerUsage", 2))
    if name == "bytes_strings":
        # See watchdog.testing.fakenvml.library.FakeNvml for how bytes are reached.
        old = tuple(replace(g, gpm=False) for g in node[:2])
        return Scenario("bytes_strings", old, driver_version="470.82.01", cuda_version=11040,
                        missing=frozenset({
                            "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetCurrentClocksEventReasons",
                            "nvmlDeviceGetComputeRunningProcesses_v3",
                            "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlGpmQueryDeviceSupport",
                            "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMetricsGet",
                            "nvmlGpmSampleFree"}))
    if name == "xid":
        return Scenario("xid", node, xids=((0.0, 1, 79), (0.0, 4, 48), (5.0, 6, 13)))
    if name == "xid_kmsg":
        return Scenario("xid_kmsg", node, events_supported=False)
    raise KeyError(name)


# Scenarios built on the 8-GPU H100 node that take a GPU count, ``healthy:64`` (benchmarks).
_SIZED = frozenset({"healthy", "xid_kmsg"})

SCENARIOS: tuple[str, ...] = ("healthy", "not_supported", "gpu_lost", "no_library",
                              "init_failure", "blocking_call", "bytes_strings", "xid", "xid_kmsg")


def get(name: str) -> Scenario:
    """The named scenario; ``KeyError`` lists the known names.

    ``NAME:N`` gives an ``N``-GPU node (1..1024) for ``healthy`` and ``xid_kmsg``,
    e.g. ``healthy:64``.
    """
    try:
        return _scenario(name)
    except KeyError:
        raise KeyError(f"unknown fake NVML scenario {name!r}; known: {', '.join(SCENARIOS)}") \
            from None


def readings(gpu: GpuSpec, index: int, t: float) -> dict[str, float]:
    """Readings of GPU ``index`` at scenario time ``t`` (s), in NVML units.

    A training job: 100 % utilization, power alternating between two busy phases (as real
    H100s do), a 4 s dip to 0 % every 60 s (a checkpoint), SW power cap and sync boost
    bits while busy; counters grow with time. GPUs differ by a small per-index offset.
    """
    phase = (t + 7 * index) % 60.0
    dip = phase >= 56.0
    second_phase = (t // 120) % 2 == 1
    busy = gpu.busy_power_mw if not second_phase else int(gpu.busy_power_mw * 0.57)
    power = gpu.idle_power_mw + 40_000 if dip else busy - 3_000 * index
    util = 0.0 if dip else 100.0
    tensor = 0.0 if dip else 62.0 + index
    sm_mhz = float(gpu.max_sm_mhz if not dip else round(0.886 * gpu.max_sm_mhz))
    return {
        "util_gpu": util, "util_mem": 0.0 if dip else 41.0 + index,
        "mem_used_mib": min(72_000.0 + 100 * index, 0.9 * gpu.memory_total_mib),
        "power_mw": float(power),
        "temp_gpu": 44.0 + 0.04 * (power / 1000.0) + index % 3,
        "temp_mem": 52.0 + index % 4,
        "sm_mhz": sm_mhz, "mem_mhz": float(gpu.max_mem_mhz), "gr_mhz": sm_mhz,
        "reasons": 0x1 if dip else (0x4 | 0x10 if power > 0.9 * gpu.power_limit_mw else 0x10),
        "pstate": 0.0,
        "energy_mj": 5.0e8 + t * (gpu.busy_power_mw * 0.8),
        "viol_power_ns": 3.0e9 * index + t * 2.0e8, "viol_thermal_ns": 0.0,
        "viol_sync_ns": t * 5.0e8, "viol_reliability_ns": 0.0,
        "ecc_sbe_vol": 0.0, "ecc_dbe_vol": 0.0, "ecc_dbe_agg": 0.0,
        "pcie_gen": 5.0 if not dip else 1.0, "pcie_width": 16.0,
        "pcie_replay": 0.0, "pcie_tx_kbs": 2.0e5 + 1.0e3 * index, "pcie_rx_kbs": 3.5e5,
        "nvlink_crc_flit": 0.0, "nvlink_crc_data": 0.0, "nvlink_replay": 0.0,
        "nvlink_recovery": 0.0,
        "sm_activity": 0.0 if dip else 88.0 + 0.5 * math.sin(t),
        "sm_occupancy": 0.0 if dip else 34.0, "tensor_activity": tensor,
        "dram_bw": 0.0 if dip else 55.0,
        "fan": 35.0,
    }


def from_dict(d: dict) -> Scenario:
    """A :class:`Scenario` from plain data (e.g. YAML): ``{name, gpus: [{...}], ...}``.

    Unknown keys are errors (a typo must not silently give a healthy GPU).
    """
    d = dict(d)
    gpus = []
    for g in d.pop("gpus", []) or []:
        g = dict(g)
        g["unsupported"] = frozenset(g.get("unsupported", ()))
        g["processes"] = tuple(tuple(p) for p in g.get("processes", ()))
        gpus.append(GpuSpec(**g))
    if "blocking" in d and d["blocking"] is not None:
        d["blocking"] = Blocking(**d["blocking"])
    d["missing"] = frozenset(d.get("missing", ()))
    d["xids"] = tuple(tuple(x) for x in d.get("xids", ()))
    return Scenario(gpus=tuple(gpus), **d)


def load(path: str) -> Scenario:
    """Read a scenario from a YAML file (see ``tests/fixtures/nvml/mixed_node.yaml``),
    within the bounds of :mod:`watchdog.yamlsafe` (size, aliases, depth); a file that is
    not a mapping is an :class:`~watchdog.errors.InputError` naming it."""
    from watchdog import yamlsafe
    from watchdog.errors import InputError

    _node, data = yamlsafe.load_file(path, "fake NVML scenario")
    if not isinstance(data, dict):
        raise InputError(f"{path}: a fake NVML scenario is a mapping (name, gpus, …)")
    return from_dict(data)
