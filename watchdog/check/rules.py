"""The shipped rules, evaluated over the probe's burst: one engine for ``check`` and ``run``.

``watchdog check`` does not carry thresholds of its own for what the rules describe
(thermal/HW slowdown, memory at the limit, the hang signature, stall, straggler, ECC, PCIe,
NVLink): it feeds its burst of readings to the same :class:`~watchdog.detect.Detector` the
daemon and ``replay`` use, so a threshold is changed in one place (``rules/*.yaml``).

"The condition holds now" is the probe's question, so each rule runs with its ``for:``,
``keep_firing_for`` and learned ``for:`` set to zero and no ``clear:`` (it resolves as soon as
the condition fails; :func:`burst_rules`); windows are
clipped to the burst by the engine itself (a 15 s mean over a 1 s burst is the mean of the
burst's readings). Idle and busy power are not learned from the burst (it holds no
history): ``power_rel`` uses the fallbacks, 10 % of the enforced limit and the limit.

Severity is the rule's (``critical`` -> CRITICAL, ``warning`` -> WARNING), with one
exception: a rule whose own ``for:`` is learned or at least :data:`CONFIRM_S` long describes a
signature a short view cannot confirm (a hung collective looks like ranks waiting for a
checkpoint; an idle training job like a checkpoint pause). Such a finding is a WARNING that
says how long the daemon waits and points at ``watchdog run``. Only the signatures in
:data:`BURST_SIGNATURES` are evaluated that way; the other rules that need time are left out
of the burst: a stall looks exactly like the 4 s checkpoint dip of every training job, and a
straggler's 2-minute means against its peers say nothing over a second of micro-dips, so
in a probe they would only be noise.

Imports numpy and the rule loader, never pandas (the probe's cold start budget).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from watchdog.check.verdict import Problem, Status
from watchdog.detect.loader import Rule, RuleSet, load_rules
from watchdog.pipeline.core import build_detector, feed_burst
from watchdog.records import DeviceInfo, Sample

CONFIRM_S = 60.0
"""A rule whose ``for:`` is this long (s) or longer, or learned, needs time the probe does
not have: its condition holding in the burst is reported as an unconfirmed WARNING."""

BURST_CONFIRMED = frozenset({"pcie_degraded"})
"""Kinds whose ``for:`` only rides out a moment's blip (a link retraining): a condition
that holds through the whole burst is reported as a finding, at the rule's severity."""

BURST_SIGNATURES = frozenset({"comm_hang"})
"""Kinds of rules that need time which the probe still evaluates (as an unconfirmed
WARNING): the hung collective (100 % util at idle power, clocks up) is distinctive even in a
second, and worth a look with ``watchdog run``."""

KINDS_OWN_CHECK = frozenset({"gpu_lost", "xid"})
"""Kinds the probe judges itself (:mod:`watchdog.check.judge`): a lost GPU or an XID is
an event the probe sees directly, with the same severity classes as the rules."""

_SEVERITY = {"critical": Status.CRITICAL, "warning": Status.WARNING}


def needs_time(rule: Rule) -> bool:
    """True when the rule cannot be confirmed by a burst (learned or long ``for:``)."""
    if rule.kind in BURST_CONFIRMED:
        return False
    return rule.learned is not None or rule.for_s >= CONFIRM_S


def burst_rules(rules: RuleSet) -> RuleSet:
    """The rules with ``for:`` not applied: each fires as soon as its condition holds.

    Rules that need time are left out unless their kind is in :data:`BURST_SIGNATURES`
    (see the module docs).
    """
    return RuleSet([replace(r, for_s=0.0, learned=None, keep_firing_for=0.0, clear=None)
                    for r in rules if not needs_time(r) or r.kind in BURST_SIGNATURES])


def _ticks(bursts: Mapping[str, Sequence[Sample]]) -> list[tuple[float, list[Sample]]]:
    """Samples of every GPU grouped by timestamp, oldest first. Lost readings go in too
    (node rules must see the GPU gone); the ``gpu_lost`` finding is the probe's own."""
    by_ts: dict[float, list[Sample]] = {}
    for samples in bursts.values():
        for s in samples:
            by_ts.setdefault(s.ts, []).append(s)
    return sorted(by_ts.items())


def rule_problems(devices: Sequence[DeviceInfo], bursts: Mapping[str, Sequence[Sample]], *,
                  host: str, rules: RuleSet | None = None) -> dict[str, list[Problem]]:
    """Per GPU UUID, the rules whose condition holds at the end of the burst.

    ``rules`` defaults to the shipped rules. A node-scope incident is reported on each of
    its GPUs.
    """
    rules = rules if rules is not None else load_rules(None)
    by_name = {r.name: r for r in rules}
    det = build_detector(burst_rules(rules), host=host, devices=list(devices), mode="burst")
    out: dict[str, list[Problem]] = {}
    for inc in feed_burst(det, _ticks(bursts)):
        if inc.resolved_at is not None or inc.kind in KINDS_OWN_CHECK:
            continue  # held during the burst but no longer at its end
        rule = by_name[inc.rule]
        severity = _SEVERITY.get(rule.severity, Status.WARNING)
        message = inc.summary
        if needs_time(rule):
            wait = ("a learned time" if rule.learned is not None
                    else f"{rule.for_s:.0f} s")
            message = (f"{inc.rule} condition holds now (unconfirmed: the rule pages only "
                       f"after it holds for {wait}; a short check cannot tell it from a "
                       f"legitimate pause, watch it with `watchdog run`): {inc.summary}")
            severity = Status.WARNING
        for uuid in inc.uuids:
            out.setdefault(uuid, []).append(Problem(severity, inc.kind, message))
    return out
