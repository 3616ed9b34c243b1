"""Stable identities for incidents and groups.

An incident's fingerprint is PagerDuty's ``dedup_key`` and Alertmanager's identity, so it
must not change while the incident lives: it is computed once, when the incident is first
seen, from its kind, host, rule and labels, plus the GPU UUID for per-GPU rules only. A
node-level incident (a hung job) whose GPU list grows keeps its fingerprint; the same GPU
raising the same rule again later gets the same fingerprint again, which is what lets a
flapping incident or one re-raised after a restart continue instead of paging anew.

A job-wide incident (:data:`JOB_WIDE`: a hung collective, a stalled job) on a node whose
job is known is not the node's but the job's: its fingerprint is made of the kind, the
job id and the job's run (:func:`job_fingerprint`), with neither host nor GPUs, so every
node of the job computes the same one. PagerDuty's ``dedup_key`` is the fingerprint:
64 hung nodes open one incident. The run is what every node of a job shares (Slurm's
restart count; a requeued job is a new run), so the identity survives restarts and flaps
as a node's does; two hangs of the same run are told apart by PagerDuty itself, which
opens a new incident for a key whose incident was resolved.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from watchdog.incident import KIND_LIST, Incident

#: Labels that say where an incident belongs, not what it is: left out of fingerprints.
_VOLATILE = frozenset({"job_id", "slurm_job_id"})


def fingerprint(kind: str, host: str, rule: str, labels: Mapping[str, str],
                uuid: str | None) -> str:
    """16 hex digits identifying one incident; ``uuid`` only for per-GPU rules."""
    doc = {"kind": kind, "host": host, "rule": rule, "uuid": uuid or "",
           "labels": {k: str(v) for k, v in sorted(labels.items()) if k not in _VOLATILE}}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


#: Kinds a whole multi-node job shows at once: one page per job, not per node.
JOB_WIDE = frozenset(k.name for k in KIND_LIST if k.job_wide)


def job_fingerprint(kind: str, job_id: str, run_id: str) -> str:
    """The fingerprint of a job-wide incident: the same on every node of the job's run
    ``run_id`` (``<job id>#<run>``); ``job-`` then 16 hex digits, so it never equals a
    node's. (The hashed document's key for the run stays ``episode``: the fingerprint is
    what every node of the fleet, old and new, must compute alike.)"""
    doc = {"kind": kind, "job": job_id, "episode": run_id}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return "job-" + hashlib.sha256(blob).hexdigest()[:16]


def group_key(host: str, job_id: str | None) -> str:
    """The notification group: one per host, and per Slurm job where the samples know it."""
    return f"{host}/job={job_id}" if job_id else host


def identity(inc: Incident, scope: str,
             job: tuple[str, str | None] | None) -> tuple[str, str | None]:
    """``(fingerprint, job id)`` of incident ``inc`` whose rule has ``scope`` (``gpu`` or
    ``node``), on GPUs running ``job`` (``(job id, run id)`` or None): the job's
    fingerprint for a job-wide kind with a job, else the node's own. A job whose run id
    is None (only a process's environment named it: anyone can claim any id) labels the
    alert but never makes it the job's."""
    job_id = job[0] if job else (inc.labels.get("job_id") or inc.labels.get("slurm_job_id"))
    if job is not None and job[1] is not None and inc.kind in JOB_WIDE:
        return job_fingerprint(inc.kind, job[0], job[1]), job_id
    per_gpu = scope == "gpu" and len(inc.uuids) == 1
    return fingerprint(inc.kind, inc.host, inc.rule, inc.labels,
                       inc.uuids[0] if per_gpu else None), job_id
