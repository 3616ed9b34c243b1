"""Faults of the training job itself: it hangs (``comm_hang``), stalls (``stall``) or
leaks memory (``memory_pressure``); the ranks on this node die (``rank_crash``: what the
nodes of a multi-node job that hang are waiting for); and a look-alike that is no fault
(``inference_server``).
What each does is listed in :mod:`.faults`.
"""

from __future__ import annotations

import bisect
from typing import ClassVar

from watchdog import reasons as R
from watchdog.errors import InputError
from watchdog.sources.sim import noise
from watchdog.sources.sim.faults_base import S_FAULT, Fault
from watchdog.sources.sim.job import GpuState
from watchdog.sources.sim.spec import parse_duration, parse_gpus


class CommHang(Fault):
    name = kind = "comm_hang"
    scope = "node"
    params_help: ClassVar[dict[str, str]] = {"dead": "index of a rank that died (0 % util, "
                                             "no process); the others hang"}

    def configure(self, params: dict[str, str]) -> None:
        self.dead: int | None = None
        if "dead" in params:
            d = parse_gpus(params["dead"], self.job.n, f"{self.where}: dead")
            if len(d) != 1 or d[0] not in self.gpu_set:
                raise InputError(f"{self.where}: dead={params['dead']!r}: expected one GPU "
                                 f"among the hung ones ({_fmt(self.gpus)})")
            self.dead = d[0]
            self.params["dead"] = self.dead

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        m = self.job.model
        u = self.u(g, tk)
        st.mem_util = st.tensor = 0.0
        st.pcie_tx = st.pcie_rx = 1.0e4 + 2.0e4 * u
        if g == self.dead:  # the rank's process died: idle GPU, memory freed
            st.util = 0.0
            st.power = self.job.idle_w[g] * (1.0 + 0.04 * u)
            st.sm_mhz = m.idle_sm_mhz
            st.reasons = R.GPU_IDLE
            st.process = False
            st.mem_used = 1.0
            st.sm_act = st.sm_occ = st.dram = 0.0
            return
        st.util = 100.0
        st.power = m.spin_w * (0.95 + 0.1 * u)
        st.sm_mhz = m.max_sm_mhz
        st.reasons = 0
        st.sm_act, st.sm_occ, st.dram = 0.5 + 1.5 * u, 0.5 + 1.0 * u, 0.3 * u

    def truth_gpus(self) -> tuple[int, ...]:
        return tuple(g for g in self.gpus if g != self.dead)


class RankCrash(Fault):
    """Every rank on this node exits (an OOM kill, a segfault, the local launcher tearing
    its workers down): the GPUs go idle with their memory freed and no process. Alone,
    the node shows nothing wrong: an idle node. In a multi-node job it is the node the
    others hang for (run the others with ``comm_hang``), and only the fleet rules, which
    see every node of the job, name it (docs/fleet.md). No incident is expected of the
    node itself (not in the ground truth)."""

    name = "rank_crash"
    kind = "comm_hang"
    scope = "node"
    expects_incident = False

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        u = self.u(g, tk)
        st.util = st.mem_util = st.sm_act = st.sm_occ = st.tensor = st.dram = 0.0
        st.power = self.job.idle_w[g] * (1.0 + 0.04 * u)
        st.sm_mhz = self.job.model.idle_sm_mhz
        st.reasons = R.GPU_IDLE
        st.process = False
        st.mem_used = 1.0
        st.pcie_tx = st.pcie_rx = 1.0e3 * u


class Stall(Fault):
    name = kind = "stall"
    scope = "node"

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        u = self.u(g, tk)
        st.util = st.mem_util = st.sm_act = st.sm_occ = st.tensor = st.dram = 0.0
        st.power = self.job.idle_w[g] * 1.05 + 8.0 * u
        st.sm_mhz = self.job.model.idle_sm_mhz
        st.reasons = R.GPU_IDLE
        st.pcie_tx = st.pcie_rx = 5.0e3 * u



class MemoryPressure(Fault):
    """A leak: from the onset the GPU's memory grows steadily from the job's hold to the
    limit over ``ramp`` (default 30 min; the real out-of-memory run in real-wandb,
    mjmj531/hllm, grew 89.5 -> 99.8 % at 0.25 % a minute for 43 min); at the limit the
    next allocation fails and the job's process dies of out-of-memory: the GPU goes idle
    with its memory freed. An allocator filling the memory at start and holding it is the
    healthy job's own behaviour, not this fault."""

    name = kind = "memory_pressure"
    params_help: ClassVar[dict[str, str]] = {
        "ramp": "how long the leak grows from the job's level to the limit, after which "
                "the job dies of out-of-memory (default 30m)"}

    def configure(self, params: dict[str, str]) -> None:
        self.ramp = (parse_duration(params["ramp"], f"{self.where}: ramp")
                     if "ramp" in params else 1800.0)
        self.params["ramp"] = self.ramp

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        total = self.job.model.memory_total_mib
        if t >= self.onset + self.ramp:  # out of memory: the process died
            u = self.u(g, tk)
            st.util = st.mem_util = st.sm_act = st.sm_occ = st.tensor = st.dram = 0.0
            st.power = self.job.idle_w[g] * (1.0 + 0.04 * u)
            st.sm_mhz = self.job.model.idle_sm_mhz
            st.reasons = R.GPU_IDLE
            st.process = False
            st.mem_used = 1.0
            st.pcie_tx = st.pcie_rx = 1.0e3 * u
            return
        frac = (t - self.onset) / self.ramp if self.ramp > 0 else 1.0
        st.mem_used = st.mem_used + (total - 40.0 - st.mem_used) * frac


class InferenceServer(Fault):
    """An inference server in place of the training job (see :mod:`.faults`)."""

    name = kind = "inference_server"
    scope = "node"
    expects_incident = False
    MEM_FRAC = 0.90  # vLLM's default gpu_memory_utilization
    BURST_S = (60.0, 600.0)
    GAP_S = (360.0, 3600.0)
    HORIZON_S = 30 * 86400.0

    def configure(self, params: dict[str, str]) -> None:
        """The burst schedule (s since start), from the job's seed: same for every GPU
        (one model sharded over the node serves each request on all of them)."""
        self.bursts: list[tuple[float, float]] = []
        t, k = self.onset, 0
        while t < self.onset + self.HORIZON_S:
            gap = noise.uniform(*self.GAP_S, self.job.seed, S_FAULT + 50, k)
            burst = noise.uniform(*self.BURST_S, self.job.seed, S_FAULT + 51, k)
            self.bursts.append((t + gap, t + gap + burst))
            t, k = t + gap + burst, k + 1

    def _busy(self, t: float) -> bool:
        i = bisect.bisect_right(self.bursts, (t, float("inf"))) - 1
        return i >= 0 and self.bursts[i][0] <= t < self.bursts[i][1]

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        m = self.job.model
        u = self.u(g, tk)
        st.serving = st.process = True
        st.mem_used = self.MEM_FRAC * m.memory_total_mib
        st.reasons = 0
        if self._busy(t):  # decoding: busy, lighter than training
            st.util = 100.0 - round(8.0 * u)
            st.power = m.busy_low_w * (0.9 + 0.1 * u)
            st.sm_mhz = m.max_sm_mhz
            st.mem_util = 30.0 + 20.0 * u
            st.sm_act, st.sm_occ, st.tensor, st.dram = 60.0 + 20 * u, 30.0, 20.0, 50.0
            st.pcie_tx = st.pcie_rx = 5.0e4 + 1.0e5 * u
            return
        st.util = st.mem_util = st.sm_act = st.sm_occ = st.tensor = st.dram = 0.0
        st.power = self.job.idle_w[g] * 1.1 + 5.0 * u
        st.sm_mhz = m.idle_sm_mhz
        st.reasons = R.GPU_IDLE
        st.pcie_tx = st.pcie_rx = 1.0e3 * u



def _fmt(gpus: tuple[int, ...]) -> str:
    return "+".join(str(g) for g in gpus)
