"""``SimSource``: the simulated node as a :class:`~watchdog.sources.base.LiveSource`.

``SimSource.from_spec("sim:comm_hang@300", gpus=8, model="h100-sxm", seed=0,
start=clock.now())`` builds a node of ``gpus`` GPUs running a healthy training job
(``job.py``) with the faults the spec names (``faults.py``; spec grammar in
``spec.py``). ``sample(now)`` reads every GPU at ``now`` (POSIX s, moving forward);
``run(duration_s, interval_s)`` generates a whole trace much faster than real time;
``ground_truth()`` says what was injected, where and when, for scoring a detector.

Determinism: the node is a function of ``(seed, spec, model, gpus)`` and the time
since ``start`` (the nodes of one simulated multi-node job share the seed and differ in
``node(id=K)``, see :mod:`.faults`); noise is counter-based and slow state is integrated
on a fixed grid, so the reading at ``t`` does not depend on the sampling interval (XID events are
attached to the first sample at or after their time, as NVML's event queue would).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from watchdog.errors import InputError
from watchdog.records import DeviceInfo, ProcessInfo, Sample, XidEvent
from watchdog.serving import serving_value
from watchdog.sources.sim import noise
from watchdog.sources.sim.faults import build, node_id
from watchdog.sources.sim.job import GpuState, TrainingJob
from watchdog.sources.sim.models import get_model, pci_bus_id
from watchdog.sources.sim.node import SimNode
from watchdog.sources.sim.spec import parse_spec
from watchdog.untyped import JsonDoc

DRIVER_VERSION = "565.57.01"
CUDA_VERSION = "12.7"
_S_UUID, _S_SERIAL = 301, 302


@dataclass(frozen=True, slots=True)
class GroundTruth:
    """One injected fault: ``kind`` (from ``watchdog.incident.KINDS``), the GPUs a
    detector should name (indices and UUIDs), ``onset`` and ``end`` in POSIX seconds
    (``end`` None = still active at the end), the scenario and its parameters."""

    kind: str
    scenario: str
    gpus: tuple[int, ...]
    uuids: tuple[str, ...]
    onset: float
    end: float | None
    params: JsonDoc = field(default_factory=dict)

    def to_dict(self) -> JsonDoc:
        return {"kind": self.kind, "scenario": self.scenario, "gpus": list(self.gpus),
                "uuids": list(self.uuids), "onset": self.onset, "end": self.end,
                "params": dict(self.params)}


def make_uuid(seed: int, index: int) -> str:
    """A well-formed, stable fake GPU UUID (``GPU-8-4-4-4-12`` hex) for seed and index."""
    h = f"{noise.key(seed, _S_UUID, index, 0):016x}{noise.key(seed, _S_UUID, index, 1):016x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class SimSource:
    """A simulated node; satisfies ``LiveSource``. Build it with :meth:`from_spec`."""

    def __init__(self, spec: str, *, gpus: int, model: str, seed: int, start: float,
                 host: str | None = None) -> None:
        if not 1 <= gpus <= 256:
            raise InputError(f"--gpus {gpus}: expected 1..256")
        self.spec = spec
        self.model = get_model(model)
        self.n = gpus
        self.seed = seed
        self.start = float(start)
        self.host = host or "sim-node"
        requests = parse_spec(spec)
        self.job = TrainingJob(self.model, gpus, seed, node=node_id(requests, spec))
        self.faults = build(requests, self.job, spec)
        self.node = SimNode(self.job, self.faults)
        self.uuids = [make_uuid(self.job.gpu_seed, g) for g in range(gpus)]
        xids = sorted((t, g, code, msg) for f in self.faults for t, g, code, msg in f.xids())
        self._xids = xids
        self._xid_next = 0
        self._last: float | None = None

    @classmethod
    def from_spec(cls, spec: str, *, gpus: int = 8, model: str = "h100-sxm", seed: int = 0,
                  start: float, host: str | None = None) -> SimSource:
        """Parse ``sim`` / ``sim:SCENARIO[,…]``; :class:`InputError` names a bad part."""
        return cls(spec, gpus=gpus, model=model, seed=seed, start=start, host=host)

    # --- LiveSource -------------------------------------------------------------------

    def devices(self) -> list[DeviceInfo]:
        m = self.model
        return [DeviceInfo(
            index=g, uuid=self.uuids[g], name=m.name, pci_bus_id=pci_bus_id(m, g),
            serial=str(1650000000000 + noise.key(self.job.gpu_seed, _S_SERIAL, g) % 10**10),
            vbios_version=m.vbios, driver_version=DRIVER_VERSION, cuda_version=CUDA_VERSION,
            power_limit_enforced_w=m.power_limit_w, power_limit_default_w=m.power_limit_w,
            power_limit_min_w=m.power_min_w, power_limit_max_w=m.power_max_w,
            clocks_max_sm_mhz=m.max_sm_mhz, clocks_max_mem_mhz=m.max_mem_mhz,
            memory_total_mib=m.memory_total_mib, temp_slowdown_c=m.temp_slowdown_c,
            temp_shutdown_c=m.temp_shutdown_c, temp_max_operating_c=m.temp_max_operating_c,
            mig_mode=False, pcie_max_gen=m.pcie_max_gen, pcie_max_width=m.pcie_max_width,
            gpm_supported=m.gpm,
        ) for g in range(self.n)]

    def sample(self, now: float) -> list[Sample]:
        """One reading of every GPU at ``now`` (POSIX s; must not go backwards)."""
        if self._last is not None and now < self._last:
            raise ValueError(f"sample({now}) before the previous sample ({self._last})")
        t = now - self.start
        if t < 0:
            raise ValueError(f"sample({now}) before the node started ({self.start})")
        self._last = now
        states, slow = self.node.at(t)
        xids = self._due_xids(t)
        return [self._sample(g, now, t, states[g], slow[g], xids.get(g, ()))
                for g in range(self.n)]

    def close(self) -> None:
        """Nothing to release (kept for the protocol)."""

    # --- beyond the protocol ----------------------------------------------------------

    def run(self, duration_s: float, interval_s: float = 1.0
            ) -> Iterator[tuple[float, list[Sample]]]:
        """Ticks ``(ts, samples)`` every ``interval_s`` for ``duration_s`` seconds.

        Starts at the node's start, or one interval after the last sample taken; times
        are ``first + i * interval_s`` (no accumulated float error).
        """
        if interval_s <= 0 or duration_s < 0:
            raise ValueError("run() needs interval_s > 0 and duration_s >= 0")
        first = self.start if self._last is None else self._last + interval_s
        for i in range(int(duration_s / interval_s + 1e-9)):
            ts = first + i * interval_s
            yield ts, self.sample(ts)

    def ground_truth(self) -> list[GroundTruth]:
        """The injected faults (none for ``healthy``), onset order."""
        out = []
        for f in self.faults:
            if not f.expects_incident:  # a look-alike (inference_server): nothing to find
                continue
            r = f.record()
            out.append(GroundTruth(
                kind=r["kind"], scenario=r["scenario"], gpus=tuple(r["gpus"]),
                uuids=tuple(self.uuids[g] for g in r["gpus"]), onset=self.start + r["onset"],
                end=None if r["end"] is None else self.start + r["end"], params=r["params"]))
        return sorted(out, key=lambda gt: (gt.onset, gt.gpus))

    def legit_waits(self, until_s: float) -> list[tuple[float, float, str]]:
        """Healthy checkpoint windows ``(start, end, variant)`` (POSIX s) before
        ``start + until_s``: the normal waits a hang detector must sit out."""
        return [(self.start + a, self.start + b, v)
                for a, b, v in self.job.checkpoints(until_s)]

    # --- internals --------------------------------------------------------------------

    def _due_xids(self, t: float) -> dict[int, tuple[XidEvent, ...]]:
        out: dict[int, list[XidEvent]] = {}
        while self._xid_next < len(self._xids) and self._xids[self._xid_next][0] <= t:
            te, g, code, msg = self._xids[self._xid_next]
            out.setdefault(g, []).append(XidEvent(
                ts=self.start + te, uuid=self.uuids[g], index=g, code=code, source="sim",
                message=msg))
            self._xid_next += 1
        return {g: tuple(v) for g, v in out.items()}

    def _sample(self, g: int, now: float, t: float, st: GpuState,
                slow: tuple[float, float, float, float, float],
                xids: tuple[XidEvent, ...]) -> Sample:
        uuid = self.uuids[g]
        if st.lost:
            return Sample(ts=now, uuid=uuid, index=g, values={}, processes=None, xids=xids,
                          lost=True, errors=("nvmlDeviceGetHandleByIndex: GPU is lost",))
        m = self.model
        temp, energy, v_power, v_thermal, v_sync = slow
        sm = min(m.max_sm_mhz, 15.0 * round(st.sm_mhz / 15.0))  # clocks move in 15 MHz bins
        gpm = m.gpm
        nvl = nvl_replay = nvl_recovery = None
        if m.nvlink:
            nvl = float(st.nvlink_extra)
            nvl_replay, nvl_recovery = float(st.nvlink_extra // 4), float(st.nvlink_extra > 0)
        unc = float(st.ecc_unc)
        values: dict[str, float | None] = {
            "utilization.gpu": float(round(st.util)),
            "utilization.memory": float(round(st.mem_util)),
            "memory.used": float(round(st.mem_used)),
            "memory.total": m.memory_total_mib,
            "power.draw": round(st.power, 2),
            "enforced.power.limit": m.power_limit_w,
            "energy.total": round(energy, 3),
            "temperature.gpu": float(round(temp)),
            "temperature.memory": float(round(temp + m.mem_temp_offset_c)),
            "fan.speed": None,  # passively cooled data-centre boards
            "clocks.sm": sm,
            "clocks.mem": float(round(st.mem_mhz)) if st.mem_mhz else m.max_mem_mhz,
            "clocks.gr": sm,
            "clocks_event_reasons.active": float(st.reasons),
            "pstate": 0.0,
            "violation.power": round(v_power, 3),
            "violation.thermal": round(v_thermal, 3),
            "violation.sync_boost": round(v_sync, 3),
            "violation.reliability": 0.0,
            "gpm.sm_activity": round(st.sm_act, 2) if gpm else None,
            "gpm.sm_occupancy": round(st.sm_occ, 2) if gpm else None,
            "gpm.tensor_activity": round(st.tensor, 2) if gpm else None,
            "gpm.dram_bandwidth": round(st.dram, 2) if gpm else None,
            "ecc.errors.corrected.volatile.total": self.node.ecc_corrected(g, t),
            "ecc.errors.uncorrected.volatile.total": unc,
            "ecc.errors.uncorrected.aggregate.total": unc,
            "retired_pages.pending": None,  # Ampere and newer remap rows instead
            "retired_pages.count": None,
            "remapped_rows.correctable": 0.0,
            "remapped_rows.uncorrectable": unc,
            "remapped_rows.pending": float(st.remap_pending),
            "remapped_rows.failure": 0.0,
            "pcie.link.gen.current": float(st.pcie_gen),
            "pcie.link.width.current": float(st.pcie_width),
            "pcie.replay_counter": self.node.replay_base[g] + st.replay_extra,
            "pcie.tx_throughput": float(round(st.pcie_tx)),
            "pcie.rx_throughput": float(round(st.pcie_rx)),
            "nvlink.errors.crc_flit": nvl,
            "nvlink.errors.crc_data": 0.0 if m.nvlink else None,
            "nvlink.errors.replay": nvl_replay,
            "nvlink.errors.recovery": nvl_recovery,
        }
        procs: tuple[ProcessInfo, ...] = ()
        if st.process:
            procs = (ProcessInfo(pid=self.job.pids[g], name="python",
                                 used_memory_mib=max(0.0, (values["memory.used"] or 0.0) - 1.0),
                                 job_id=self.job.slurm_job_id, serving=st.serving),)
        values["processes.serving"] = serving_value(procs)
        return Sample(ts=now, uuid=uuid, index=g, values=values, processes=procs, xids=xids)
