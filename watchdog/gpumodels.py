"""The figures of real GPU models that a log may lack, for the rules' fallbacks
(``docs/rules.md``, "What each rule uses"): the power limit (TDP, W), the idle power (W:
no work, idle clocks), the framebuffer size (MiB, as NVML reports it) and the temperature
thresholds ``nvidia-smi -q`` prints (C), each with its source. Found by the GPU's
``nvidia-smi`` name (:func:`gpu_model`). The simulator's parts are
:mod:`watchdog.sources.sim.models`.

This module is imported on the ``watchdog check`` start-up path: keep it free of heavy
imports.
"""

from __future__ import annotations

from dataclasses import dataclass

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
