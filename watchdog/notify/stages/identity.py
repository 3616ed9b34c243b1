"""Stage 1, identity: each incident's fingerprint and job, fixed when it is first seen,
and the :class:`~watchdog.notify.base.Alert` a sink sees of it.

The job comes from ``job_of`` (the agent's job tracker: the config's ``job:`` or what the
GPUs' processes say). A job-wide kind (``comm_hang``, ``stall``) on a node whose job is
known gets the job's fingerprint, the same on every node of the job, so PagerDuty folds
the nodes' triggers into one incident (:mod:`watchdog.notify.fingerprint`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from watchdog.incident import Incident, jsonable
from watchdog.notify.base import Alert
from watchdog.notify.config import NotifyConfig
from watchdog.notify.fingerprint import group_key, identity
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.notify")

RuleInfo = Callable[[str], tuple[str, str | None]]  # rule name -> (scope, runbook)
#: an incident's GPU UUIDs -> (job id, run id) of the one job they run, or None; the
#: run id is None for a job no scheduler vouches for (never job-wide)
JobOf = Callable[[list[str]], tuple[str, str | None] | None]


class IdentityStage:
    """Fingerprints, jobs and groups of incidents; the alerts a sink sees."""

    def __init__(self, cfg: NotifyConfig, rule_info: RuleInfo,
                 job_of: JobOf | None = None) -> None:
        self.cfg = cfg
        self.rule_info = rule_info
        self.job_of = job_of
        # id(incident) -> (the incident, fingerprint, job id); holding the incident keeps
        # its id() from being reused by another object while the entry is there
        self._of: dict[int, tuple[Incident, str, str | None]] = {}

    def of(self, inc: Incident) -> tuple[str, str | None]:
        """``(fingerprint, job id)`` fixed when ``inc`` was first seen."""
        entry = self._of.get(id(inc))
        if entry is not None and entry[0] is inc:
            return entry[1], entry[2]
        job = None
        if self.job_of is not None:
            try:
                job = self.job_of(list(inc.uuids))
            except Exception as e:  # noqa: BLE001 - identity must not stop alerting
                log.warning("job of %s on %s unknown: %s", inc.kind, inc.host, e)
        fp, job_id = identity(inc, self.rule_info(inc.rule)[0], job)
        self._of[id(inc)] = (inc, fp, job_id)
        return fp, job_id

    def fingerprint(self, inc: Incident) -> str:
        return self.of(inc)[0]

    def group(self, inc: Incident) -> str:
        """The notification group of ``inc``: its host, and its job where known."""
        return group_key(inc.host, self.of(inc)[1])

    def forget(self, inc: Incident) -> None:
        """``inc`` resolved: its entry goes."""
        self._of.pop(id(inc), None)

    def alert(self, inc: Incident, fp: str) -> Alert:
        """The firing :class:`Alert` of ``inc`` (fingerprint ``fp``)."""
        scope, runbook = self.rule_info(inc.rule)
        url = runbook
        if self.cfg.runbook_url:
            url = self.cfg.runbook_url.replace("{kind}", inc.kind)
        return Alert(
            fingerprint=fp, status="firing", kind=inc.kind, severity=inc.severity,
            host=inc.host, gpus=tuple(inc.gpus), uuids=tuple(inc.uuids),
            started_at=inc.started_at, fired_at=inc.fired_at, resolved_at=None,
            rule=inc.rule, summary=inc.summary, evidence=plain(inc.evidence),
            labels=dict(inc.labels), runbook_url=url, job_id=self.of(inc)[1],
            scope="gpu" if scope == "gpu" and len(inc.uuids) == 1 else "node")


def plain(evidence: JsonDoc | None) -> JsonDoc:
    """Evidence as JSON-safe plain values (NaN -> None, numpy -> Python)."""
    out = jsonable(dict(evidence or {}))
    assert isinstance(out, dict)
    return out
