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


# --- GPU models ------------------------------------------------------------------------
#
# Figures a log may lack, by GPU model, for the rules' fallbacks (``docs/rules.md``, "What
# each rule uses"): the power limit (TDP, W), the idle power (W: no work, idle clocks), the
# framebuffer size (MiB, as NVML reports it) and the temperature thresholds ``nvidia-smi
# -q`` prints (C). NVML names three (nvml.h, ``nvmlTemperatureThresholds_t``):
#
# * ``max_operating_c``, "GPU Max Operating Temp" (T.Limit 0; ``..._GPU_MAX``): "GPU
#   temperature at which the GPU can be throttled below base clock". Above it the
#   software "SW Thermal Slowdown" trims the clocks (reason bit 0x20): the board regulates
#   itself by a few per cent (real-wandb harshit810: an A100 at 85-86 C, SM clock 93-100 %).
# * ``slowdown_c``, "GPU Slowdown Temp" (``..._SLOWDOWN``): "the GPU will begin HW
#   slowdown", the hardware cutting the clocks "by a factor of 2 or more" (bit 0x40).
# * ``shutdown_c``, "GPU Shutdown Temp": the GPU turns itself off.
#
# ``target_c`` is "GPU Target Temperature" of GeForce and RTX boards: GPU Boost lowers the
# clocks step by step to hold it, by design and all day on a loaded card, and the owner
# may set it (``nvidia-smi -gtt``). The point at which a GPU *slows itself down* is
# therefore ``slowdown_c`` on every kind of board; ``max_operating_c`` and ``target_c``
# are where regulation begins, not a fault. Hopper, Ada and Blackwell drivers print
# margins to T.Limit instead of degrees ("GPU Slowdown T.Limit Temp: -2 C"); current +
# T.Limit moves by 1-4 C between readings (H100: 83-87 C for an 87 C threshold), so such
# boards have a threshold here only where NVML's own reading of it is on record.
#
# Every figure names its source (:meth:`GpuFigures.source`); ``verified`` lists the figures
# seen on that model in the team's evaluation data (``../shared``: ``real-gpu/``,
# ``real-telemetry/``, ``real-wandb/``); the others, from datasheets or other people's
# ``nvidia-smi -q`` outputs, are "unverified" on a page. A figure without a source is None.
# Entries without figures keep a name from matching a model it merely contains (an H200
# NVL or a GH200 is not an H200; a laptop part is not its desktop namesake).

FIGURES: tuple[str, ...] = ("tdp_w", "idle_w", "memory_mib", "max_operating_c",
                            "slowdown_c", "shutdown_c", "target_c")


@dataclass(frozen=True, slots=True)
class GpuFigures:
    """What is known of one real GPU model, for the rules' fallbacks (None: not known;
    the simulator's parts are :class:`watchdog.sources.sim.models.SimulatedGpu`).
    ``match``: words of ``nvidia-smi``'s ``name`` (case-insensitive, whole words: "h20"
    does not match "h200"), the first model matching wins. ``sources``: (figure names,
    where they come from) pairs."""

    label: str
    match: tuple[str, ...]
    tdp_w: float | None = None
    idle_w: float | None = None
    memory_mib: float | None = None
    max_operating_c: float | None = None
    slowdown_c: float | None = None
    shutdown_c: float | None = None
    target_c: float | None = None
    sources: tuple[tuple[str, str], ...] = ()
    verified: frozenset[str] = frozenset()

    def figure(self, field: str) -> tuple[float | None, bool]:
        """``(value, verified)`` of one of :data:`FIGURES`."""
        return getattr(self, field), field in self.verified

    def source(self, field: str) -> str:
        """Where ``field``'s figure comes from ("" when none is named)."""
        return "; ".join(text for names, text in self.sources if field in names.split())


def _m(label: str, match: tuple[str, ...], src: dict[str, str], verified: str = "",
       **figures: float) -> GpuFigures:
    return GpuFigures(label, match, sources=tuple(src.items()),
                    verified=frozenset(verified.split()), **figures)


_TEMPS = "max_operating_c slowdown_c shutdown_c"
_W = "real-wandb/"  # the run's stats (enforcedPowerLimitWatts, or powerWatts/powerPercent)
_GLS = "thamada/gls@e20f22d gls/"  # files of real nvidia-smi -q outputs
_SMI = "thamada/nvidia-smi@c4c8a46 gls/"
_TG = "influxdata/telegraf plugins/inputs/nvidia_smi/testdata/"
_H100_Q = "real-gpu/h100-spin-hang (a.wdrec inventory from NVML, nvidia-smi-q.txt, driver 580)"
GPU_MODELS: tuple[GpuFigures, ...] = (
    _m("laptop GPU", ("laptop",), {}),
    _m("H100 NVL", ("h100 nvl",), {
        "tdp_w": f"{_W}Aochong-Li__KnowledgeUpdatePlayground jz259abw (400 W enforced); "
                 "NVIDIA H100 NVL product brief (350-400 W)",
        "memory_mib": "real-telemetry/fridanl__thesis-mas and jz259abw's metadata"},
       "tdp_w memory_mib", tdp_w=400.0, memory_mib=95830.0),
    _m("H100 PCIe", ("h100 pcie",), {
        "tdp_w": "NVIDIA product brief PB-11133-001 (reference/anchors-mission.md)",
        "memory_mib": "as the SXM part"},
       tdp_w=350.0, memory_mib=81559.0),
    _m("H100 SXM", ("h100 80gb hbm3", "h100 sxm", "h100 sxm5", "h800"), {
        f"tdp_w memory_mib {_TEMPS}": f"{_H100_Q}: 700 W default and max limit, 81559 "
                                      "MiB, thresholds 87/89/95 C (T.Limit 56 C at 31 C)",
        "idle_w": f"{_H100_Q}: 74 W without a CUDA context (122 W with one)"},
       f"tdp_w idle_w memory_mib {_TEMPS}", tdp_w=700.0, idle_w=74.0, memory_mib=81559.0,
       max_operating_c=87.0, slowdown_c=89.0, shutdown_c=95.0),
    _m("H200 NVL", ("h200 nvl",), {}),
    _m("GH200", ("gh200",), {}),
    _m("H200", ("h200",), {
        f"tdp_w memory_mib {_TEMPS}": "real-gpu/h200-spin-hang/g.wdrec inventory from NVML "
                                      "(driver 580): 700 W, 143771 MiB, 87/89/95 C",
        "idle_w": "real-telemetry/Leo-hxu (4x H200 by its metadata, 74-77 W at 345 MHz)"},
       f"tdp_w idle_w memory_mib {_TEMPS}", tdp_w=700.0, idle_w=75.0, memory_mib=143771.0,
       max_operating_c=87.0, slowdown_c=89.0, shutdown_c=95.0),
    _m("H20", ("h20",), {
        "tdp_w idle_w": f"{_W}kokolerk__TON u7pm50lm: 500 W enforced on all 8; 71-74 W "
                        "at 345 MHz and 0 % in its idle start-up",
        "memory_mib": f"{_W}kokolerk__TON metadata (102625181696 B)"},
       "tdp_w idle_w memory_mib", tdp_w=500.0, idle_w=72.0, memory_mib=97871.0),
    _m("A100 SXM 80GB", ("a100-sxm4-80gb", "a100 80gb hbm2e"), {
        "tdp_w": f"NVIDIA A100 datasheet; {_W}: 400 W in 6 of 8 runs (500 W boards in "
                 "harshit810, luokairo)",
        "memory_mib": f"{_W}: metadata of 5 runs (81251 MiB in 2 older ones)",
        _TEMPS: f"{_SMI}A100SXMx4_smi.py (4 boards, driver 555.42.02) and "
                f"{_TG}a100-sxm4-v12.xml (driver 535.54.03): 85/89/92 C"},
       "tdp_w memory_mib", tdp_w=400.0, memory_mib=81920.0, max_operating_c=85.0,
       slowdown_c=89.0, shutdown_c=92.0),
    _m("A100 SXM 40GB", ("a100-sxm4-40gb", "a100-sxm"), {
        "tdp_w memory_mib": f"{_W}Luo-feng-hitsz__TRAVEL gu5nlvbe (400 W enforced, metadata)"},
       "tdp_w memory_mib", tdp_w=400.0, memory_mib=40960.0),
    _m("A100 PCIe 80GB", ("a100 80gb pcie", "a100-pcie-80gb"), {
        "tdp_w memory_mib": f"{_W}lilinwz__ProRAG rlbczdro (300 W enforced, metadata), "
                            "yangjunx21__cpt4ta; NVIDIA A100 80GB PCIe product brief"},
       "tdp_w memory_mib", tdp_w=300.0, memory_mib=81920.0),
    _m("A100 PCIe 40GB", ("a100-pcie-40gb", "a100-pcie"), {
        "tdp_w idle_w": f"DESIGN.md traps; {_W}achingacham__PISPiN_finetune_Llama o703mkt7: "
                        "250 W limit, 34-35 W at 0 % utilization",
        "memory_mib": f"{_W}iMvijay23__Clinical-chatbot-training metadata"},
       "tdp_w idle_w memory_mib", tdp_w=250.0, idle_w=35.0, memory_mib=40960.0),
    _m("A100", ("a100",), {
        "idle_w": "real-telemetry/Leo-hxu (4x A100 by its metadata, 61-65 W at 210 MHz)",
        "tdp_w": "A100 SXM datasheet"}, "idle_w", tdp_w=400.0, idle_w=62.0),
    _m("L40S", ("l40s",), {
        "idle_w": "real-telemetry/Leo-hxu (4x L40S by its metadata, 37-40 W at 210 MHz)",
        "tdp_w memory_mib": f"NVIDIA L40S datasheet; {_SMI}L40S_smi.py (350 W, 46068 MiB)"},
       "idle_w", tdp_w=350.0, idle_w=38.0, memory_mib=46068.0),
    _m("L40", ("l40",), {"tdp_w memory_mib": "NVIDIA L40 datasheet"},
       tdp_w=300.0, memory_mib=46068.0),
    _m("L4", ("l4",), {"tdp_w memory_mib": f"NVIDIA L4 datasheet; {_SMI}L4_smi.py"},
       tdp_w=72.0, memory_mib=23034.0),
    _m("A10G", ("a10g",), {
        "tdp_w memory_mib": "AWS G5 documentation (A10G)",
        _TEMPS: f"{_TG}a10g.xml (driver 515.105.01): 88/95/98 C"},
       tdp_w=300.0, memory_mib=23028.0, max_operating_c=88.0, slowdown_c=95.0,
       shutdown_c=98.0),
    _m("A10", ("a10",), {
        "tdp_w memory_mib": "NVIDIA A10 datasheet",
        _TEMPS: f"{_GLS}A10_smi.py (driver 550.90.12): 91/98/101 C"},
       tdp_w=150.0, memory_mib=23028.0, max_operating_c=91.0, slowdown_c=98.0,
       shutdown_c=101.0),
    _m("A40", ("a40",), {
        "tdp_w memory_mib": "NVIDIA A40 datasheet",
        _TEMPS: f"{_SMI}A40x10_smi.py (10 boards, driver 550.127.05): 88/95/98 C"},
       tdp_w=300.0, memory_mib=46068.0, max_operating_c=88.0, slowdown_c=95.0,
       shutdown_c=98.0),
    _m("A30", ("a30",), {"tdp_w memory_mib": "NVIDIA A30 datasheet"},
       tdp_w=165.0, memory_mib=24576.0),
    _m("RTX A6000", ("rtx a6000",), {
        "tdp_w": f"{_W}jingfengou__Orthus vdvn1ax6 (300 W enforced); {_GLS}RTX_A6000_x9_smi.py",
        "memory_mib": f"{_W}jingfengou__Orthus metadata, ECC off (46068 MiB with ECC on)",
        f"{_TEMPS} target_c": f"{_GLS}RTX_A6000_x9_smi.py (9 boards, driver 550.127.05): "
                             "93/95/98 C, target 84 C"},
       "tdp_w memory_mib", tdp_w=300.0, memory_mib=49140.0, max_operating_c=93.0,
       slowdown_c=95.0, shutdown_c=98.0, target_c=84.0),
    _m("RTX A5000", ("rtx a5000",), {
        "tdp_w idle_w": f"{_W}LeonGuertler__UnstableBaselines d7ah89c4: 230 W enforced, "
                        "20-27 W at 210 MHz and 0 %",
        f"memory_mib {_TEMPS} target_c": f"{_TG}dual_a5000-v13.xml@74bae14 (driver "
                                         "590.44.01): 24564 MiB with ECC off (23028 with "
                                         "ECC on, LeonGuertler), 90/95/98 C, target 84 C"},
       "tdp_w idle_w", tdp_w=230.0, idle_w=25.0, memory_mib=24564.0, max_operating_c=90.0,
       slowdown_c=95.0, shutdown_c=98.0, target_c=84.0),
    _m("RTX 3090 Ti", ("rtx 3090 ti",), {}),
    _m("RTX 3090", ("rtx 3090",), {
        "tdp_w idle_w memory_mib": f"{_W}mjmj531__hllm, wshiman__Action-R1: 350 W enforced, "
                                   "16-22 W at 210 MHz and 0 %, metadata",
        f"{_TEMPS} target_c": f"{_SMI}RTX3090_smi.py (driver 560.35.03) and "
                              f"{_TG}rtx-3090-v12.xml (driver 525.147.05): 93/95/98 C; "
                              "target 83 C (telegraf's; set to 70 C on thamada's)"},
       "tdp_w idle_w memory_mib", tdp_w=350.0, idle_w=20.0, memory_mib=24576.0,
       max_operating_c=93.0, slowdown_c=95.0, shutdown_c=98.0, target_c=83.0),
    _m("RTX 4090 D", ("rtx 4090 d",), {
        "tdp_w memory_mib": f"{_W}W3iii__LN_Reg2RG jdbcnz21 (425 W from powerPercent, "
                            "metadata)"}, "tdp_w memory_mib", tdp_w=425.0, memory_mib=24564.0),
    _m("RTX 4090", ("rtx 4090",), {
        "tdp_w memory_mib target_c": f"{_SMI}RTX4090_smi.py (8 boards) and leptonai/gpud "
                                     "pkg/nvidia-query/testdata/nvidia-smi-query.535.154.05"
                                     ".out.1.valid: 450 W, 24564 MiB, target 84 C"},
       tdp_w=450.0, memory_mib=24564.0, target_c=84.0),
    _m("RTX 5070 Ti", ("rtx 5070 ti",), {
        "tdp_w memory_mib": f"{_W}Tellterubouzu__NGRC_LM t0iq1cjt (300 W enforced, "
                            "metadata)"}, "tdp_w memory_mib", tdp_w=300.0, memory_mib=16303.0),
    _m("GTX TITAN X", ("gtx titan x",), {
        "tdp_w": "soumith/convnet-benchmarks#71 (a Titan X 'defaults to a power limit of "
                 "250')"}, tdp_w=250.0),
    _m("V100S", ("v100s",), {}),
    _m("V100 PCIe 32GB", ("v100-pcie-32gb",), {
        "tdp_w": f"horovod/horovod#3611; {_W}achingacham__PISPiN_finetune_Llama 48rrvztn",
        "memory_mib": f"{_W}achingacham__PISPiN_finetune_Llama metadata (34089730048 B)"},
       "tdp_w memory_mib", tdp_w=250.0, memory_mib=32510.5),
    _m("V100 PCIe", ("v100-pcie",), {
        "tdp_w": "horovod/horovod#3611 (V100-PCIE-32GB, 250 W limit)"}, tdp_w=250.0),
    _m("V100 SXM2 32GB", ("v100-sxm2-32gb",), {
        "tdp_w memory_mib": f"{_W}surakku__cadence-gemma s7hjifgd (300 W from powerPercent, "
                            "metadata)"}, "tdp_w memory_mib", tdp_w=300.0, memory_mib=32768.0),
    _m("V100 SXM2 16GB", ("v100-sxm2-16gb",), {
        f"tdp_w memory_mib {_TEMPS}": f"{_GLS}V100_x8_smi.py (8 boards, driver 550.127.05): "
                                      "300 W, 16384 MiB, 83/87/90 C"},
       tdp_w=300.0, memory_mib=16384.0, max_operating_c=83.0, slowdown_c=87.0,
       shutdown_c=90.0),
    _m("V100 SXM2", ("v100-sxm2", "v100"), {"tdp_w": "NVIDIA V100 datasheet (SXM2 300 W)"},
       tdp_w=300.0),
    _m("T4", ("t4",), {
        "tdp_w memory_mib": "NVIDIA T4 datasheet",
        _TEMPS: f"{_TG}tesla-t4.xml (driver 515.105.01): 85/93/96 C"},
       tdp_w=70.0, memory_mib=15360.0, max_operating_c=85.0, slowdown_c=93.0,
       shutdown_c=96.0),
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


def gpu_model(name: str | None) -> GpuFigures | None:
    """The catalogue's model for ``nvidia-smi``'s ``name`` (None: unknown or no name)."""
    if not name:
        return None
    low = name.lower()
    for m in GPU_MODELS:
        if any(_word_in(low, k) for k in m.match):
            return m
    return None
