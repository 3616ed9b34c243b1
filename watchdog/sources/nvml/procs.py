"""Who is using a GPU: process name, Slurm job id and container id from ``/proc``.

NVML gives the pid and GPU memory; the rest comes from ``/proc/<pid>``: ``comm`` (name),
``cmdline`` (what it runs: ``python -m vllm.entrypoints...`` tells a server from a trainer;
only that verdict is kept, never the command line, whose arguments may hold secrets),
``environ`` (``SLURM_JOB_ID``; readable only for our own user or root) and ``cgroup``
(Slurm's ``job_<id>`` cgroup, a container runtime's scope). Anything unreadable is simply
``None``: a health probe must not fail because another user's process is private.
``proc_root`` is injectable so tests use a fake tree.
"""

from __future__ import annotations

import re
from pathlib import Path

from watchdog import serving
from watchdog.records import ProcessInfo

_JOB_RE = re.compile(r"/job_(\d+)(?:/|$)")
# docker-<id>.scope, /docker/<id>, cri-containerd-<id>.scope, crio-<id>, libpod-<id>,
# /kubepods/.../<id>: container ids are 64 hex digits.
_CONTAINER_RE = re.compile(
    r"(?:docker|cri-containerd|crio|libpod|containerd)[-/]([0-9a-f]{64})|/([0-9a-f]{64})(?:\.scope)?$")


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
    if not raw:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            value = item.split(b"=", 1)[1].decode(errors="replace").strip()
            return value or None
    return None


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
             serving_pattern: re.Pattern[str] = serving.DEFAULT) -> ProcessInfo:
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
    job = job_from_environ(_read(base / "environ"))
    cg = _read(base / "cgroup")
    cg_job, container = parse_cgroup(cg.decode(errors="replace") if cg else None)
    return ProcessInfo(pid=pid, name=name, used_memory_mib=used_memory_mib,
                       job_id=job or cg_job, container=container, serving=serving)
