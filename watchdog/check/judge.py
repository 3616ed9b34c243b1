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
* What the rules describe (thermal and HW slowdown, memory at the limit, the hang signature,
  stall, straggler, ECC, PCIe, NVLink) is judged by the rules themselves, over the burst
  (:mod:`watchdog.check.rules`): one set of thresholds and one severity per kind for
  ``check``, ``run`` and ``replay``. The hang (and any rule that needs a long ``for:``) is
  only ever a WARNING here: a burst of a few seconds cannot tell a hung collective from
  ranks legitimately waiting while rank 0 writes a checkpoint.
* The checks below are the ones a burst of rules cannot express: the GPU count, NVML
  errors, a lost GPU, XIDs by code, error counters since the driver loaded, PCIe replays
  against the spec's rate. Their severities match the rule of the same kind (an
  uncorrectable error or a pending remap is CRITICAL as in ``rules/ecc.yaml``; NVLink errors
  are a WARNING as in ``rules/nvlink.yaml``; XID classes as in ``rules/xid.yaml``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from watchdog.check import xid as xids
from watchdog.model import DeviceInfo, Sample

if TYPE_CHECKING:
    from watchdog.detect.loader import RuleSet


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
    """Uncorrectable ECC, row-remap failure or pending remap, too many retired pages: CRITICAL.

    Every finding is CRITICAL, the severity of the ``ecc`` kind in ``rules/ecc.yaml`` (a
    pending remap means the GPU needs a reset before its memory is trusted again). These
    counters hold since the driver loaded, which the rule's 10 min delta cannot see in a burst.
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
        out.append(Problem(Status.CRITICAL, "ecc", "row remap pending: reset the GPU when idle"))
    if (last.get("retired_pages.pending") or 0) > 0:
        out.append(Problem(Status.CRITICAL, "ecc",
                           "page retirement pending: reset the GPU when idle"))
    unc = last.get("remapped_rows.uncorrectable")
    if unc is not None and unc >= REMAPPED_UNCORRECTABLE_MAX:
        out.append(Problem(Status.CRITICAL, "ecc", f"{unc:.0f} rows remapped for "
                                                  "uncorrectable errors"))
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
    or CRC errors growing is a WARNING, the severity of ``rules/nvlink.yaml``.
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
        out.append(Problem(Status.WARNING, "nvlink", f"NVLink errors growing: {words}"))
    crc = sum(d for n in ("nvlink.errors.crc_flit", "nvlink.errors.crc_data")
              if (d := _delta(samples, n)))
    if crc:
        out.append(Problem(Status.WARNING, "nvlink",
                           f"NVLink CRC errors growing: +{crc:.0f} in {span:.1f} s"))
    return out


# rule kind -> the probe's own check of the same family: when both found something on a
# GPU, the probe's finding (since the driver loaded, or against the spec) is the one shown
SAME_FAMILY = {"ecc": "ecc", "pcie_degraded": "pcie", "nvlink_errors": "nvlink"}


def judge_gpu(device: DeviceInfo | None, index: int, uuid: str,
              samples: Sequence[Sample], ruled: Sequence[Problem] = ()) -> GpuVerdict:
    """All per-GPU checks on one GPU's burst (oldest first), plus ``ruled``: what the rules
    found on it over the burst (:func:`watchdog.check.rules.rule_problems`)."""
    gv = GpuVerdict(index=index, uuid=uuid, device=device,
                    last=samples[-1] if samples else None, samples=len(samples))
    problems = check_lost(samples)
    if not problems:  # a lost GPU has no values worth judging
        live = [s for s in samples if not s.lost]
        problems = [*check_errors(live), *check_xids(samples), *check_ecc(live[-1]),
                    *check_pcie(live, device),
                    *check_link_errors(live, device)]
        own = {p.check for p in problems}
        problems += [p for p in ruled if SAME_FAMILY.get(p.check) not in own]
    else:
        problems += check_xids(samples)
    gv.problems = [Problem(p.severity, p.check, p.message, index, uuid) for p in problems]
    return gv


def judge(devices: Sequence[DeviceInfo], bursts: Mapping[str, Sequence[Sample]], *,
          host: str, checked_at: float, expected_gpus: int | None = None,
          source: str = "nvml", duration_s: float = 0.0,
          rules: RuleSet | None = None, use_rules: bool = True) -> Verdict:
    """The node's verdict from its inventory and each GPU's burst (keyed by UUID).

    The rules (``rules``, default the shipped ones) are evaluated over the burst unless
    ``use_rules`` is False (tests of the probe's own checks).

    GPUs seen in ``bursts`` but not in ``devices`` are judged too (a log's inventory may be
    partial); the GPU count is the number of distinct GPUs known from either.
    """
    by_uuid = {d.uuid: d for d in devices}
    ruled: dict[str, list[Problem]] = {}
    if use_rules and any(bursts.values()):
        from watchdog.check.rules import rule_problems  # imports this module's types

        ruled = rule_problems(devices, bursts, host=host, rules=rules)
    uuids = list(by_uuid) + [u for u in bursts if u not in by_uuid]
    gpus = []
    for u in uuids:
        samples = list(bursts.get(u, ()))
        dev = by_uuid.get(u)
        index = dev.index if dev else samples[-1].index
        gpus.append(judge_gpu(dev, index, u, samples, ruled.get(u, ())))
    gpus.sort(key=lambda g: (g.index, g.uuid))
    problems = check_count(len(gpus), expected_gpus)
    for g in gpus:
        problems.extend(g.problems)
    driver = next((d.driver_version for d in devices if d.driver_version), None)
    return Verdict(host=host, checked_at=checked_at, gpus=gpus, problems=problems,
                   expected_gpus=expected_gpus, driver=driver, source=source,
                   duration_s=duration_s)
