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

# The GPU models' own figures (power limit, idle power, framebuffer size, temperature
# thresholds) are watchdog.gpumodels'; the rules' fallbacks find them here too.
from watchdog.gpumodels import FIGURES as FIGURES
from watchdog.gpumodels import GPU_MODELS as GPU_MODELS
from watchdog.gpumodels import GpuFigures as GpuFigures
from watchdog.gpumodels import gpu_model as gpu_model

Kind = Literal["gauge", "counter", "flags", "enum"]


@dataclass(frozen=True, slots=True)
class Call:
    """Read by ``pynvml.<fn>(handle, *args)``: the result, or its attribute ``attr``, times
    ``scale`` is the value in the catalogue's unit. An argument that is a string names a
    pynvml constant (``"NVML_TEMPERATURE_GPU"``); ``kwargs`` are keyword arguments naming
    constants. ``older``: the entry point of drivers that lack ``fn`` (or do not support
    it), called with the same ``args``. ``slow``: read with the slow group (counters and
    settings no rule needs every tick), not every tick. Metrics whose calls are equal
    share one call (``utilization.gpu`` and ``utilization.memory``)."""

    fn: str
    args: tuple[int | str, ...] = ()
    attr: str | None = None
    scale: float = 1.0
    slow: bool = False
    older: str | None = None
    kwargs: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        args = ", ".join([*(str(a) for a in self.args), *(f"{k}={v}" for k, v in self.kwargs)])
        return f"{self.fn}({args})" + (f".{self.attr}" if self.attr else "")


@dataclass(frozen=True, slots=True)
class Field:
    """Read through ``nvmlDeviceGetFieldValues``: field ``id`` (``NVML_FI_DEV_*``) times
    ``scale``, every field of a group in one call, each with its own status. ``slow``: as
    :class:`Call`'s."""

    id: int
    scale: float = 1.0
    slow: bool = False

    def __str__(self) -> str:
        return f"nvmlDeviceGetFieldValues(field {self.id})"


@dataclass(frozen=True, slots=True)
class Gpm:
    """A GPM metric (Hopper and newer): ``NVML_GPM_METRIC_*`` ``id`` between two
    ``nvmlGpmSampleGet`` samples (:mod:`watchdog.sources.nvml.gpm`)."""

    id: int

    def __str__(self) -> str:
        return f"nvmlGpmMetricsGet(metric {self.id})"


@dataclass(frozen=True, slots=True)
class Metric:
    """One catalogue entry.

    ``nvml`` is how the agent reads it: a :class:`Call`, a :class:`Field` or a
    :class:`Gpm` (the NVML reader reads every such metric from this entry alone), or, for
    the few a reader works out itself, the words saying how. ``aliases`` are other
    spellings seen in real logs (older ``nvidia-smi`` field names, ``dmon`` columns);
    parsers map them onto ``name``.
    """

    name: str
    unit: str
    kind: Kind
    nvml: Call | Field | Gpm | str
    help: str
    aliases: tuple[str, ...] = ()


_M = Metric


def _MEMORY(attr: str) -> Call:  # a constant's maker, named like one
    # v2 (driver 510+) reports used memory without the driver's reserved share
    return Call("nvmlDeviceGetMemoryInfo", attr=attr, scale=1 / 1048576.0,
                kwargs=(("version", "nvmlMemory_v2"),), older="nvmlDeviceGetMemoryInfo")


def _VIOLATION(policy: str) -> Call:
    return Call("nvmlDeviceGetViolationStatus", args=(policy,), attr="violationTime",
                scale=1e-9, slow=True)  # ns

METRICS: tuple[Metric, ...] = (
    # --- utilisation and memory -------------------------------------------------------
    _M("utilization.gpu", "%", "gauge", Call("nvmlDeviceGetUtilizationRates", attr="gpu"),
       "Percent of the sample period in which a kernel was running (not how hard the GPU worked).",
       ("utilization.gpu [%]",)),
    _M("utilization.memory", "%", "gauge", Call("nvmlDeviceGetUtilizationRates", attr="memory"),
       "Percent of the sample period in which device memory was being read or written.",
       ("utilization.memory [%]",)),
    _M("memory.used", "MiB", "gauge", _MEMORY("used"),
       "Framebuffer memory in use (v2 API excludes driver-reserved memory where present).",
       ("memory.used [MiB]",)),
    _M("processes.serving", "bool", "gauge",
       "nvmlDeviceGetComputeRunningProcesses + /proc/<pid>/cmdline (watchdog.serving)",
       "1 if an inference server (vLLM, Triton, TGI, SGLang, Ollama...) holds this GPU, "
       "0 if its processes are known and none serves.", ()),
    _M("memory.total", "MiB", "gauge", _MEMORY("total"),
       "Framebuffer memory size.", ("memory.total [MiB]",)),
    _M("memory.free", "MiB", "gauge", "nvmlDeviceGetMemoryInfo(version=2).free (logs only)",
       "Framebuffer memory free (a log without memory.total: total = used + free + "
       "reserved).", ("memory.free [MiB]",)),
    _M("memory.reserved", "MiB", "gauge",
       "nvmlDeviceGetMemoryInfo(version=2).reserved (logs only)",
       "Framebuffer memory the driver reserves (recent drivers; counted in neither used "
       "nor free).", ("memory.reserved [MiB]",)),
    # --- power and energy -------------------------------------------------------------
    _M("power.draw", "W", "gauge", Call("nvmlDeviceGetPowerUsage", scale=1e-3),  # mW
       "Board power draw.", ("power.draw [W]", "power.draw.instant")),
    _M("enforced.power.limit", "W", "gauge",
       Call("nvmlDeviceGetEnforcedPowerLimit", scale=1e-3, slow=True),  # mW
       "Power limit the driver enforces now (may be below the default limit).",
       ("enforced.power.limit [W]", "power.limit", "power.limit [W]")),
    _M("energy.total", "J", "counter", Field(83, scale=1e-3, slow=True),  # mJ
       "Energy used since the driver was loaded.", ()),
    # --- temperature ------------------------------------------------------------------
    _M("temperature.gpu", "C", "gauge",
       Call("nvmlDeviceGetTemperature", args=("NVML_TEMPERATURE_GPU",)),
       "GPU core temperature.", ()),
    _M("temperature.memory", "C", "gauge", Field(82),  # NVML_FI_DEV_MEMORY_TEMP
       "HBM temperature (data-centre parts only).", ()),
    _M("temperature.gpu.tlimit", "C", "gauge",
       "NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT (logs only)",
       "Degrees below the GPU's max operating temperature (T.Limit), where it starts to "
       "slow itself down; negative above it.", ()),
    _M("fan.speed", "%", "gauge", Call("nvmlDeviceGetFanSpeed", slow=True),
       "Intended fan speed; N/A on passively cooled data-centre boards.", ("fan.speed [%]",)),
    # --- clocks and performance state -------------------------------------------------
    _M("clocks.sm", "MHz", "gauge", Call("nvmlDeviceGetClockInfo", args=("NVML_CLOCK_SM",)),
       "Current SM clock.", ("clocks.current.sm", "clocks.current.sm [MHz]", "clocks.sm [MHz]")),
    _M("clocks.mem", "MHz", "gauge",
       Call("nvmlDeviceGetClockInfo", args=("NVML_CLOCK_MEM",), slow=True),
       "Current memory clock.", ("clocks.current.memory", "clocks.current.memory [MHz]",
                                 "clocks.mem [MHz]")),
    _M("clocks.gr", "MHz", "gauge",
       Call("nvmlDeviceGetClockInfo", args=("NVML_CLOCK_GRAPHICS",), slow=True),
       "Current graphics clock.", ("clocks.current.graphics", "clocks.current.graphics [MHz]",
                                   "clocks.gr [MHz]")),
    _M("clocks_event_reasons.active", "bitmask", "flags",  # "throttle reasons" before 535
       Call("nvmlDeviceGetCurrentClocksEventReasons",
            older="nvmlDeviceGetCurrentClocksThrottleReasons"),
       "Why clocks are below their maximum now (see watchdog.reasons).",
       ("clocks_throttle_reasons.active",)),
    _M("pstate", "P", "enum", Call("nvmlDeviceGetPerformanceState", slow=True),
       "Performance state 0 (max) .. 15 (min); 'P0' in logs.", ()),
    _M("violation.power", "s", "counter", _VIOLATION("NVML_PERF_POLICY_POWER"),
       "Cumulative time clocks were held down by the power limit.", ()),
    _M("violation.thermal", "s", "counter", _VIOLATION("NVML_PERF_POLICY_THERMAL"),
       "Cumulative time clocks were held down for temperature.", ()),
    _M("violation.sync_boost", "s", "counter", _VIOLATION("NVML_PERF_POLICY_SYNC_BOOST"),
       "Cumulative time clocks were held to the slowest GPU of a sync-boost group.", ()),
    _M("violation.reliability", "s", "counter", _VIOLATION("NVML_PERF_POLICY_RELIABILITY"),
       "Cumulative time clocks were held down by board reliability limits.", ()),
    # --- GPM (Hopper and newer) -------------------------------------------------------
    _M("gpm.sm_activity", "%", "gauge", Gpm(2),  # NVML_GPM_METRIC_SM_UTIL
       "Percent of SM cycles with at least one warp resident: real work, unlike utilization.gpu.",
       ()),
    _M("gpm.sm_occupancy", "%", "gauge", Gpm(3),  # NVML_GPM_METRIC_SM_OCCUPANCY
       "Resident warps as a percent of the theoretical maximum.", ()),
    _M("gpm.tensor_activity", "%", "gauge", Gpm(5),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
       "Percent of cycles any tensor pipe was active.", ()),
    _M("gpm.dram_bandwidth", "%", "gauge", Gpm(10),  # NVML_GPM_METRIC_DRAM_BW_UTIL
       "DRAM bandwidth used as a percent of peak.", ()),
    # --- the watcher's own reading ---------------------------------------------------
    _M("nvml.errors", "calls", "gauge", "(the agent: failed or timed-out NVML calls)",
       "NVML calls on this GPU that failed or did not return within their deadline in "
       "this reading: a wedged driver, the GPU cannot be watched.", ()),
    # --- memory errors ----------------------------------------------------------------
    _M("ecc.errors.corrected.volatile.total", "count", "counter", Field(3, slow=True),
       "Corrected (single-bit) ECC errors since the driver loaded.", ()),
    _M("ecc.errors.uncorrected.volatile.total", "count", "counter", Field(4),
       "Uncorrected (double-bit) ECC errors since the driver loaded: any is serious.", ()),
    _M("ecc.errors.uncorrected.aggregate.total", "count", "counter", Field(6, slow=True),
       "Uncorrected ECC errors over the board's life.", ()),
    _M("retired_pages.pending", "bool", "gauge", Field(31),
       "1 if pages are waiting to be retired at the next reboot (pre-Ampere).", ()),
    _M("retired_pages.count", "count", "counter",
       "nvmlDeviceGetRetiredPages(SBE) + nvmlDeviceGetRetiredPages(DBE), counted",
       "Retired framebuffer pages, both causes.", ()),
    _M("remapped_rows.correctable", "count", "counter", Field(142, slow=True),
       "Rows remapped for correctable errors (Ampere and newer).", ()),
    _M("remapped_rows.uncorrectable", "count", "counter", Field(143),
       "Rows remapped for uncorrectable errors.", ()),
    _M("remapped_rows.pending", "bool", "gauge", Field(144),
       "1 if a row remap waits for a GPU reset.", ()),
    _M("remapped_rows.failure", "bool", "gauge", Field(145),
       "1 if a remap failed: the GPU needs service.", ()),
    # --- PCIe -------------------------------------------------------------------------
    _M("pcie.link.gen.current", "gen", "gauge",
       Call("nvmlDeviceGetCurrPcieLinkGeneration", slow=True),
       "Current PCIe generation (drops to 1 at idle by design).",
       ("pcie.link.gen.gpucurrent",)),
    _M("pcie.link.width.current", "lanes", "gauge",
       Call("nvmlDeviceGetCurrPcieLinkWidth", slow=True),
       "Current PCIe link width.", ()),
    _M("pcie.replay_counter", "count", "counter", Field(94, slow=True),
       "PCIe replays: growth means a marginal link.", ()),
    _M("pcie.tx_throughput", "KB/s", "gauge",
       Call("nvmlDeviceGetPcieThroughput", args=("NVML_PCIE_UTIL_TX_BYTES",), slow=True),
       "PCIe transmit throughput over a 20 ms window.", ()),
    _M("pcie.rx_throughput", "KB/s", "gauge",
       Call("nvmlDeviceGetPcieThroughput", args=("NVML_PCIE_UTIL_RX_BYTES",), slow=True),
       "PCIe receive throughput over a 20 ms window.", ()),
    # --- NVLink (summed over links) ---------------------------------------------------
    _M("nvlink.errors.crc_flit", "count", "counter", Field(38, slow=True),
       "NVLink flit CRC errors.", ()),  # NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
    _M("nvlink.errors.crc_data", "count", "counter", Field(45, slow=True),
       "NVLink data CRC errors.", ()),  # NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
    _M("nvlink.errors.replay", "count", "counter", Field(52, slow=True),
       "NVLink replays.", ()),  # NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL
    _M("nvlink.errors.recovery", "count", "counter", Field(59, slow=True),
       "NVLink link recoveries.", ()),  # NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL
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
#: Metrics read only from logs: the live agent has what they stand in for from NVML's
#: inventory (memory total, temperature thresholds), so it does not sample them.
LOG_NAMES: frozenset[str] = frozenset({"memory.free", "memory.reserved",
                                       "temperature.gpu.tlimit"})
#: What a source reports in every sample: every metric but the agent's own and the
#: log-only ones.
SOURCE_NAMES: tuple[str, ...] = tuple(n for n in NAMES
                                      if n not in AGENT_NAMES and n not in LOG_NAMES)


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
