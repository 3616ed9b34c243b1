"""Faults no rule names, the anomaly model's to find (``docs/model.md``): each on one GPU
while it works (util >= 50 %), with no clock-event reason to explain it
(``power_mismatch``, ``slow_no_reason``, ``temp_drift``, ``hbm_sag``, ``bursty_util``).
What each does is listed in :mod:`.faults`.
"""

from __future__ import annotations

from typing import ClassVar

from watchdog import reasons as R
from watchdog.sources.sim.faults_base import Fault
from watchdog.sources.sim.job import GpuState


class _Unnamed(Fault):
    """A fault no rule names; applies only while the GPU works (util >= 50 %)."""

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        if st.util >= 50.0:
            self.edit(g, t, st, tk)

    def edit(self, g: int, t: float, st: GpuState, tk: int) -> None:
        """Change ``st`` (busy GPU)."""


class PowerMismatch(_Unnamed):
    name, kind = "power_mismatch", "anomaly"
    params_help: ClassVar[dict[str, str]] = {
        "factor": "share of the busy draw above idle left (default 0.7)"}

    def configure(self, params: dict[str, str]) -> None:
        self.factor = self._num(params, "factor", 0.7, 0.3, 0.95)
        self.params["factor"] = self.factor

    def edit(self, g: int, t: float, st: GpuState, tk: int) -> None:
        idle = self.job.idle_w[g]
        st.power = idle + (st.power - idle) * self.factor
        st.reasons &= ~R.SW_POWER_CAP


class SlowNoReason(_Unnamed):
    name, kind = "slow_no_reason", "anomaly"
    params_help: ClassVar[dict[str, str]] = {"factor": "SM clock share left (default 0.9)"}

    def configure(self, params: dict[str, str]) -> None:
        self.factor = self._num(params, "factor", 0.9, 0.5, 0.97)
        self.params["factor"] = self.factor

    def edit(self, g: int, t: float, st: GpuState, tk: int) -> None:
        st.sm_mhz *= self.factor
        st.reasons &= ~(R.SW_POWER_CAP | R.SYNC_BOOST)


class TempDrift(_Unnamed):
    name, kind = "temp_drift", "anomaly"
    params_help: ClassVar[dict[str, str]] = {
        "rate": "temperature climb at the busy draw, C/min (default 3)"}

    def configure(self, params: dict[str, str]) -> None:
        self.rate = self._num(params, "rate", 3.0, 0.2, 20.0)
        self.params["rate"] = self.rate

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        m = self.job.model
        heat = self.job.c_per_w[g] * m.busy_low_w  # C above ambient per unit of cooling
        grown = 1.0 + self.rate * max(0.0, t - self.onset) / 60.0 / heat
        # stop short of the throttle at the high busy draw: no thermal bit, no rule
        top = (m.temp_max_operating_c - 6.0 - self.job.ambient_c[g]) / (
            self.job.c_per_w[g] * m.busy_high_w)
        st.cooling = max(1.0, min(grown, top))


class HbmSag(_Unnamed):
    name, kind = "hbm_sag", "anomaly"
    params_help: ClassVar[dict[str, str]] = {
        "factor": "memory clock and bandwidth share left (default 0.8)"}

    def configure(self, params: dict[str, str]) -> None:
        self.factor = self._num(params, "factor", 0.8, 0.3, 0.95)
        self.params["factor"] = self.factor

    def edit(self, g: int, t: float, st: GpuState, tk: int) -> None:
        st.mem_mhz = self.job.model.max_mem_mhz * self.factor
        st.dram *= self.factor
        st.mem_util *= self.factor


class BurstyUtil(_Unnamed):
    name, kind = "bursty_util", "anomaly"
    params_help: ClassVar[dict[str, str]] = {
        "period": "one low tick every this many seconds (default 6)"}

    def configure(self, params: dict[str, str]) -> None:
        self.period = self._num(params, "period", 6.0, 2.0, 60.0)
        self.params["period"] = self.period

    def edit(self, g: int, t: float, st: GpuState, tk: int) -> None:
        if int(t) % int(self.period) == 0:
            f = 0.3 + 0.3 * self.u(g, tk)
            idle = self.job.idle_w[g]
            st.util = round(100.0 * f)
            st.power = idle + (st.power - idle) * (0.4 + 0.6 * f)
            st.sm_act *= f
            st.tensor *= f
