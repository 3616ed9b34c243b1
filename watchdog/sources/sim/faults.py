"""One fault per scenario, injected on top of the healthy job.

Each :class:`Fault` edits a GPU's :class:`~watchdog.sources.sim.job.GpuState` while it is
active (``onset <= t < end``; ``end`` None = until the end) and may emit XID events.
Times here are seconds since the node started. Scenarios and their parameters (every
scenario also takes ``gpus=`` and ``for=DURATION``):

* ``healthy``: nothing injected.
* ``comm_hang`` (``dead=I``): util pinned at 100 %, power near idle, clocks up, no
  limiter bits, GPM ~0, memory held; with ``dead=I`` that rank's GPU drops to 0 % and
  loses its process while the others hang.
* ``stall``: the process holds memory, util 0, idle power and clocks, GPU idle bit.
* ``thermal_throttle`` (``cooling=X``): cooling loss; temperature climbs to the slowdown
  threshold in seconds, SW/HW thermal bits (0x20, 0x40+0x8), clocks and power fall to
  hold it there.
* ``hw_slowdown``: power brake (0x80+0x8) at normal temperature, clocks collapse to
  ~20-30 % of max, power falls, util stays.
* ``memory_pressure`` (``ramp=DUR``): a leak grows for ``ramp`` s (default 240), then
  memory sits at the limit from the onset on.
* ``gpu_lost``: samples become ``Sample(lost=True)``; XID 79 at the onset.
* ``xid`` (``code=N``, default 13): one XID event and nothing else, so its score is
  unambiguous (combine with ``gpu_lost`` or ``ecc`` for consequences).
* ``ecc``: uncorrected volatile ECC +1, one uncorrectable row remap pending.
* ``pcie_degraded`` (``width=``, default 8; ``gen=``; ``rate=`` replays/min, default 30):
  the link trains down and replays grow.
* ``nvlink_errors`` (``rate=`` CRC errors/min, default 20): NVLink flit CRC errors grow,
  with replays (a quarter of them) and one link recovery; models with NVLink only.
* ``straggler`` (``factor=X``, default 0.75): one GPU persistently slower than its
  peers (clocks, power, util duty) with no limiter bit to explain it.
* Faults no rule names (the anomaly model's to find; ``docs/model.md``), each on one GPU
  while it works (util >= 50 %), with no clock-event reason to explain it:
  ``power_mismatch`` (``factor=``, default 0.7): power falls to that share of its busy
  draw above idle while utilization, clocks and activity stay; ``slow_no_reason``
  (``factor=``, default 0.9): the SM clock sags to that share, too little for the
  straggler rule, and the power-cap bit is not set; ``temp_drift`` (``rate=`` C/min,
  default 3): cooling degrades so temperature climbs at constant power, stopping 6 C
  short of the throttle; ``hbm_sag`` (``factor=``, default 0.8): the memory clock and
  DRAM bandwidth sag; ``bursty_util`` (``period=`` s, default 6): one tick in every
  period drops to 30-60 % util (mean stays above 90 %, so no straggler).
* ``inference_server``: not a fault, a look-alike. From the onset the node serves a model
  (vLLM: ``python -m vllm.entrypoints...``): memory pinned at 90 % (the pre-allocated KV
  cache), bursts of full use of 1-10 min between idle gaps of 6-60 min. No incident is
  expected (it is not in the ground truth): a stall alert on it is a false alert.

Defaults: onset 300 s after start for the first scenario, +600 s for each following
one, moved past a healthy checkpoint if it would fall within a minute of one;
``comm_hang`` and ``stall`` (node scope) take every GPU no other scenario claims,
the others take one GPU each from the highest index down, so combined scenarios do not
overlap. :meth:`Fault.record` is the ground truth.
"""

from __future__ import annotations

import bisect
from typing import Any, ClassVar

from watchdog import reasons as R
from watchdog.errors import InputError
from watchdog.sources.sim import noise
from watchdog.sources.sim.job import GpuState, TrainingJob
from watchdog.sources.sim.models import GpuModel, get_model
from watchdog.sources.sim.spec import Request, parse_duration, parse_gpus

DEFAULT_ONSET_S = 300.0
ONSET_STAGGER_S = 600.0
_S_FAULT = 101  # noise stream base for faults


class Fault:
    """Base class: a scenario's GPUs, active window and parameters."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    scope: ClassVar[str] = "gpu"  # "gpu": one GPU by default; "node": all unclaimed GPUs
    expects_incident: ClassVar[bool] = True  # False: a look-alike, not in the ground truth
    params_help: ClassVar[dict[str, str]] = {}

    def __init__(self, gpus: tuple[int, ...], onset: float, end: float | None,
                 params: dict[str, str], job: TrainingJob, where: str) -> None:
        self.gpus = gpus
        self.gpu_set = frozenset(gpus)
        self.onset = onset
        self.end = end
        self.job = job
        self.where = where
        self.params: dict[str, Any] = {}
        self._bases = {g: noise.key(job.seed, _S_FAULT, g) for g in gpus}
        self.configure(params)

    @classmethod
    def supports(cls, model: GpuModel) -> bool:
        """Whether this scenario can be injected into a GPU of ``model``."""
        return True

    def configure(self, params: dict[str, str]) -> None:
        """Read scenario parameters (already checked against ``params_help``)."""

    def _num(self, params: dict[str, str], key: str, default: float, lo: float,
             hi: float) -> float:
        if key not in params:
            return default
        try:
            v = float(params[key])
        except ValueError:
            v = float("nan")
        if not lo <= v <= hi:
            raise InputError(f"{self.where}: {key}={params[key]!r}: expected a number in "
                             f"{lo:g}..{hi:g}")
        return v

    def starts(self) -> float:
        """First time (s) the fault changes anything (before ``onset`` for a ramp)."""
        return self.onset

    def active(self, t: float) -> bool:
        return self.starts() <= t and (self.end is None or t < self.end)

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        """Edit ``st`` for GPU ``g`` at ``t`` (only called while active, for own GPUs)."""

    def xids(self) -> list[tuple[float, int, int, str]]:
        """XID events ``(t, gpu, code, message)`` this fault emits."""
        return []

    def truth_gpus(self) -> tuple[int, ...]:
        """The GPUs a detector should name for this fault."""
        return self.gpus

    def record(self) -> dict[str, Any]:
        """Ground truth (times relative to start; the source makes them absolute)."""
        return {"kind": self.kind, "scenario": self.name, "gpus": self.truth_gpus(),
                "onset": self.onset, "end": self.end, "params": dict(self.params)}

    def u(self, g: int, tk: int) -> float:
        """Uniform noise in [0, 1) for GPU ``g`` at tick ``tk`` (same for every fault)."""
        return noise.unit_at(self._bases[g], tk)


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


class MemoryPressure(Fault):
    name = kind = "memory_pressure"
    params_help: ClassVar[dict[str, str]] = {
        "ramp": "how long the leak grows before memory hits the limit (default 240s)"}

    def configure(self, params: dict[str, str]) -> None:
        self.ramp = (parse_duration(params["ramp"], f"{self.where}: ramp")
                     if "ramp" in params else 240.0)
        self.params["ramp"] = self.ramp

    def starts(self) -> float:
        return max(0.0, self.onset - self.ramp)

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        total = self.job.model.memory_total_mib
        if t >= self.onset:  # at the limit: the allocator has taken everything
            st.mem_used = total - 40.0 - 60.0 * self.u(g, tk // 10)
            return
        # the leak grows towards 96 % of memory; the last allocation at the onset fills it
        start = self.starts()
        frac = (t - start) / (self.onset - start) if self.onset > start else 1.0
        st.mem_used = st.mem_used + (0.96 * total - st.mem_used) * frac


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
    def supports(cls, model: GpuModel) -> bool:
        return model.nvlink

    def configure(self, params: dict[str, str]) -> None:
        if not self.supports(self.job.model):
            raise InputError(f"{self.where}: {self.job.model.key} has no NVLink "
                             "(try --gpu-model h100-sxm)")
        self.rate = self._num(params, "rate", 20.0, 1.0, 1e6)
        self.params["rate"] = self.rate

    def apply(self, g: int, t: float, st: GpuState, tk: int) -> None:
        st.nvlink_extra += 1 + int(self.rate * (t - self.onset) / 60.0)


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


class InferenceServer(Fault):
    """An inference server in place of the training job (see the module docs)."""

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
            gap = noise.uniform(*self.GAP_S, self.job.seed, _S_FAULT + 50, k)
            burst = noise.uniform(*self.BURST_S, self.job.seed, _S_FAULT + 51, k)
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


UNNAMED = ("power_mismatch", "slow_no_reason", "temp_drift", "hbm_sag", "bursty_util")


SCENARIOS: dict[str, type[Fault] | None] = {
    "healthy": None,
    **{c.name: c for c in (CommHang, Stall, ThermalThrottle, HwSlowdown, MemoryPressure,
                           GpuLost, Xid, Ecc, PcieDegraded, NvlinkErrors, Straggler,
                           InferenceServer, PowerMismatch, SlowNoReason, TempDrift,
                           HbmSag, BurstyUtil)},
}
COMMON_PARAMS = {"gpus": "GPU list: 3, 0-3, 0+2, all", "for": "duration (default: until the end)"}


def scenarios_for(model: str) -> list[str]:
    """The scenario names that can run on GPU model ``model`` (e.g. no NVLink on PCIe)."""
    m = get_model(model)
    return [name for name, cls in SCENARIOS.items() if cls is None or cls.supports(m)]


def _fmt(gpus: tuple[int, ...]) -> str:
    return "+".join(str(g) for g in gpus)


def _clear_of_checkpoints(onset: float, job: TrainingJob) -> float:
    """Move a default onset past any checkpoint within its first minute (during a pause
    a cooling loss or a slow GPU would not show yet, muddying the ground truth)."""
    for _ in range(10):
        c = next((c for dt in (0.0, 30.0, 60.0) if (c := job.checkpoint(onset + dt))), None)
        if c is None:
            return onset
        onset = c[2] + 30.0
    return onset


def build(requests: list[Request], job: TrainingJob, spec: str) -> list[Fault]:
    """Turn requests into faults, filling default onsets and GPUs (see module docstring)."""
    n = job.n
    wanted = [r for r in requests if r.name != "healthy"]
    for r in requests:
        if r.name not in SCENARIOS:
            raise InputError(f"--source {spec!r}: unknown scenario {r.name!r} "
                             f"(valid: {', '.join(SCENARIOS)})")
        cls = SCENARIOS[r.name]
        allowed = dict(COMMON_PARAMS, **(cls.params_help if cls else {}))
        for k in r.params:
            if k not in allowed or cls is None:
                valid = ", ".join(allowed) if cls else "none"
                raise InputError(f"--source {spec!r}: {r.text!r}: unknown parameter {k!r} "
                                 f"(valid for {r.name}: {valid})")
    where = {id(r): f"--source {spec!r}: {r.text!r}" for r in wanted}
    gpus: dict[int, tuple[int, ...]] = {}
    for r in wanted:
        if "gpus" in r.params:
            gpus[id(r)] = parse_gpus(r.params["gpus"], n, f"{where[id(r)]}: gpus")
    claimed = {g for gs in gpus.values() for g in gs}
    free = [g for g in range(n) if g not in claimed]
    for r in wanted:  # single-GPU scenarios: highest free index first
        cls = SCENARIOS[r.name]
        if id(r) not in gpus and cls is not None and cls.scope == "gpu":
            if not free:
                raise InputError(f"{where[id(r)]}: no GPU left for it; give gpus=")
            gpus[id(r)] = (free.pop(),)
    node_reqs = [r for r in wanted if id(r) not in gpus]
    for i, r in enumerate(node_reqs):  # node scenarios share what is left, in blocks
        share = free[i * len(free) // len(node_reqs):(i + 1) * len(free) // len(node_reqs)]
        if not share:
            raise InputError(f"{where[id(r)]}: no GPU left for it; give gpus=")
        gpus[id(r)] = tuple(share)
    faults = []
    for pos, r in enumerate(wanted):
        cls = SCENARIOS[r.name]
        assert cls is not None
        onset = r.onset if r.onset is not None else _clear_of_checkpoints(
            DEFAULT_ONSET_S + ONSET_STAGGER_S * pos, job)
        end = None
        if "for" in r.params:
            end = onset + parse_duration(r.params["for"], f"{where[id(r)]}: for")
        faults.append(cls(gpus[id(r)], onset, end, r.params, job, where[id(r)]))
    return faults
