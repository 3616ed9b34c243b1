"""What the node runs: the job identity on every incident and metric.

A job is what a fleet groups by (``job_id`` on the metrics, the Alertmanager labels and
the identity of a job-wide page). Where it comes from, first match wins:

1. the config's ``job:`` (:class:`JobConfig`): ``id: "4242"`` (fixed), ``id_env: NAME``
   (the agent's own environment, read at start: an agent started per job, a sidecar) or
   ``id_file: PATH`` (a file a scheduler prolog writes and its epilog removes, re-read
   every :data:`FILE_EVERY_S`; missing or empty = no override). It wins over the node.
2. what the node reads from each GPU's processes (:mod:`watchdog.sources.nvml.procs`):
   Slurm's ``job_<id>`` cgroup, else the process's ``SLURM_JOB_ID`` (digits only), with
   its ``SLURM_RESTART_COUNT``, else a Kubernetes pod's UID from the cgroup path, with its
   namespace and name where the node shows them. A job only a process's environment
   names is not :attr:`Job.trusted` (any user can set the variable): it labels the GPU's
   metrics and pages but never joins a job-wide incident or its PagerDuty key; what was
   dropped as not an id is a note in ``watchdog status``.

A GPU keeps the job it last ran for :data:`HOLD_S` after its processes are gone: the rank
that crashed, the GPU that fell off the bus, are the odd ones the fleet rules look for,
and they must still say which job they belong to. A GPU whose processes belong to another
job changes job at once.

The tracker sees every tick's samples through the pipeline's recording port
(:class:`SampleTee`); the metrics endpoint and the notification policy read it from
their own threads, hence the lock.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from watchdog.errors import InputError
from watchdog.pipeline.ports import SampleRecorder
from watchdog.records import DeviceInfo, ProcessInfo, Sample
from watchdog.untyped import Json, JsonDoc

HOLD_S = 1800.0  # a GPU keeps its last job this long after its processes left
MAX_NOTES = 8  # dropped environment values shown by `watchdog status` at a time
FILE_EVERY_S = 10.0  # id_file is re-read this often (agent clock)
MAX_ID = 128
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+=-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Job:
    """One job: ``id`` (Slurm job id, pod UID, or the config's), ``scheduler`` (``slurm``,
    ``kubernetes`` or ``config``), ``run`` (Slurm's restart count: a requeued job keeps its
    id but is a new run), and a pod's ``namespace`` and ``pod`` name where known."""

    id: str
    scheduler: str
    run: str | None = None
    namespace: str | None = None
    pod: str | None = None
    trusted: bool = True  # False: only a process's own environment named it

    @property
    def run_id(self) -> str:
        """What every node of the job shares for one run of it: ``<id>#<run>``."""
        return f"{self.id}#{self.run or 0}"

    def to_dict(self) -> JsonDoc:
        out = {"id": self.id, "scheduler": self.scheduler, "run": self.run,
               "namespace": self.namespace, "pod": self.pod}
        if not self.trusted:
            out["from"] = "environ"
        return out


@dataclass(frozen=True, slots=True)
class JobConfig:
    """The config's ``job:``: at most one of ``id``, ``id_env``, ``id_file``, and
    ``prometheus``: the URL of the Prometheus (or Thanos/Mimir query endpoint) that holds
    the fleet's metrics, asked before a job-wide page is resolved
    (:mod:`watchdog.service.fleet`)."""

    id: str | None = None
    id_env: str | None = None
    id_file: str | None = None
    prometheus: str | None = None


def valid_id(value: str) -> bool:
    """A job id fit for a label value and a page: 1-128 characters, no spaces or quotes."""
    return 0 < len(value) <= MAX_ID and _ID_RE.match(value) is not None


def parse_config(value: Json, at: str) -> JobConfig | None:
    """The config's ``job:`` mapping; every problem is one InputError at ``at``."""
    if value is None:
        return None
    keys = ("id", "id_env", "id_file")
    if not isinstance(value, dict) or set(value) - {*keys, "prometheus"}:
        raise InputError(f"{at}: job must be a mapping with one of id, id_env, id_file "
                         f"and/or prometheus (e.g. {{id_env: SLURM_JOB_ID}})")
    url = value.get("prometheus")
    if url is not None and (not isinstance(url, str)
                            or not url.startswith(("http://", "https://"))):
        raise InputError(f"{at}: job.prometheus must be Prometheus's base URL, e.g. "
                         "http://prometheus:9090")
    given = [k for k in keys if value.get(k) is not None]
    if len(given) > 1 or (not given and url is None):
        raise InputError(f"{at}: job: give exactly one of id, id_env, id_file (and/or "
                         "prometheus)")
    if not given:
        assert url is not None
        return JobConfig(prometheus=url.rstrip("/"))
    key = given[0]
    raw = value[key]
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise InputError(f"{at}: job.{key} must be a string")
    text = str(raw).strip()
    if key == "id" and not valid_id(text):
        raise InputError(f"{at}: job.id {text[:40]!r}: 1 to {MAX_ID} characters of letters, "
                         "digits and . _ : / @ + = -")
    if key == "id_env" and not _ENV_RE.match(text):
        raise InputError(f"{at}: job.id_env {text[:40]!r}: not an environment variable name")
    if key == "id_file" and not text:
        raise InputError(f"{at}: job.id_file must be a file path")
    return JobConfig(**{key: text}, prometheus=url.rstrip("/") if url else None)


def from_processes(procs: Sequence[ProcessInfo] | None) -> Job | None:
    """The job of a GPU's processes: the first a scheduler vouches for (a Slurm cgroup, a
    pod), else the first a process's environment names (not trusted), else None."""
    claimed = None
    for p in procs or ():
        if p.job_id:
            if p.job_from != "environ":
                return Job(str(p.job_id), "slurm", run=p.job_run)
            if claimed is None:
                claimed = Job(str(p.job_id), "slurm", run=p.job_run, trusted=False)
        elif p.pod_uid:
            return Job(p.pod_uid, "kubernetes", namespace=p.pod_namespace, pod=p.pod_name)
    return claimed


class JobTracker:
    """Which job each GPU runs (sticky, see the module docstring), and the override."""

    def __init__(self, config: JobConfig | None = None, hold_s: float = HOLD_S,
                 environ: dict[str, str] | None = None) -> None:
        self.config = config
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._gpus: dict[str, tuple[Job, float, int]] = {}  # uuid -> (job, last seen, index)
        self._override: Job | None = None
        self._file_at = -float("inf")
        self.problem: str | None = None
        self.notes: dict[int, str] = {}  # pid -> what its environment held that was dropped
        if config is not None and config.id is not None:
            self._override = Job(config.id, "config")
        elif config is not None and config.id_env is not None:
            value = (environ if environ is not None else os.environ).get(config.id_env, "")
            value = value.strip()
            if value and valid_id(value):
                self._override = Job(value, "config")
            elif value:
                self.problem = f"job.id_env {config.id_env}: {value[:40]!r} is not a job id"

    # --- the tick thread ---------------------------------------------------------------------
    def observe(self, now: float, samples: Sequence[Sample]) -> None:
        """Take one tick's samples (called every tick: cheap)."""
        if self.config is not None and self.config.id_file is not None and \
                now - self._file_at >= FILE_EVERY_S:
            self._read_file(now)
        with self._lock:
            gpus = self._gpus
            notes: dict[int, str] = {}
            for s in samples:
                for p in s.processes or ():
                    note = getattr(p, "job_note", None)
                    if note and len(notes) < MAX_NOTES:
                        notes[p.pid] = note
                job = from_processes(s.processes)
                if job is not None:
                    gpus[s.uuid] = (job, now, s.index)
                else:
                    held = gpus.get(s.uuid)
                    if held is not None and now - held[1] > self.hold_s:
                        del gpus[s.uuid]
            self.notes = notes

    def _read_file(self, now: float) -> None:
        assert self.config is not None and self.config.id_file is not None
        self._file_at = now
        try:
            # non-blocking and regular files only: a FIFO or a device put there must not
            # hold the tick thread
            fd = os.open(self.config.id_file, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise IsADirectoryError(self.config.id_file)
                text = f.read(4096).decode(errors="replace")
        except IsADirectoryError:
            job, problem = None, f"job.id_file {self.config.id_file}: not a regular file"
        except OSError:
            job, problem = None, None  # no file: no job from the scheduler right now
        else:
            first = (text.strip().splitlines() or [""])[0].strip()
            job = Job(first, "config") if first and valid_id(first) else None
            problem = (f"job.id_file {self.config.id_file}: {first[:40]!r} is not a job id"
                       if first and job is None else None)
        with self._lock:
            self._override, self.problem = job, problem

    # --- any thread ------------------------------------------------------------------------
    def gpu_job(self, uuid: str) -> Job | None:
        """The job GPU ``uuid`` runs (or last ran, within the hold); the override wins."""
        with self._lock:
            if self._override is not None:
                return self._override
            held = self._gpus.get(uuid)
            return held[0] if held is not None else None

    def job_for(self, uuids: Sequence[str]) -> Job | None:
        """The one job of these GPUs: the override; else the job every GPU that has one
        agrees on; else, for an incident naming no GPU of a job (or no GPU at all), the
        node's only job. None when they disagree or the node runs none."""
        with self._lock:
            if self._override is not None:
                return self._override
            jobs = {self._gpus[u][0] for u in uuids if u in self._gpus}
            if not jobs:
                jobs = {j for j, _, _ in self._gpus.values()}
            return next(iter(jobs)) if len(jobs) == 1 else None

    def jobs(self) -> list[tuple[Job, list[int]]]:
        """Every job on the node with its GPU indices (the override: every GPU seen)."""
        with self._lock:
            if self._override is not None:
                return [(self._override, sorted(i for _, _, i in self._gpus.values()))]
            out: dict[Job, list[int]] = {}
            for job, _, index in self._gpus.values():
                out.setdefault(job, []).append(index)
            return [(j, sorted(ix)) for j, ix in sorted(out.items(), key=lambda x: x[0].id)]

    def status(self) -> JsonDoc:
        """For ``watchdog status``: what the node runs and where that came from."""
        cfg = self.config
        with self._lock:
            overridden = self._override is not None
        doc: JsonDoc = {"source": "config" if overridden else "processes",
                               "jobs": [{**j.to_dict(), "gpus": gpus} for j, gpus in self.jobs()]}
        if cfg is not None and (cfg.id or cfg.id_env or cfg.id_file):
            doc["config"] = next(f"{k}: {v}" for k, v in (("id", cfg.id), ("id_env", cfg.id_env),
                                                          ("id_file", cfg.id_file)) if v)
        if cfg is not None and cfg.prometheus:
            from watchdog.notify.http import host_of

            doc["prometheus"] = host_of(cfg.prometheus)  # the host only: no credentials
        if self.problem:
            doc["problem"] = self.problem
        if self.notes:
            doc["notes"] = [self.notes[pid] for pid in sorted(self.notes)]
        return doc


class SampleTee:
    """The pipeline's recording port, teed: every tick's samples go to the job tracker,
    then to the real recorder (``record:``) when there is one."""

    def __init__(self, tracker: JobTracker, recorder: SampleRecorder | None = None,
                 status_to: JsonDoc | None = None) -> None:
        self.tracker = tracker
        self.recorder = recorder
        self.status_to = status_to  # the pipeline's extra status: "job"
        self._shown: object = None

    def open(self, host: str, devices: list[DeviceInfo]) -> None:
        if self.recorder is not None:
            self.recorder.open(host, devices)

    def write(self, now: float, samples: list[Sample]) -> None:
        self.tracker.observe(now, samples)
        if self.status_to is not None:
            shown = (self.tracker.jobs(), self.tracker.problem, self.tracker.notes)
            if shown != self._shown:  # what `watchdog status` says the node runs
                self._shown = shown
                self.status_to["job"] = self.tracker.status()
        if self.recorder is not None:
            self.recorder.write(now, samples)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()

