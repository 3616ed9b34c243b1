"""One fault per scenario, injected on top of the healthy job: the registry of scenarios
(:data:`SCENARIOS`) and the placement of combined ones (:func:`build`).

Each :class:`~.faults_base.Fault` edits a GPU's :class:`~watchdog.sources.sim.job.GpuState`
while it is active (``onset <= t < end``; ``end`` None = until the end) and may emit XID
events. Times here are seconds since the node started. Scenarios and their parameters
(every scenario also takes ``gpus=`` and ``for=DURATION``):

* ``healthy``: nothing injected.
* ``comm_hang`` (``dead=I``): util pinned at 100 %, power near idle, clocks up, no
  limiter bits, GPM ~0, memory held; with ``dead=I`` that rank's GPU drops to 0 % and
  loses its process while the others hang.
* ``stall``: the process holds memory, util 0, idle power and clocks, GPU idle bit.
* ``rank_crash``: every rank on the node exits: util 0, idle power and clocks, memory
  freed, no process. Not in the ground truth (alone it is an idle node); in a simulated
  fleet it is the node the others' ``comm_hang`` waits for, which the fleet rules name.
* ``node(id=K)`` is no scenario but says which node of a multi-node job this is: the
  nodes of one job share ``--seed`` (the job: its checkpoints, phases and Slurm job id)
  and differ in ``id`` (their GPUs: levels, noise, UUIDs). Without it the node is node
  0, the seed's own.
* ``thermal_throttle`` (``cooling=X``): cooling loss; temperature climbs to the slowdown
  threshold in seconds, SW/HW thermal bits (0x20, 0x40+0x8), clocks and power fall to
  hold it there.
* ``hw_slowdown``: power brake (0x80+0x8) at normal temperature, clocks collapse to
  ~20-30 % of max, power falls, util stays.
* ``memory_pressure`` (``ramp=DUR``): a leak: from the onset memory grows steadily from
  the job's hold to the limit over ``ramp`` (default 30 min), then the job dies of
  out-of-memory (idle, memory freed).
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

The faults by family: the job's own (``faults_job.py``: comm_hang, stall,
memory_pressure, inference_server), a slower GPU (``faults_slow.py``: thermal_throttle,
hw_slowdown, straggler), hardware events (``faults_hw.py``: gpu_lost, xid, ecc,
pcie_degraded, nvlink_errors), faults no rule names (``faults_unnamed.py``), and their
base class (``faults_base.py``).
"""

from __future__ import annotations

from watchdog.errors import InputError
from watchdog.sources.sim.faults_base import Fault
from watchdog.sources.sim.faults_hw import Ecc, GpuLost, NvlinkErrors, PcieDegraded, Xid
from watchdog.sources.sim.faults_job import (
    CommHang,
    InferenceServer,
    MemoryPressure,
    RankCrash,
    Stall,
)
from watchdog.sources.sim.faults_slow import HwSlowdown, Straggler, ThermalThrottle
from watchdog.sources.sim.faults_unnamed import (
    BurstyUtil,
    HbmSag,
    PowerMismatch,
    SlowNoReason,
    TempDrift,
)
from watchdog.sources.sim.job import TrainingJob
from watchdog.sources.sim.models import get_model
from watchdog.sources.sim.spec import Request, parse_duration, parse_gpus

DEFAULT_ONSET_S = 300.0
ONSET_STAGGER_S = 600.0


UNNAMED = ("power_mismatch", "slow_no_reason", "temp_drift", "hbm_sag", "bursty_util")


SCENARIOS: dict[str, type[Fault] | None] = {
    "healthy": None,
    **{c.name: c for c in (CommHang, Stall, ThermalThrottle, HwSlowdown, MemoryPressure,
                           GpuLost, Xid, Ecc, PcieDegraded, NvlinkErrors, Straggler,
                           InferenceServer, PowerMismatch, SlowNoReason, TempDrift,
                           HbmSag, BurstyUtil, RankCrash)},
}
#: The item that names the node of a multi-node job (``node(id=K)``), not a scenario.
NODE_ITEM = "node"
NODE_ID_MAX = 1_000_000
COMMON_PARAMS = {"gpus": "GPU list: 3, 0-3, 0+2, all", "for": "duration (default: until the end)"}


def scenarios_for(model: str) -> list[str]:
    """The scenario names that can run on GPU model ``model`` (e.g. no NVLink on PCIe)."""
    m = get_model(model)
    return [name for name, cls in SCENARIOS.items() if cls is None or cls.supports(m)]


def _clear_of_checkpoints(onset: float, job: TrainingJob) -> float:
    """Move a default onset past any checkpoint within its first minute (during a pause
    a cooling loss or a slow GPU would not show yet, muddying the ground truth)."""
    for _ in range(10):
        c = next((c for dt in (0.0, 30.0, 60.0) if (c := job.checkpoint(onset + dt))), None)
        if c is None:
            return onset
        onset = c[2] + 30.0
    return onset


def node_id(requests: list[Request], spec: str) -> int:
    """The node of a multi-node job the spec names (``node(id=K)``; 0 without it)."""
    items = [r for r in requests if r.name == NODE_ITEM]
    if not items:
        return 0
    r = items[0]
    if len(items) > 1 or r.onset is not None or set(r.params) != {"id"}:
        raise InputError(f"--source {spec!r}: {r.text!r}: write node(id=K) once, K a "
                         f"number 1..{NODE_ID_MAX}")
    text = r.params["id"].strip()
    if not text.isdigit() or not 1 <= int(text) <= NODE_ID_MAX:
        raise InputError(f"--source {spec!r}: {r.text!r}: id must be a number 1.."
                         f"{NODE_ID_MAX}")
    return int(text)


def build(requests: list[Request], job: TrainingJob, spec: str) -> list[Fault]:
    """Turn requests into faults, filling default onsets and GPUs (see module docstring)."""
    n = job.n
    requests = [r for r in requests if r.name != NODE_ITEM]
    wanted = [r for r in requests if r.name != "healthy"]
    for r in requests:
        if r.name not in SCENARIOS:
            raise InputError(f"--source {spec!r}: unknown scenario {r.name!r} "
                             f"(valid: {', '.join(SCENARIOS)}; and node(id=K))")
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
