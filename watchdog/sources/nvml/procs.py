"""Who is using a GPU: process name, Slurm job id and container id from ``/proc``.

NVML gives the pid and GPU memory; the rest comes from ``/proc/<pid>``: ``comm`` (name),
``cmdline`` (what it runs: ``python -m vllm.entrypoints...`` tells a server from a trainer;
only that verdict is kept, never the command line, whose arguments may hold secrets),
``environ`` (``SLURM_JOB_ID`` and ``SLURM_RESTART_COUNT``; readable only for our own user
or root) and ``cgroup`` (Slurm's ``job_<id>`` cgroup, a container runtime's scope, a
Kubernetes pod's ``pod<uid>`` slice).

A process's environment is untrusted text: any user sets ``SLURM_JOB_ID`` to what they
like. Both variables are taken only as digits (at most :data:`SLURM_ID_DIGITS`; anything
else is dropped, with a note ``watchdog status`` shows), the ``job_<id>`` cgroup, which a
user cannot choose, wins over the variable, and an id that only the environment gave is
marked ``job_from="environ"``: it labels the GPU but never joins a job-wide incident.

A pod's namespace and name come from the kubelet's log folder
``/var/log/pods/<namespace>_<pod>_<uid>`` where the node has it (the API server is never
asked). Anything unreadable is simply ``None``: a health probe must not fail
because another user's process is private. ``proc_root`` and ``pods_root`` are
injectable so tests use a fake tree.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path

from watchdog import serving
from watchdog.records import ProcessInfo

_JOB_RE = re.compile(r"/job_(\d+)(?:/|$)")
# docker-<id>.scope, /docker/<id>, cri-containerd-<id>.scope, crio-<id>, libpod-<id>,
# /kubepods/.../<id>: container ids are 64 hex digits.
_CONTAINER_RE = re.compile(
    r"(?:docker|cri-containerd|crio|libpod|containerd)[-/]([0-9a-f]{64})|/([0-9a-f]{64})(?:\.scope)?$")


# kubepods/burstable/pod<uid>/… (cgroupfs driver) or kubepods-burstable-pod<uid>.slice
# (systemd driver, which writes the UID's dashes as underscores)
_POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}"
                     r"[-_][0-9a-f]{12})(?:\.slice)?(?:/|$)")
PODS_ROOT = "/var/log/pods"
_POD_NAMES: dict[str, tuple[str | None, str | None]] = {}  # uid -> (namespace, name)
_POD_NAMES_MAX = 256
_POD_MISSES: dict[str, float] = {}  # uid -> when (monotonic s) its folder was not there
POD_RETRY_S = 60.0  # a pod's folder not found is looked for again after this long (s)


SLURM_ID_DIGITS = 20
"""The most digits a ``SLURM_JOB_ID`` or ``SLURM_RESTART_COUNT`` may have (Slurm's ids are
32-bit: 10 digits)."""
_DIGITS = re.compile(rf"^[0-9]{{1,{SLURM_ID_DIGITS}}}$")

CMDLINE_MAX = 4096
"""Bytes of ``/proc/<pid>/cmdline`` kept: the program and its first arguments say what it
is; a long prompt or config passed inline is not needed."""


def _read(path: Path, limit: int = 65536) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def job_from_environ(raw: bytes | None) -> str | None:
    """``SLURM_JOB_ID`` from a NUL-separated ``/proc/<pid>/environ``."""
    return env_value(raw, b"SLURM_JOB_ID")


def env_value(raw: bytes | None, name: bytes) -> str | None:
    """The variable ``name`` from a NUL-separated ``/proc/<pid>/environ`` (None: unset,
    empty or unreadable); at most 256 characters are kept."""
    if not raw:
        return None
    prefix = name + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            value = item[len(prefix):].decode(errors="replace").strip()[:256]
            return value or None
    return None


def pod_from_cgroup(text: str | None) -> str | None:
    """A Kubernetes pod's UID (dashed) from ``/proc/<pid>/cgroup`` lines, or None."""
    if not text:
        return None
    for line in text.splitlines():
        m = _POD_RE.search(line.split(":", 2)[-1].strip())
        if m:
            return m.group(1).replace("_", "-")
    return None


def pod_names(uid: str, pods_root: str = PODS_ROOT) -> tuple[str | None, str | None]:
    """``(namespace, pod name)`` of the pod ``uid`` from the kubelet's log folder
    ``<pods_root>/<namespace>_<pod>_<uid>``; ``(None, None)`` where the node does not show
    it. Cached per UID (a pod keeps its name), so the folder is listed once per pod; a
    pod not found is looked for again after :data:`POD_RETRY_S` (the kubelet may create
    its log folder after the first process is seen: a miss cached for good left the
    pod's alerts without its name), never more often."""
    key = f"{pods_root}\0{uid}"
    if key in _POD_NAMES:
        return _POD_NAMES[key]
    now = time.monotonic()
    if now - _POD_MISSES.get(key, -math.inf) < POD_RETRY_S:
        return None, None
    found: tuple[str | None, str | None] = (None, None)
    try:
        with os.scandir(pods_root) as it:
            for entry in it:
                ns, sep, rest = entry.name.partition("_")
                pod, sep2, tail = rest.rpartition("_")
                if sep and sep2 and tail == uid and ns and pod:
                    found = (ns, pod)
                    break
    except OSError:
        pass
    if found == (None, None):
        if len(_POD_MISSES) >= _POD_NAMES_MAX:
            _POD_MISSES.clear()
        _POD_MISSES[key] = now
        return found
    if len(_POD_NAMES) >= _POD_NAMES_MAX:
        _POD_NAMES.clear()
    _POD_NAMES[key] = found
    _POD_MISSES.pop(key, None)
    return found


def parse_cgroup(text: str | None) -> tuple[str | None, str | None]:
    """``(slurm job id, container id)`` from ``/proc/<pid>/cgroup`` lines
    (``0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0``,
    ``0::/system.slice/docker-<64 hex>.scope``...)."""
    if not text:
        return None, None
    job = container = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1].strip()
        if job is None and (m := _JOB_RE.search(path)):
            job = m.group(1)
        if container is None and (m := _CONTAINER_RE.search(path)):
            container = m.group(1) or m.group(2)
    return job, container


def describe(pid: int, used_memory_mib: float | None, proc_root: str = "/proc",
             serving_pattern: re.Pattern[str] = serving.DEFAULT,
             pods_root: str = PODS_ROOT) -> ProcessInfo:
    """A :class:`ProcessInfo` for ``pid`` with whatever ``/proc`` lets us read;
    ``serving_pattern`` (:func:`watchdog.serving.matcher`) marks inference servers."""
    base = Path(proc_root) / str(pid)
    comm = _read(base / "comm", 256)
    name = comm.decode(errors="replace").strip() or None if comm else None
    raw = _read(base / "cmdline", CMDLINE_MAX)
    cmdline = raw.replace(b"\0", b" ").decode(errors="replace").strip() if raw else ""
    serving = (serving_pattern.search(cmdline) is not None
               or (name is not None and serving_pattern.search(name) is not None)) \
        if (cmdline or name) else None
    environ = _read(base / "environ")
    cg = _read(base / "cgroup")
    cg_text = cg.decode(errors="replace") if cg else None
    cg_job, container = parse_cgroup(cg_text)
    job, run, job_from, note = slurm_identity(pid, environ, cg_job)
    pod = pod_from_cgroup(cg_text)
    ns, pod_name = pod_names(pod, pods_root) if pod else (None, None)
    return ProcessInfo(pid=pid, name=name, used_memory_mib=used_memory_mib,
                       job_id=job, container=container, serving=serving, job_run=run,
                       pod_uid=pod, pod_namespace=ns, pod_name=pod_name,
                       job_from=job_from, job_note=note)


def slurm_identity(pid: int, environ: bytes | None, cg_job: str | None
                   ) -> tuple[str | None, str | None, str | None, str | None]:
    """``(job id, run, where the id came from, note)`` of one process: the cgroup's
    ``job_<id>`` wins; else ``SLURM_JOB_ID`` if it is digits (``job_from="environ"``); the
    run (``SLURM_RESTART_COUNT``) only with the variable's own job and only as digits.
    ``note`` says what was dropped (shown by ``watchdog status``), else None."""
    env_job = job_from_environ(environ)
    env_run = env_value(environ, b"SLURM_RESTART_COUNT") if env_job else None
    notes = []
    if env_job is not None and not _DIGITS.match(env_job):
        notes.append(f"SLURM_JOB_ID {env_job[:40]!r} is not a job id (digits only)")
        env_job = env_run = None
    if env_run is not None and not _DIGITS.match(env_run):
        notes.append(f"SLURM_RESTART_COUNT {env_run[:40]!r} is not a number")
        env_run = None
    job: str | None = cg_job
    job_from: str | None = "cgroup"
    if cg_job is not None:
        if env_job is not None and env_job != cg_job:
            notes.append(f"SLURM_JOB_ID {env_job} is not its cgroup's job {cg_job}")
            env_run = None
    else:
        job, job_from = env_job, ("environ" if env_job is not None else None)
    note = f"pid {pid}: {'; '.join(notes)}: dropped" if notes else None
    return job, env_run, job_from, note
