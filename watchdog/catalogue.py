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
    _M("memory.free", "MiB", "gauge", "nvmlDeviceGetMemoryInfo(version=2).free",
       "Framebuffer memory free (a log without memory.total: total = used + free + "
       "reserved).", ("memory.free [MiB]",)),
    _M("memory.reserved", "MiB", "gauge", "nvmlDeviceGetMemoryInfo(version=2).reserved",
       "Framebuffer memory the driver reserves (recent drivers; counted in neither used "
       "nor free).", ("memory.reserved [MiB]",)),
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
    _M("temperature.gpu.tlimit", "C", "gauge", "NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT",
       "Degrees below the GPU's max operating temperature (T.Limit), where it starts to "
       "slow itself down; negative above it.", ()),
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


# --- GPU models ------------------------------------------------------------------------
#
# Figures a log may lack, by GPU model, for the rules' fallbacks (``docs/rules.md``,
# "What each rule uses"): the power limit (TDP, W), the idle power (W, no work), the
# framebuffer size (MiB, as NVML reports it) and the temperature at which the GPU starts
# to slow itself down (its max operating temperature, T.Limit 0, C). Every figure names
# its source; ``verified`` lists the figures measured on that model's own readings in the
# team's real logs (``real-gpu/``, ``real-telemetry/``), the others are datasheet or
# issue-thread figures not checked here: a page quoting one says "unverified".


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU model's figures (None: not known). ``match``: words of ``nvidia-smi``'s
    ``name`` (case-insensitive, whole words: "l4" does not match "l40s"), the first model
    matching wins."""

    label: str
    match: tuple[str, ...]
    tdp_w: float | None = None
    idle_w: float | None = None
    memory_mib: float | None = None
    max_operating_c: float | None = None
    source: str = ""
    verified: frozenset[str] = frozenset()

    def figure(self, field: str) -> tuple[float | None, bool]:
        """``(value, verified)`` of ``tdp_w``, ``idle_w``, ``memory_mib`` or
        ``max_operating_c``."""
        return getattr(self, field), field in self.verified


_H100_Q = "real-gpu/h100-spin-hang/nvidia-smi-q.txt and smi_a.csv (driver 580)"
GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("H100 NVL", ("h100 nvl",), tdp_w=400.0, memory_mib=95830.0,
             source="memory: real-telemetry/fridanl__thesis-mas (95830 MiB); TDP: NVIDIA "
                    "H100 NVL product brief (350-400 W, 400 W default)",
             verified=frozenset({"memory_mib"})),
    GpuModel("H100 PCIe", ("h100 pcie",), tdp_w=350.0, memory_mib=81559.0,
             source="TDP: NVIDIA product brief PB-11133-001 (reference/anchors-mission.md); "
                    "memory: as the SXM part"),
    GpuModel("H100 SXM", ("h100 80gb hbm3", "h100 sxm", "h800"), tdp_w=700.0, idle_w=74.0,
             memory_mib=81559.0, max_operating_c=87.0,
             source=f"{_H100_Q}: 700 W default and max limit, 81559 MiB, T.Limit 56 C at "
                    "31 C (max operating 87 C; slowdown at -2 C = 89 C), 74 W idle "
                    "without a CUDA context (122 W with one)",
             verified=frozenset({"tdp_w", "idle_w", "memory_mib", "max_operating_c"})),
    GpuModel("H200", ("h200",), tdp_w=700.0, idle_w=75.0, memory_mib=143771.0,
             source="idle: real-telemetry/Leo-hxu (4x H200 by its metadata, 74-77 W at "
                    "345 MHz); TDP and memory: NVIDIA H200 datasheet",
             verified=frozenset({"idle_w"})),
    GpuModel("A100 SXM 80GB", ("a100-sxm4-80gb", "a100 80gb hbm2e"), tdp_w=400.0,
             memory_mib=81920.0, max_operating_c=85.0,
             source="NVIDIA A100 datasheet (400 W); max operating: nvidia-smi -q of A100 "
                    "boards (85 C), as the simulator's A100"),
    GpuModel("A100 SXM 40GB", ("a100-sxm4-40gb", "a100-sxm"), tdp_w=400.0,
             memory_mib=40960.0, max_operating_c=85.0,
             source="NVIDIA A100 datasheet (400 W); max operating 85 C as above"),
    GpuModel("A100 PCIe 80GB", ("a100 80gb pcie", "a100-pcie-80gb"), tdp_w=300.0,
             memory_mib=81920.0, max_operating_c=85.0,
             source="NVIDIA A100 80GB PCIe product brief (300 W)"),
    GpuModel("A100 PCIe 40GB", ("a100-pcie-40gb", "a100-pcie"), tdp_w=250.0, idle_w=35.0,
             memory_mib=40960.0, max_operating_c=85.0,
             source="DESIGN.md traps (250 W limit, ~35 W idle); max operating 85 C "
                    "(nvidia-smi of A100 PCIe boards, the simulator's a100-pcie)"),
    GpuModel("A100", ("a100",), tdp_w=400.0, idle_w=62.0,
             source="idle: real-telemetry/Leo-hxu (4x A100 by its metadata, 61-65 W at "
                    "210 MHz); TDP: A100 SXM datasheet",
             verified=frozenset({"idle_w"})),
    GpuModel("L40S", ("l40s",), tdp_w=350.0, idle_w=38.0, memory_mib=46068.0,
             source="idle: real-telemetry/Leo-hxu (4x L40S by its metadata, 37-40 W at "
                    "210 MHz); TDP and memory: NVIDIA L40S datasheet",
             verified=frozenset({"idle_w"})),
    GpuModel("L40", ("l40",), tdp_w=300.0, memory_mib=46068.0,
             source="NVIDIA L40 datasheet"),
    GpuModel("L4", ("l4",), tdp_w=72.0, memory_mib=23034.0, source="NVIDIA L4 datasheet"),
    GpuModel("A10G", ("a10g",), tdp_w=300.0, memory_mib=23028.0,
             source="AWS G5 documentation (A10G)"),
    GpuModel("A10", ("a10",), tdp_w=150.0, memory_mib=23028.0, source="NVIDIA A10 datasheet"),
    GpuModel("A40", ("a40",), tdp_w=300.0, memory_mib=46068.0, source="NVIDIA A40 datasheet"),
    GpuModel("A30", ("a30",), tdp_w=165.0, memory_mib=24576.0, source="NVIDIA A30 datasheet"),
    GpuModel("V100 PCIe", ("v100-pcie",), tdp_w=250.0,
             source="horovod/horovod#3611 (V100-PCIE-32GB, 250 W limit)"),
    GpuModel("V100 SXM2", ("v100-sxm2", "v100"), tdp_w=300.0,
             source="NVIDIA V100 datasheet (SXM2 300 W)"),
    GpuModel("T4", ("t4",), tdp_w=70.0, memory_mib=15360.0,
             source="NVIDIA T4 datasheet"),
)


def _word_in(text: str, key: str) -> bool:
    """Whether ``key`` occurs in ``text`` with no letter or digit on either side."""
    at = text.find(key)
    while at >= 0:
        end = at + len(key)
        if ((at == 0 or not text[at - 1].isalnum())
                and (end == len(text) or not text[end].isalnum())):
            return True
        at = text.find(key, at + 1)
    return False


def gpu_model(name: str | None) -> GpuModel | None:
    """The catalogue's model for ``nvidia-smi``'s ``name`` (None: unknown or no name)."""
    if not name:
        return None
    low = name.lower()
    for m in GPU_MODELS:
        if any(_word_in(low, k) for k in m.match):
            return m
    return None
