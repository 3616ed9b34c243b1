"""Faults that make a working GPU slower: a cooling loss (``thermal_throttle``), a power
brake (``hw_slowdown``) and a GPU slower than its peers with no reason given
(``straggler``). What each does is listed in :mod:`.faults`.
"""

from __future__ import annotations

from typing import ClassVar

from watchdog import reasons as R
from watchdog.sources.sim.faults_base import Fault
from watchdog.sources.sim.job import GpuState


class ThermalThrottle(Fault):
    name = kind = "thermal_throttle"
    params_help: ClassVar[dict[str, str]] = {
        "cooling": "thermal-resistance multiplier after the cooling loss (2-5, default 4)"}

    def configure(self, params: dict[str, str]) -> None:
        self.cooling = self._num(params, "cooling", 4.0, 2.0, 5.0)
        self.params["cooling"] = self.cooling

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        # The node's thermal model does the rest: a fast climb to the threshold, then
        # the controller trades clocks and power for temperature (see node.py).
        st.cooling = self.cooling
        st.tau_s = 10.0  # the die heats fast once its heat is not carried away


class HwSlowdown(Fault):
    name = kind = "hw_slowdown"

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        u = self.u(g, tk)
        idle = self.job.idle_w[g]
        st.sm_mhz = self.job.model.max_sm_mhz * (0.18 + 0.1 * u)
        st.power = idle + max(0.0, st.power - idle) * 0.25
        st.tensor *= 0.5
        st.reasons = (st.reasons & (R.GPU_IDLE | R.SYNC_BOOST)) | R.HW_POWER_BRAKE | R.HW_SLOWDOWN



class Straggler(Fault):
    name = kind = "straggler"
    params_help: ClassVar[dict[str, str]] = {
        "factor": "clock/throughput factor of the slow GPU (default 0.75)"}

    def configure(self, params: dict[str, str]) -> None:
        self.factor = self._num(params, "factor", 0.75, 0.1, 0.95)
        self.params["factor"] = self.factor

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        if st.util < 50.0:
            return
        f = self.factor
        idle = self.job.idle_w[g]
        st.sm_mhz *= f
        st.power = idle + (st.power - idle) * f
        st.util = round(st.util * (f + (1.0 - f) * 0.3 * self.u(g, tk)))
        st.sm_act *= f
        st.tensor *= f
        st.reasons &= ~R.SW_POWER_CAP
