"""The verdict of ``watchdog check``: pure functions from a short burst of samples to problems.

Nothing here reads a clock, a device or a file: :func:`judge` gets the inventory
(:class:`~watchdog.model.DeviceInfo`) and, per GPU, the samples of the burst in time order,
and returns a :class:`Verdict`. Each ``check_*`` function looks at one thing and returns the
:class:`Problem` list for one GPU, so tests can drive every condition and its look-alikes.

Severities follow the Nagios plugin convention (exit codes 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN). CRITICAL means "drain this node or this GPU"; WARNING means "look at it, jobs may
still run"; UNKNOWN means "the probe could not judge". When GPUs disagree the node takes the
worst by the order CRITICAL > WARNING > UNKNOWN > OK: a known fault outranks a blind spot.

Decisions (and why):

* NVML call **timeouts** are CRITICAL: a call that does not return within its deadline means
  a wedged driver, and CUDA calls of the job on that GPU will hang the same way.
  **Other NVML errors** on a GPU (``Sample.errors`` without a timeout) make that GPU UNKNOWN:
  a field we could not read is a blind spot, not evidence of a fault (NotSupported never
  gets here: it is a missing value, ``None``).
* Clock-event bits: SW power cap (0x4), sync boost (0x10), idle (0x1), locked clocks (0x2)
  and display clocks (0x100) are normal. SW thermal slowdown (0x20) is a WARNING. HW slowdown
  (0x8, with HW thermal 0x40 or power brake 0x80) is CRITICAL when it holds through the whole
  burst, and a WARNING when seen only in part of it (the driver may report it briefly during a
  P-state change).
* The hang signature is only ever a WARNING: a burst of a few seconds cannot tell a hung
  collective from ranks legitimately waiting while rank 0 writes a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from watchdog import reasons
from watchdog.check import xid as xids
from watchdog.model import DeviceInfo, Sample


class Status(IntEnum):
    """Nagios status; the value is the exit code."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


# Aggregation order, least to most severe (not the exit-code order: UNKNOWN is 3 there).
RANK = {Status.OK: 0, Status.UNKNOWN: 1, Status.WARNING: 2, Status.CRITICAL: 3}


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status (CRITICAL > WARNING > UNKNOWN > OK); OK for none."""
    return max(statuses, key=RANK.__getitem__, default=Status.OK)


# --- thresholds (each with its reason) ------------------------------------------------------

MEMORY_FULL_FRACTION = 0.98
"""used/total at or above this for the whole burst is "at the limit". PyTorch's caching
allocator and vLLM hold 90-95 % on purpose, so anything below 98 % is normal."""

HANG_UTIL_MIN = 95.0
"""% utilization: a kernel was running nearly all the time (a spinning NCCL kernel does)."""

HANG_POWER_FRACTION = 0.25
"""power.draw / enforced limit at or below this is "near idle" for a one-shot probe. Reported
hangs: H100 ~70-100 W of 700 W (10-14 %), V100 40-47 W of 250 W (16-19 %); sichek's H100
override is < 160 W (23 %). Busy training runs at >= 55 % (nanoGPT H100: 390 W and 690 W)."""

HANG_CLOCK_FRACTION = 0.75
"""SM clock / max SM clock at or above this is "clocks up"; locked low clocks (-lgc) give
100 % util at low power legitimately and fail this test."""

HANG_CLOCK_MIN_MHZ = 1400.0
"""Fallback "clocks up" when the max SM clock is unknown (sichek's generic threshold)."""

HANG_SM_ACTIVITY_MAX = 10.0
"""% GPM SM activity at or below this is "SMs idle": a spinning collective keeps a handful of
SMs resident out of 100+, real work keeps most of them busy."""

HANG_MEM_UTIL_MAX = 5.0
"""% memory-controller utilization at or below this is "no memory traffic" (sichek: < 5 %)."""

PCIE_BUSY_UTIL = 50.0
"""% utilization the GPU must hold for the whole burst before a PCIe generation below the
maximum counts: the link drops to gen 1 at idle by design."""

RETIRED_PAGES_MAX = 63
"""DCGM fails a GPU at 63 or more retired pages (the retirement table is nearly full)."""

REMAPPED_UNCORRECTABLE_MAX = 512
"""DCGM warns at 512 or more rows remapped for uncorrectable errors."""

PCIE_BER = 1e-12
"""Bit error rate the PCIe spec allows; DCGM's expected replay rate per lane is
BER x transfer rate x 60 s (gen 1: 0.15, gen 5: 1.92 replays/min/lane)."""

PCIE_GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
"""Transfer rate (GT/s per lane) of each PCIe generation."""

NVLINK_CRC_FAIL_PER_S = 100.0
"""DCGM fails a GPU at 100 or more NVLink CRC errors per second (any is a warning)."""

# Reason bits that are never a problem on their own, and the hang test's "no throttle".
_HW_BITS = reasons.HW_SLOWDOWN | reasons.HW_THERMAL | reasons.HW_POWER_BRAKE
_HANG_FORBIDDEN_BITS = (reasons.GPU_IDLE | reasons.APPLICATIONS_CLOCKS | reasons.SW_POWER_CAP
                        | reasons.THERMAL | reasons.HARDWARE)

_TIMEOUT_WORDS = ("timed out", "timeout", "deadline", "did not return within", "wedged",
                  "still outstanding")


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding. ``gpu``/``uuid`` are None for a node-level problem (GPU count)."""

    severity: Status
    check: str  # gpu_count | gpu_lost | nvml_timeout | nvml_error | xid | ecc | clock_events
    #            | pcie | nvlink | memory | hang
    message: str
    gpu: int | None = None
    uuid: str | None = None


@dataclass(slots=True)
class GpuVerdict:
    """The verdict on one GPU, with the last reading the table and JSON show."""

    index: int
    uuid: str
    device: DeviceInfo | None
    last: Sample | None
    samples: int
    problems: list[Problem] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return worst(p.severity for p in self.problems)

    @property
    def name(self) -> str | None:
        return self.device.name if self.device else None


@dataclass(slots=True)
class Verdict:
    """The node's verdict. ``checked_at`` is POSIX seconds of the judged moment."""

    host: str
    checked_at: float
    gpus: list[GpuVerdict]
    problems: list[Problem]
    expected_gpus: int | None = None
    driver: str | None = None
    source: str = "nvml"
    duration_s: float = 0.0

    @property
    def status(self) -> Status:
        return worst(p.severity for p in self.problems)

    @property
    def exit_code(self) -> int:
        return int(self.status)


# --- node-level checks -----------------------------------------------------------------------

def check_count(found: int, expected: int | None) -> list[Problem]:
    """Zero GPUs, or fewer than ``expected``, is CRITICAL; more than expected is a WARNING."""
    if found == 0:
        want = f", expected {expected}" if expected else ""
        return [Problem(Status.CRITICAL, "gpu_count", f"no GPUs found{want}")]
    if expected is None or found == expected:
        return []
    if found < expected:
        return [Problem(Status.CRITICAL, "gpu_count",
                        f"found {found} GPUs, expected {expected}")]
    return [Problem(Status.WARNING, "gpu_count",
                    f"found {found} GPUs, expected only {expected}")]


# --- per-GPU checks (each gets the GPU's inventory and its burst, oldest first) --------------

def check_lost(samples: Sequence[Sample]) -> list[Problem]:
    """A GPU NVML reports lost, or with no reading in the burst, is CRITICAL."""
    if not samples:
        return [Problem(Status.CRITICAL, "gpu_lost", "no reading during the check (GPU vanished)")]
    if any(s.lost for s in samples):
        return [Problem(Status.CRITICAL, "gpu_lost",
                        "GPU is lost (fallen off the bus or NVML reports it lost)")]
    return []


def check_errors(samples: Sequence[Sample]) -> list[Problem]:
    """Timed-out NVML calls are CRITICAL (wedged driver); other read errors are UNKNOWN."""
    seen: dict[str, None] = {}
    for s in samples:
        for e in s.errors:
            seen.setdefault(e, None)
    out: list[Problem] = []
    timeouts = [e for e in seen if any(w in e.lower() for w in _TIMEOUT_WORDS)]
    others = [e for e in seen if e not in timeouts]
    if timeouts:
        out.append(Problem(Status.CRITICAL, "nvml_timeout",
                           "NVML call timed out (driver wedged?): " + "; ".join(timeouts)))
    if others:
        out.append(Problem(Status.UNKNOWN, "nvml_error",
                           "NVML error, GPU only partly read: " + "; ".join(others)))
    return out


def check_xids(samples: Sequence[Sample]) -> list[Problem]:
    """Every XID code seen in the burst, severity by code (:mod:`watchdog.check.xid`)."""
    counts: dict[int, int] = {}
    for s in samples:
        for ev in s.xids:
            counts[ev.code] = counts.get(ev.code, 0) + 1
    out = []
    for code, n in counts.items():
        times = f" x{n}" if n > 1 else ""
        out.append(Problem(Status[xids.severity(code)], "xid", xids.describe(code) + times))
    return out


def check_ecc(last: Sample) -> list[Problem]:
    """Uncorrectable ECC, row-remap failure, too many retired pages: CRITICAL (DCGM FAIL).

    A pending row remap or page retirement (applied at the next GPU reset) and many
    uncorrectable remaps are WARNINGs, as in DCGM's memory health watch.
    """
    out = []
    dbe = last.get("ecc.errors.uncorrected.volatile.total")
    if dbe is not None and dbe > 0:
        out.append(Problem(Status.CRITICAL, "ecc",
                           f"{dbe:.0f} uncorrectable ECC errors since the driver loaded"))
    if (last.get("remapped_rows.failure") or 0) > 0:
        out.append(Problem(Status.CRITICAL, "ecc", "row remapping failed: the GPU needs service"))
    retired = last.get("retired_pages.count")
    if retired is not None and retired >= RETIRED_PAGES_MAX:
        out.append(Problem(Status.CRITICAL, "ecc", f"{retired:.0f} retired memory pages "
                                                   f"(limit {RETIRED_PAGES_MAX})"))
    if (last.get("remapped_rows.pending") or 0) > 0:
        out.append(Problem(Status.WARNING, "ecc", "row remap pending: reset the GPU when idle"))
    if (last.get("retired_pages.pending") or 0) > 0:
        out.append(Problem(Status.WARNING, "ecc",
                           "page retirement pending: reset the GPU when idle"))
    unc = last.get("remapped_rows.uncorrectable")
    if unc is not None and unc >= REMAPPED_UNCORRECTABLE_MAX:
        out.append(Problem(Status.WARNING, "ecc", f"{unc:.0f} rows remapped for "
                                                  "uncorrectable errors"))
    return out


def _mask(s: Sample) -> int | None:
    v = s.get("clocks_event_reasons.active")
    return None if v is None else int(v)


def check_clock_events(samples: Sequence[Sample], device: DeviceInfo | None) -> list[Problem]:
    """Thermal or HW slowdown active now (in the last reading); benign bits are ignored."""
    masks = [m for m in (_mask(s) for s in samples) if m is not None]
    if not masks or _mask(samples[-1]) is None:
        return []
    now = masks[-1]
    temp = samples[-1].get("temperature.gpu")
    where = f" at {temp:.0f} C" if temp is not None else ""
    if device and device.temp_slowdown_c is not None and temp is not None:
        where += f" (slowdown at {device.temp_slowdown_c:.0f} C)"
    out = []
    if now & _HW_BITS:
        words = ", ".join(reasons.decode(now & _HW_BITS))
        held = sum(1 for m in masks if m & _HW_BITS)
        if held == len(masks) and len(masks) >= 2:
            out.append(Problem(Status.CRITICAL, "clock_events",
                               f"{words} active for the whole check{where}: clocks cut by "
                               "hardware"))
        else:
            out.append(Problem(Status.WARNING, "clock_events",
                               f"{words} in {held} of {len(masks)} readings{where} "
                               "(may be a transient during a P-state change)"))
    if now & reasons.SW_THERMAL:
        out.append(Problem(Status.WARNING, "clock_events",
                           f"SW thermal slowdown: clocks reduced for temperature{where}"))
    return out


def check_pcie(samples: Sequence[Sample], device: DeviceInfo | None) -> list[Problem]:
    """Link narrower than its maximum: WARNING. Slower generation: only while busy."""
    if device is None:
        return []
    last = samples[-1]
    out = []
    width = last.get("pcie.link.width.current")
    if device.pcie_max_width and width is not None and width < device.pcie_max_width:
        out.append(Problem(Status.WARNING, "pcie",
                           f"PCIe link x{width:.0f} of x{device.pcie_max_width} "
                           "(degraded link: lanes lost)"))
    gen = last.get("pcie.link.gen.current")
    utils = [s.get("utilization.gpu") for s in samples]
    busy = all(u is not None and u >= PCIE_BUSY_UTIL for u in utils)
    if device.pcie_max_gen and gen is not None and gen < device.pcie_max_gen and busy:
        out.append(Problem(Status.WARNING, "pcie",
                           f"PCIe gen {gen:.0f} of gen {device.pcie_max_gen} while busy"))
    return out


def _delta(samples: Sequence[Sample], name: str) -> float | None:
    """Growth of counter ``name`` over the burst; None when unknown or reset."""
    vals = [(s.ts, v) for s in samples if (v := s.get(name)) is not None]
    if len(vals) < 2 or vals[-1][1] < vals[0][1]:
        return None
    return vals[-1][1] - vals[0][1]


def check_link_errors(samples: Sequence[Sample], device: DeviceInfo | None) -> list[Problem]:
    """PCIe replays above the spec's error rate, NVLink errors growing (DCGM's thresholds).

    PCIe: more replays during the burst than BER 1e-12 allows per minute for the link's
    generation and width is a WARNING (a marginal link). NVLink: replay or recovery errors
    growing is CRITICAL, CRC errors growing a WARNING (CRITICAL at 100/s or more).
    """
    out = []
    span = samples[-1].ts - samples[0].ts if samples else 0.0
    replays = _delta(samples, "pcie.replay_counter")
    last = samples[-1]
    gen = last.get("pcie.link.gen.current") or (device.pcie_max_gen if device else None)
    width = last.get("pcie.link.width.current") or (device.pcie_max_width if device else None)
    if replays and span > 0 and gen and width:
        per_min = PCIE_BER * PCIE_GT_PER_S.get(int(gen), 64.0) * 1e9 * 60 * width
        # More in a few seconds than the spec allows in a whole minute: unambiguous even
        # for a burst too short to measure a per-minute rate.
        if replays > per_min:
            out.append(Problem(Status.WARNING, "pcie",
                               f"{replays:.0f} PCIe replays in {span:.1f} s (link allows "
                               f"{per_min:.1f}/min): marginal link"))
    grown = {n: d for n in ("nvlink.errors.replay", "nvlink.errors.recovery")
             if (d := _delta(samples, n))}
    if grown:
        words = ", ".join(f"{n.rsplit('.', 1)[1]} +{d:.0f}" for n, d in grown.items())
        out.append(Problem(Status.CRITICAL, "nvlink", f"NVLink errors growing: {words}"))
    crc = sum(d for n in ("nvlink.errors.crc_flit", "nvlink.errors.crc_data")
              if (d := _delta(samples, n)))
    if crc:
        fast = span > 0 and crc / span >= NVLINK_CRC_FAIL_PER_S
        out.append(Problem(Status.CRITICAL if fast else Status.WARNING, "nvlink",
                           f"NVLink CRC errors growing: +{crc:.0f} in {span:.1f} s"))
    return out


def _mem_fraction(s: Sample, device: DeviceInfo | None) -> float | None:
    used = s.get("memory.used")
    total = s.get("memory.total") or (device.memory_total_mib if device else None)
    if used is None or not total:
        return None
    return used / total


def check_memory(samples: Sequence[Sample], device: DeviceInfo | None) -> list[Problem]:
    """Memory at >= 98 % in every reading of a burst of two or more: WARNING."""
    fracs = [_mem_fraction(s, device) for s in samples]
    if len(fracs) < 2 or any(f is None or f < MEMORY_FULL_FRACTION for f in fracs):
        return []
    low = min(f for f in fracs if f is not None)
    return [Problem(Status.WARNING, "memory",
                    f"memory at the limit: >= {low:.1%} used in all {len(fracs)} readings")]


def _hang_reading(s: Sample, device: DeviceInfo | None) -> bool:
    """One reading shows the hung-collective signature (see the HANG_* thresholds)."""
    util, power = s.get("utilization.gpu"), s.get("power.draw")
    limit = s.get("enforced.power.limit") or (device.power_limit_enforced_w if device else None)
    clock, mask = s.get("clocks.sm"), _mask(s)
    if util is None or power is None or not limit or clock is None:
        return False
    max_clock = device.clocks_max_sm_mhz if device else None
    clocks_up = (clock >= HANG_CLOCK_FRACTION * max_clock if max_clock
                 else clock >= HANG_CLOCK_MIN_MHZ)
    if util < HANG_UTIL_MIN or power > HANG_POWER_FRACTION * limit or not clocks_up:
        return False
    if mask is not None and mask & _HANG_FORBIDDEN_BITS:
        return False
    sm = s.get("gpm.sm_activity")
    if sm is not None and sm > HANG_SM_ACTIVITY_MAX:
        return False
    mem = s.get("utilization.memory")
    return mem is None or mem <= HANG_MEM_UTIL_MAX


def check_hang(samples: Sequence[Sample], device: DeviceInfo | None) -> list[Problem]:
    """Hang signature in every reading of a burst of two or more: WARNING, never more."""
    if len(samples) < 2 or not all(_hang_reading(s, device) for s in samples):
        return []
    last = samples[-1]
    util, power = last.get("utilization.gpu"), last.get("power.draw")
    limit = last.get("enforced.power.limit") or (device.power_limit_enforced_w if device else 0)
    sm = last.get("gpm.sm_activity")
    sm_txt = f", SM activity {sm:.0f} %" if sm is not None else ""
    span = last.ts - samples[0].ts
    return [Problem(Status.WARNING, "hang",
                    f"possible hung collective: util {util:.0f} % at {power:.0f} W of "
                    f"{limit:.0f} W with clocks up and no throttle reason{sm_txt} for "
                    f"{span:.1f} s; a short check cannot tell this from ranks waiting for a "
                    "checkpoint, watch it with `watchdog run`")]


def judge_gpu(device: DeviceInfo | None, index: int, uuid: str,
              samples: Sequence[Sample]) -> GpuVerdict:
    """All per-GPU checks on one GPU's burst (oldest first)."""
    gv = GpuVerdict(index=index, uuid=uuid, device=device,
                    last=samples[-1] if samples else None, samples=len(samples))
    problems = check_lost(samples)
    if not problems:  # a lost GPU has no values worth judging
        live = [s for s in samples if not s.lost]
        problems = [*check_errors(live), *check_xids(samples), *check_ecc(live[-1]),
                    *check_clock_events(live, device), *check_pcie(live, device),
                    *check_link_errors(live, device),
                    *check_memory(live, device), *check_hang(live, device)]
    else:
        problems += check_xids(samples)
    gv.problems = [Problem(p.severity, p.check, p.message, index, uuid) for p in problems]
    return gv


def judge(devices: Sequence[DeviceInfo], bursts: Mapping[str, Sequence[Sample]], *,
          host: str, checked_at: float, expected_gpus: int | None = None,
          source: str = "nvml", duration_s: float = 0.0) -> Verdict:
    """The node's verdict from its inventory and each GPU's burst (keyed by UUID).

    GPUs seen in ``bursts`` but not in ``devices`` are judged too (a log's inventory may be
    partial); the GPU count is the number of distinct GPUs known from either.
    """
    by_uuid = {d.uuid: d for d in devices}
    uuids = list(by_uuid) + [u for u in bursts if u not in by_uuid]
    gpus = []
    for u in uuids:
        samples = list(bursts.get(u, ()))
        dev = by_uuid.get(u)
        index = dev.index if dev else samples[-1].index
        gpus.append(judge_gpu(dev, index, u, samples))
    gpus.sort(key=lambda g: (g.index, g.uuid))
    problems = check_count(len(gpus), expected_gpus)
    for g in gpus:
        problems.extend(g.problems)
    driver = next((d.driver_version for d in devices if d.driver_version), None)
    return Verdict(host=host, checked_at=checked_at, gpus=gpus, problems=problems,
                   expected_gpus=expected_gpus, driver=driver, source=source,
                   duration_s=duration_s)
