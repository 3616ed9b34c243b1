"""Hardware events: a GPU off the bus (``gpu_lost``), an XID (``xid``), an uncorrected
ECC error (``ecc``), a degraded PCIe link (``pcie_degraded``) and NVLink CRC errors
(``nvlink_errors``). What each does is listed in :mod:`.faults`.
"""

from __future__ import annotations

from typing import ClassVar

from watchdog.errors import InputError
from watchdog.sources.sim.faults_base import Fault
from watchdog.sources.sim.job import GpuState
from watchdog.sources.sim.models import SimulatedGpu


class GpuLost(Fault):
    name = kind = "gpu_lost"

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        st.lost = True

    def xids(self) -> list[tuple[float, int, int, str]]:
        return [(self.onset, g, 79, "GPU has fallen off the bus") for g in self.gpus]


XID_MESSAGES = {
    13: "Graphics Engine Exception", 31: "GPU memory page fault",
    43: "GPU stopped processing", 45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error", 61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt", 63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error", 79: "GPU has fallen off the bus", 92: "High single-bit ECC error rate",
    94: "Contained ECC error", 95: "Uncontained ECC error", 119: "GSP RPC timeout",
    120: "GSP error",
}


class Xid(Fault):
    name = kind = "xid"
    params_help: ClassVar[dict[str, str]] = {"code": "XID code (default 13; e.g. 48, 79, 94)"}

    def configure(self, params: dict[str, str]) -> None:
        self.code = int(self._num(params, "code", 13, 1, 999))
        if "code" in params and not params["code"].isdigit():
            raise InputError(f"{self.where}: code={params['code']!r}: expected an integer")
        self.params["code"] = self.code
        if self.end is None:
            self.end = self.onset  # an event, not a state

    def xids(self) -> list[tuple[float, int, int, str]]:
        msg = XID_MESSAGES.get(self.code, "simulated XID")
        return [(self.onset, g, self.code, msg) for g in self.gpus]


class Ecc(Fault):
    name = kind = "ecc"

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        st.ecc_unc += 1
        st.remap_pending = 1


class PcieDegraded(Fault):
    name = kind = "pcie_degraded"
    params_help: ClassVar[dict[str, str]] = {
        "width": "link width after the fault (default 8)",
        "gen": "link generation after the fault (default: unchanged)",
        "rate": "PCIe replays per minute while degraded (default 30)"}

    def configure(self, params: dict[str, str]) -> None:
        m = self.job.model
        self.width = int(self._num(params, "width", 8, 1, m.pcie_max_width))
        self.gen = int(self._num(params, "gen", m.pcie_max_gen, 1, m.pcie_max_gen))
        self.rate = self._num(params, "rate", 30.0, 0.0, 1e6)
        if self.width == m.pcie_max_width and self.gen == m.pcie_max_gen:
            raise InputError(f"{self.where}: width={self.width} gen={self.gen} is the full "
                             "link; give a lower width= or gen=")
        self.params.update(width=self.width, gen=self.gen, rate=self.rate)

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        st.pcie_width = self.width
        st.pcie_gen = self.gen
        st.replay_extra += int(self.rate * (t - self.onset) / 60.0)
        st.pcie_tx *= 0.5
        st.pcie_rx *= 0.5


class NvlinkErrors(Fault):
    name = kind = "nvlink_errors"
    params_help: ClassVar[dict[str, str]] = {
        "rate": "NVLink CRC flit errors per minute (default 20)"}

    @classmethod
    def supports(cls, model: SimulatedGpu) -> bool:
        return model.nvlink

    def configure(self, params: dict[str, str]) -> None:
        if not self.supports(self.job.model):
            raise InputError(f"{self.where}: {self.job.model.key} has no NVLink "
                             "(try --gpu-model h100-sxm)")
        self.rate = self._num(params, "rate", 20.0, 1.0, 1e6)
        self.params["rate"] = self.rate

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        st.nvlink_extra += 1 + int(self.rate * (t - self.onset) / 60.0)
