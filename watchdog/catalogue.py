"""The metric catalogue: every per-sample value a source may report.

A metric's name is the ``nvidia-smi --query-gpu`` field name where one exists (so logs
map onto it without translation), otherwise a dotted name in the same style. Each entry
says its unit, whether it is a gauge, a monotonically growing counter, a bitmask of
flags or a small enum, and where NVML gets it. Values are floats in the catalogue's unit;
a value a GPU cannot report is ``None`` (NaN in columnar data), never 0.

This module is imported on the ``watchdog check`` start-up path: keep it free of heavy
imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter", "flags", "enum"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One catalogue entry.

    ``aliases`` are other spellings seen in real logs (older ``nvidia-smi`` field names,
    ``dmon`` columns); parsers map them onto ``name``.
    """

    name: str
    unit: str
    kind: Kind
    nvml: str
    help: str
    aliases: tuple[str, ...] = ()


_M = Metric

METRICS: tuple[Metric, ...] = (
    # --- utilisation and memory -------------------------------------------------------
    _M("utilization.gpu", "%", "gauge", "nvmlDeviceGetUtilizationRates().gpu",
       "Percent of the sample period in which a kernel was running (not how hard the GPU worked).",
       ("utilization.gpu [%]",)),
    _M("utilization.memory", "%", "gauge", "nvmlDeviceGetUtilizationRates().memory",
       "Percent of the sample period in which device memory was being read or written.",
       ("utilization.memory [%]",)),
    _M("memory.used", "MiB", "gauge", "nvmlDeviceGetMemoryInfo(version=2).used",
       "Framebuffer memory in use (v2 API excludes driver-reserved memory where present).",
       ("memory.used [MiB]",)),
    _M("processes.serving", "bool", "gauge",
       "nvmlDeviceGetComputeRunningProcesses + /proc/<pid>/cmdline (watchdog.serving)",
       "1 if an inference server (vLLM, Triton, TGI, SGLang, Ollama...) holds this GPU, "
       "0 if its processes are known and none serves.", ()),
    _M("memory.total", "MiB", "gauge", "nvmlDeviceGetMemoryInfo(version=2).total",
       "Framebuffer memory size.", ("memory.total [MiB]",)),
    # --- power and energy -------------------------------------------------------------
    _M("power.draw", "W", "gauge", "nvmlDeviceGetPowerUsage (mW) or NVML_FI_DEV_POWER_INSTANT",
       "Board power draw.", ("power.draw [W]", "power.draw.instant")),
    _M("enforced.power.limit", "W", "gauge", "nvmlDeviceGetEnforcedPowerLimit (mW)",
       "Power limit the driver enforces now (may be below the default limit).",
       ("enforced.power.limit [W]", "power.limit", "power.limit [W]")),
    _M("energy.total", "J", "counter", "nvmlDeviceGetTotalEnergyConsumption (mJ)",
       "Energy used since the driver was loaded.", ()),
    # --- temperature ------------------------------------------------------------------
    _M("temperature.gpu", "C", "gauge", "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
       "GPU core temperature.", ()),
    _M("temperature.memory", "C", "gauge", "NVML_FI_DEV_MEMORY_TEMP",
       "HBM temperature (data-centre parts only).", ()),
    _M("fan.speed", "%", "gauge", "nvmlDeviceGetFanSpeed",
       "Intended fan speed; N/A on passively cooled data-centre boards.", ("fan.speed [%]",)),
    # --- clocks and performance state -------------------------------------------------
    _M("clocks.sm", "MHz", "gauge", "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
       "Current SM clock.", ("clocks.current.sm", "clocks.current.sm [MHz]", "clocks.sm [MHz]")),
    _M("clocks.mem", "MHz", "gauge", "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
       "Current memory clock.", ("clocks.current.memory", "clocks.current.memory [MHz]",
                                 "clocks.mem [MHz]")),
    _M("clocks.gr", "MHz", "gauge", "nvmlDeviceGetClockInfo(NVML_CLOCK_GRAPHICS)",
       "Current graphics clock.", ("clocks.current.graphics", "clocks.current.graphics [MHz]",
                                   "clocks.gr [MHz]")),
    _M("clocks_event_reasons.active", "bitmask", "flags",
       "nvmlDeviceGetCurrentClocksEventReasons",
       "Why clocks are below their maximum now (see watchdog.reasons).",
       ("clocks_throttle_reasons.active",)),
    _M("pstate", "P", "enum", "nvmlDeviceGetPerformanceState",
       "Performance state 0 (max) .. 15 (min); 'P0' in logs.", ()),
    _M("violation.power", "s", "counter", "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER)",
       "Cumulative time clocks were held down by the power limit.", ()),
    _M("violation.thermal", "s", "counter",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL)",
       "Cumulative time clocks were held down for temperature.", ()),
    _M("violation.sync_boost", "s", "counter",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_SYNC_BOOST)",
       "Cumulative time clocks were held to the slowest GPU of a sync-boost group.", ()),
    _M("violation.reliability", "s", "counter",
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_RELIABILITY)",
       "Cumulative time clocks were held down by board reliability limits.", ()),
    # --- GPM (Hopper and newer) -------------------------------------------------------
    _M("gpm.sm_activity", "%", "gauge", "nvmlGpmMetricsGet(NVML_GPM_METRIC_SM_UTIL)",
       "Percent of SM cycles with at least one warp resident: real work, unlike utilization.gpu.",
       ()),
    _M("gpm.sm_occupancy", "%", "gauge", "nvmlGpmMetricsGet(NVML_GPM_METRIC_SM_OCCUPANCY)",
       "Resident warps as a percent of the theoretical maximum.", ()),
    _M("gpm.tensor_activity", "%", "gauge",
       "nvmlGpmMetricsGet(NVML_GPM_METRIC_ANY_TENSOR_UTIL)",
       "Percent of cycles any tensor pipe was active.", ()),
    _M("gpm.dram_bandwidth", "%", "gauge", "nvmlGpmMetricsGet(NVML_GPM_METRIC_DRAM_BW_UTIL)",
       "DRAM bandwidth used as a percent of peak.", ()),
    # --- the watcher's own reading ---------------------------------------------------
    _M("nvml.errors", "calls", "gauge", "(the agent: failed or timed-out NVML calls)",
       "NVML calls on this GPU that failed or did not return within their deadline in "
       "this reading: a wedged driver, the GPU cannot be watched.", ()),
    # --- memory errors ----------------------------------------------------------------
    _M("ecc.errors.corrected.volatile.total", "count", "counter",
       "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE_ECC)",
       "Corrected (single-bit) ECC errors since the driver loaded.", ()),
    _M("ecc.errors.uncorrected.volatile.total", "count", "counter",
       "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE_ECC)",
       "Uncorrected (double-bit) ECC errors since the driver loaded: any is serious.", ()),
    _M("ecc.errors.uncorrected.aggregate.total", "count", "counter",
       "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE_ECC)",
       "Uncorrected ECC errors over the board's life.", ()),
    _M("retired_pages.pending", "bool", "gauge", "nvmlDeviceGetRetiredPagesPendingStatus",
       "1 if pages are waiting to be retired at the next reboot (pre-Ampere).", ()),
    _M("retired_pages.count", "count", "counter",
       "nvmlDeviceGetRetiredPages(SBE)+nvmlDeviceGetRetiredPages(DBE)",
       "Retired framebuffer pages, both causes.", ()),
    _M("remapped_rows.correctable", "count", "counter", "nvmlDeviceGetRemappedRows[0]",
       "Rows remapped for correctable errors (Ampere and newer).", ()),
    _M("remapped_rows.uncorrectable", "count", "counter", "nvmlDeviceGetRemappedRows[1]",
       "Rows remapped for uncorrectable errors.", ()),
    _M("remapped_rows.pending", "bool", "gauge", "nvmlDeviceGetRemappedRows[2]",
       "1 if a row remap waits for a GPU reset.", ()),
    _M("remapped_rows.failure", "bool", "gauge", "nvmlDeviceGetRemappedRows[3]",
       "1 if a remap failed: the GPU needs service.", ()),
    # --- PCIe -------------------------------------------------------------------------
    _M("pcie.link.gen.current", "gen", "gauge", "nvmlDeviceGetCurrPcieLinkGeneration",
       "Current PCIe generation (drops to 1 at idle by design).",
       ("pcie.link.gen.gpucurrent",)),
    _M("pcie.link.width.current", "lanes", "gauge", "nvmlDeviceGetCurrPcieLinkWidth",
       "Current PCIe link width.", ()),
    _M("pcie.replay_counter", "count", "counter", "nvmlDeviceGetPcieReplayCounter",
       "PCIe replays: growth means a marginal link.", ()),
    _M("pcie.tx_throughput", "KB/s", "gauge", "nvmlDeviceGetPcieThroughput(TX_BYTES)",
       "PCIe transmit throughput over a 20 ms window.", ()),
    _M("pcie.rx_throughput", "KB/s", "gauge", "nvmlDeviceGetPcieThroughput(RX_BYTES)",
       "PCIe receive throughput over a 20 ms window.", ()),
    # --- NVLink (summed over links) ---------------------------------------------------
    _M("nvlink.errors.crc_flit", "count", "counter",
       "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "NVLink flit CRC errors.", ()),
    _M("nvlink.errors.crc_data", "count", "counter",
       "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "NVLink data CRC errors.", ()),
    _M("nvlink.errors.replay", "count", "counter",
       "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "NVLink replays.", ()),
    _M("nvlink.errors.recovery", "count", "counter",
       "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "NVLink link recoveries.", ()),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}

# Every spelling (name, alias, and the bracketed-unit form of each) -> canonical name.
ALIASES: dict[str, str] = {}
for _m in METRICS:
    for _spelling in (_m.name, *_m.aliases):
        ALIASES[_spelling.lower()] = _m.name

NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
#: Metrics the agent adds to a reading itself (not read from NVML, never in a log).
AGENT_NAMES: frozenset[str] = frozenset({"nvml.errors"})
#: What a source reports in every sample: every metric but the agent's own.
SOURCE_NAMES: tuple[str, ...] = tuple(n for n in NAMES if n not in AGENT_NAMES)


def canonical(name: str) -> str | None:
    """Map a column or field spelling to its catalogue name, or ``None`` if unknown.

    Accepts ``nvidia-smi`` header forms with a unit suffix (``power.draw [W]``) and the
    older ``clocks_throttle_reasons.*`` spelling.
    """
    key = name.strip().lower()
    if key in ALIASES:
        return ALIASES[key]
    if "[" in key:
        base = key.split("[", 1)[0].strip()
        if base in ALIASES:
            return ALIASES[base]
    return None


def get(name: str) -> Metric:
    """The catalogue entry for a canonical ``name``; ``KeyError`` names the metric."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}") from None
