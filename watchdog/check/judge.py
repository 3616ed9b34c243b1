"""The verdict of ``watchdog check``: pure functions from a short burst of samples to problems.

Nothing here reads a clock, a device or a file: :func:`judge` gets the inventory
(:class:`~watchdog.records.DeviceInfo`) and, per GPU, the samples of the burst in time order,
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
  errors, a lost GPU, XIDs by code, and uncorrectable ECC errors since the driver loaded.
  They carry no thresholds of their own; their severities match the rule of the same kind
  (an uncorrectable error is CRITICAL as in ``rules/ecc.yaml``; XID classes as in
  ``rules/xid.yaml``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from watchdog.check import xid as xids
from watchdog.check.verdict import (  # noqa: F401 - the verdict's types, where callers look
    RANK,
    GpuVerdict,
    Problem,
    Status,
    Verdict,
    worst,
)
from watchdog.records import DeviceInfo, Sample

if TYPE_CHECKING:
    from watchdog.detect.loader import RuleSet


_TIMEOUT_WORDS = ("timed out", "timeout", "deadline", "did not return within", "wedged",
                  "still outstanding")


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
    """Uncorrectable ECC errors since the driver loaded: CRITICAL.

    A fact no rule pages on (``rules/ecc.yaml`` pages a *new* error, so that an old count
    does not page at every restart), but a health probe must not pass a GPU whose memory
    already failed since the last driver load. Pending or failed row remaps, pending page
    retirement and memory worn out (DCGM's limits) are the rules' (``ecc_uncorrectable``,
    ``ecc_worn_out``), judged over the burst like every rule.
    """
    dbe = last.get("ecc.errors.uncorrected.volatile.total")
    if dbe is not None and dbe > 0:
        return [Problem(Status.CRITICAL, "ecc",
                        f"{dbe:.0f} uncorrectable ECC errors since the driver loaded")]
    return []


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
                    *ruled]
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
        from watchdog.check.rules import rule_problems  # numpy and the rules: only here

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
