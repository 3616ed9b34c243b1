"""GPU model specifications for the simulated node, with real numbers.

Each :class:`SimulatedGpu` carries what NVML reports for that part (inventory) and the
levels the simulator needs to behave like it (idle and busy power, clocks, thermal
response). Sources for the numbers:

* H100 SXM5 80GB: a real ``nvidia-smi -q`` of an 8x H100 node, driver 565.57.01
  (``thamada/nvidia-smi:nvsim/H100SXMx8_smi.py``, quoted in
  ``reference/anchors-mission.md`` §4.6): 81559 MiB, 700 W default/max and 200 W min
  limit, idle 75-101 W at P0, SM 345 MHz idle / 1980 MHz max, memory 2619 MHz, PCIe
  gen5 x16, bus ids 18/2A/3A/5D/9A/AB/BA/DB. Its temperatures are T.Limit margins
  (current 30 C with 57 C of margin puts T.Limit = max operating at 87 C; slowdown at
  -2 C margin = 89 C; shutdown at -8 C margin = 95 C). Busy levels ~390 W and ~690 W at
  100 % util and the 10-20 C hotter GPU come from the real 8x H100 log in
  ``real-telemetry/karpathy__nanoGPT``; a hung collective draws ~100 W of 700 W
  (NVIDIA-NeMo/Speech#9291).
* A100 PCIe 40GB: ``nvidia-smi`` of A100 PCIe boards: 250 W limit (150 W min), ~36 W
  idle at P0, SM 1410 MHz max / 210 MHz idle, memory 1215 MHz, PCIe gen4 x16, shutdown
  92 C, slowdown 89 C, max operating 85 C. No GPM (Hopper and newer only), no NVLink
  on the PCIe board. A hung collective on a 250 W PCIe part sits at 40-47 W
  (horovod/horovod#3611, V100 PCIe).

Power in W, clocks in MHz, memory in MiB, temperatures in C, time constants in s.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.errors import InputError


@dataclass(frozen=True, slots=True)
class SimulatedGpu:
    """How the simulator plays one GPU model: its inventory and the levels it behaves
    by (see the module docstring for sources). The figures the rules fall back on for a
    real GPU are the catalogue's (:class:`watchdog.catalogue.GpuFigures`)."""

    key: str
    name: str  # product name as NVML reports it
    vbios: str
    memory_total_mib: float
    power_limit_w: float  # default = enforced
    power_min_w: float
    power_max_w: float
    idle_w: float  # P0, no work, no context
    startup_w: float  # job start-up: context up, clocks raised, ~0 % util
    busy_low_w: float  # the "low" busy phase at 100 % util (e.g. FP32 GEMM)
    busy_high_w: float  # the "high" busy phase (bf16 training), near the cap
    spin_w: float  # a kernel spinning inside a collective: 100 % util, no arithmetic
    max_sm_mhz: float
    idle_sm_mhz: float
    max_mem_mhz: float
    ambient_c: float  # idle temperature
    c_per_w: float  # steady-state temperature rise per W above 0
    tau_s: float  # thermal time constant
    mem_temp_offset_c: float  # HBM sensor above the core sensor
    temp_max_operating_c: float
    temp_slowdown_c: float
    temp_shutdown_c: float
    pcie_max_gen: int
    pcie_max_width: int
    gpm: bool
    nvlink: bool
    bus_ids: tuple[str, ...]  # PCI bus numbers of GPUs 0..7 on a typical server


H100_SXM = SimulatedGpu(
    key="h100-sxm", name="NVIDIA H100 80GB HBM3", vbios="96.00.74.00.01",
    memory_total_mib=81559.0, power_limit_w=700.0, power_min_w=200.0, power_max_w=700.0,
    idle_w=78.0, startup_w=130.0, busy_low_w=390.0, busy_high_w=690.0, spin_w=105.0,
    max_sm_mhz=1980.0, idle_sm_mhz=345.0, max_mem_mhz=2619.0,
    ambient_c=27.0, c_per_w=0.056, tau_s=60.0, mem_temp_offset_c=6.0,
    temp_max_operating_c=87.0, temp_slowdown_c=89.0, temp_shutdown_c=95.0,
    pcie_max_gen=5, pcie_max_width=16, gpm=True, nvlink=True,
    bus_ids=("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"),
)

A100_PCIE = SimulatedGpu(
    key="a100-pcie", name="NVIDIA A100-PCIE-40GB", vbios="92.00.25.00.08",
    memory_total_mib=40960.0, power_limit_w=250.0, power_min_w=150.0, power_max_w=250.0,
    idle_w=35.0, startup_w=58.0, busy_low_w=165.0, busy_high_w=245.0, spin_w=52.0,
    max_sm_mhz=1410.0, idle_sm_mhz=210.0, max_mem_mhz=1215.0,
    ambient_c=29.0, c_per_w=0.15, tau_s=60.0, mem_temp_offset_c=8.0,
    temp_max_operating_c=85.0, temp_slowdown_c=89.0, temp_shutdown_c=92.0,
    pcie_max_gen=4, pcie_max_width=16, gpm=False, nvlink=False,
    bus_ids=("01", "25", "41", "61", "81", "A1", "C1", "E1"),
)

MODELS: dict[str, SimulatedGpu] = {m.key: m for m in (H100_SXM, A100_PCIE)}


def get_model(key: str) -> SimulatedGpu:
    """The model called ``key``; :class:`InputError` lists the valid ones."""
    try:
        return MODELS[key.strip().lower()]
    except KeyError:
        raise InputError(
            f"--gpu-model {key!r}: unknown simulated GPU model "
            f"(valid: {', '.join(sorted(MODELS))})") from None


def pci_bus_id(model: SimulatedGpu, index: int) -> str:
    """NVML-style bus id (``00000000:18:00.0``); GPUs past the 8th go to the next domain."""
    domain, slot = divmod(index, len(model.bus_ids))
    return f"{domain:08X}:{model.bus_ids[slot]}:00.0"
