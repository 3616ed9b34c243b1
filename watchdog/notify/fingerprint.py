"""Stable identities for incidents and groups.

An incident's fingerprint is PagerDuty's ``dedup_key`` and Alertmanager's identity, so it
must not change while the incident lives: it is computed once, when the incident is first
seen, from its kind, host, rule and labels, plus the GPU UUID for per-GPU rules only. A
node-level incident (a hung job) whose GPU list grows keeps its fingerprint; the same GPU
raising the same rule again later gets the same fingerprint again, which is what lets a
flapping incident or one re-raised after a restart continue instead of paging anew.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

#: Labels that say where an incident belongs, not what it is: left out of fingerprints.
_VOLATILE = frozenset({"job_id", "slurm_job_id"})


def fingerprint(kind: str, host: str, rule: str, labels: Mapping[str, str],
                uuid: str | None) -> str:
    """16 hex digits identifying one incident; ``uuid`` only for per-GPU rules."""
    doc = {"kind": kind, "host": host, "rule": rule, "uuid": uuid or "",
           "labels": {k: str(v) for k, v in sorted(labels.items()) if k not in _VOLATILE}}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def group_key(host: str, job_id: str | None) -> str:
    """The notification group: one per host, and per Slurm job where the samples know it."""
    return f"{host}/job={job_id}" if job_id else host
