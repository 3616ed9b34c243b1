"""One page per problem: the rules' incidents and the model's ``anomaly`` incidents meet.

They meet here for the agent and for ``watchdog replay --model`` alike.

The model often sees a fault before a rule can name it (a memory trend rising minutes
before ``memory_pressure`` fires). Two pages for one problem teach an operator to ignore
one of them, so when a rule fires on a GPU where an ``anomaly`` incident is open, the
rule's incident takes over:

* the anomaly resolves into it at the rule's firing time, and its resolve says so
  (``evidence["superseded"]``: ``by memory_pressure on GPU 3``, the first evidence item,
  so the alerting code shows it);
* the rule's incident carries the anomaly as evidence: ``evidence["anomaly"]`` in words
  (``memory trend +2.0 % of total/min (normal +0.0 % of total/min), from 2m30s before``)
  and ``evidence["anomaly_before"]`` structured for JSON readers;
* an anomaly whose firing reaches this point only after the rule fired on its GPU (live,
  a window is judged once the detector has evaluated its tick, so a rule with no
  ``for:`` can fire first) never pages at all: it goes straight into the rule's evidence;
* an anomaly that had already resolved less than :data:`RECENT_S` before the rule started
  paged and cleared on its own (nothing can unsend it), so it stays an incident, and the
  rule cites it the same way.

:class:`Handover` works on the stream of transitions (``firing``, ``updated``,
``resolved``) in the order the agent delivers them (live: every tick's changes, in
:class:`~watchdog.pipeline.live.LivePipeline`). ``watchdog replay --model`` feeds it the
same stream (:func:`~watchdog.anomaly.offline.judge_recording`: the windows judged up to
each rule transition, then the transition, as a tick hands them out), so a recording
gives the agent's incidents. A superseded anomaly is not listed on its own in replay: it
appears only inside the rule incident's evidence.
The runner drops an anomaly a rule took over (its ``resolved_at`` is set here), so the
model pages again only if the GPU is still unlike itself after the rule's incident ended.
"""

from __future__ import annotations

from collections.abc import Sequence

from watchdog.incident import Incident, duration, gpu_list, iso

RECENT_S = 600.0  # an anomaly resolved this long (s) before a rule started is its evidence
NOT_RULES = ("anomaly", "agent")  # kinds that never take an anomaly over


class Handover:
    """The stream filter of the module docs: ``changes`` in, ``changes`` out (with the
    superseded anomalies' resolves added after the rule's firing, and anomalies that
    would page under a firing rule taken out)."""

    def __init__(self, recent_s: float = RECENT_S) -> None:
        self.recent_s = recent_s
        self._rules: dict[str, list[Incident]] = {}  # uuid -> rule incidents that fired
        self._open: dict[str, Incident] = {}  # uuid -> the anomaly paged and still open
        self._past: dict[str, Incident] = {}  # uuid -> the last anomaly resolved on its own
        self.superseded: list[Incident] = []  # every anomaly a rule took over, oldest first

    def __call__(self, changes: Sequence[tuple[str, Incident]]) -> list[tuple[str, Incident]]:
        out: list[tuple[str, Incident]] = []
        for what, inc in changes:
            if inc.kind == "anomaly":
                if what == "firing":
                    rule = self._firing_rule(inc)
                    if rule is not None:  # never pages: straight into the rule's evidence
                        self._supersede(inc, rule, max(inc.fired_at or 0.0,
                                                       rule.fired_at or 0.0))
                        continue
                    for u in inc.uuids:
                        self._open[u] = inc
                elif what == "resolved":
                    for u in inc.uuids:
                        if self._open.get(u) is inc:
                            del self._open[u]
                            self._past[u] = inc
                out.append((what, inc))
                continue
            out.append((what, inc))
            if inc.kind in NOT_RULES or inc.fired_at is None:
                continue
            if what in ("firing", "updated"):
                self._rule_fired(inc, out)
            elif what == "resolved":
                for u in inc.uuids:
                    kept = [r for r in self._rules.get(u, []) if r is not inc]
                    if kept:
                        self._rules[u] = kept
                    else:
                        self._rules.pop(u, None)
        return out

    def _firing_rule(self, anomaly: Incident) -> Incident | None:
        """A rule incident firing on one of ``anomaly``'s GPUs (its ``firing`` came
        through here, its ``resolved`` not yet), if any."""
        for u in anomaly.uuids:
            rules = self._rules.get(u)
            if rules:
                return rules[0]
        return None

    def _rule_fired(self, rule: Incident, out: list[tuple[str, Incident]]) -> None:
        for u in rule.uuids:
            mine = self._rules.setdefault(u, [])
            if not any(r is rule for r in mine):
                mine.append(rule)
            anomaly = self._open.pop(u, None)
            if anomaly is not None and anomaly.resolved_at is None:
                for other in anomaly.uuids:
                    self._open.pop(other, None)
                self._supersede(anomaly, rule, rule.fired_at or 0.0)
                out.append(("resolved", anomaly))
                continue
            past = self._past.get(u)
            if past is not None and past.resolved_at is not None and \
                    rule.started_at - past.resolved_at <= self.recent_s and \
                    "anomaly" not in rule.evidence:
                cite(rule, past)

    def _supersede(self, anomaly: Incident, rule: Incident, at: float) -> None:
        """``anomaly`` resolves into ``rule`` at data time ``at`` (s)."""
        anomaly.resolved_at = at
        anomaly.evidence = {"superseded": f"by {rule.kind} on {where(rule)}",
                            **{k: v for k, v in anomaly.evidence.items() if k != "superseded"},
                            "superseded_by": {"rule": rule.rule, "kind": rule.kind,
                                              "gpus": list(rule.gpus),
                                              "fired_at": iso(rule.fired_at)}}
        cite(rule, anomaly)
        self.superseded.append(anomaly)


def where(inc: Incident) -> str:
    """``GPU 3``, ``GPUs 0-7`` or ``node``: the GPUs of ``inc`` in words."""
    if not inc.gpus:
        return "node"
    return ("GPU " if len(inc.gpus) == 1 else "GPUs ") + gpu_list(inc.gpus)


def cite(rule: Incident, anomaly: Incident) -> None:
    """Put ``anomaly`` into ``rule``'s evidence: its first explained feature in words and
    how long before the rule fired it began, and the anomaly itself for JSON readers."""
    from watchdog.anomaly import explain  # numpy: only where the model runs

    top = anomaly.evidence.get("features") or []
    fired = rule.fired_at if rule.fired_at is not None else rule.started_at
    lead = duration(max(0.0, fired - anomaly.started_at))
    if top:
        item = top[0]
        name = item["feature"]
        what = explain.WORDS[name][0] if name in explain.WORDS else name
        words = f"{what} {explain.observed_vs_normal(item)}"
    else:
        words = anomaly.summary.split(": ", 1)[-1][:120]
    gpu = where(anomaly)
    mine = len(rule.gpus) == 1 and list(rule.gpus) == list(anomaly.gpus)
    rule.evidence["anomaly"] = f"{words}, from {lead} before" + ("" if mine else f" on {gpu}")
    rule.evidence["anomaly_before"] = {
        "gpus": list(anomaly.gpus), "uuids": list(anomaly.uuids),
        "started_at": iso(anomaly.started_at), "fired_at": iso(anomaly.fired_at),
        "resolved_at": iso(anomaly.resolved_at), "lead_s": round(fired - anomaly.started_at, 1),
        "summary": anomaly.summary, "score": anomaly.evidence.get("score"),
        "threshold": anomaly.evidence.get("threshold"), "features": top,
        "superseded": "superseded_by" in anomaly.evidence}
