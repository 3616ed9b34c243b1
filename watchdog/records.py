"""The record types every source produces and every consumer reads.

* :class:`DeviceInfo`: what a GPU is (inventory; read once, changes rarely).
* :class:`Sample`: one reading of one GPU at one time. ``values`` maps catalogue names
  (``watchdog.catalogue``) to floats in the catalogue's unit; a value the GPU cannot
  report is ``None``, never 0.
* :class:`ProcessInfo` and :class:`XidEvent` ride along on the sample they were seen with.

A GPU is identified by its UUID: indices renumber after a reboot or a lost GPU. Reports
show both. Sources that cannot know a UUID (a log without a ``uuid`` column) make a
stable stand-in of the form ``"<host>/gpu<index>"``.

This module is on the ``watchdog check`` start-up path: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from watchdog.untyped import JsonDoc


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Inventory of one GPU. Every field but ``index`` and ``uuid`` may be unknown (None).

    Power in W, clocks in MHz, memory in MiB, temperatures in degrees C.
    """

    index: int
    uuid: str
    name: str | None = None
    pci_bus_id: str | None = None
    serial: str | None = None
    vbios_version: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    power_limit_enforced_w: float | None = None
    power_limit_default_w: float | None = None
    power_limit_min_w: float | None = None
    power_limit_max_w: float | None = None
    clocks_max_sm_mhz: float | None = None
    clocks_max_mem_mhz: float | None = None
    memory_total_mib: float | None = None
    temp_slowdown_c: float | None = None
    temp_shutdown_c: float | None = None
    temp_max_operating_c: float | None = None
    mig_mode: bool | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    gpm_supported: bool | None = None

    def to_dict(self) -> JsonDoc:
        """Plain dict (JSON-ready)."""
        return {f: getattr(self, f) for f in self.__slots__}

    @classmethod
    def from_dict(cls, d: JsonDoc) -> DeviceInfo:
        """Inverse of :meth:`to_dict`; unknown keys are ignored (newer recordings)."""
        known = set(cls.__slots__)
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A compute process using a GPU. ``used_memory_mib`` is None where NVML hides it."""

    pid: int
    name: str | None = None
    used_memory_mib: float | None = None
    job_id: str | None = None  # Slurm job id, from /proc/<pid>/environ or cgroup
    container: str | None = None  # container id or cgroup path
    # an inference server (vLLM, Triton...) by its name or /proc/<pid>/cmdline; None =
    # unknown. The command line itself is never kept: arguments may hold secrets.
    serving: bool | None = None
    # the job's run: Slurm's SLURM_RESTART_COUNT (a requeued job keeps its id), from environ
    job_run: str | None = None
    # Kubernetes: the pod's UID from the cgroup path, its namespace and name where the node
    # shows them (/var/log/pods/<namespace>_<pod>_<uid>); never asked of the API server
    pod_uid: str | None = None
    pod_namespace: str | None = None
    pod_name: str | None = None
    # where job_id came from: "cgroup" (Slurm's job_<id> cgroup, which a user cannot
    # forge), "environ" (only the process's own SLURM_JOB_ID: any user can set it, so it
    # never joins a job-wide incident), None (the simulator, a recording)
    job_from: str | None = None
    # what was read and dropped (a SLURM_JOB_ID that is not digits...), for `status`
    job_note: str | None = None

    def to_dict(self) -> JsonDoc:
        """Plain dict; the run, Kubernetes and provenance fields only where known
        (recordings of Slurm or bare-metal nodes stay as they were)."""
        return {f: v for f in self.__slots__
                if (v := getattr(self, f)) is not None or f not in _OPTIONAL_JOB_FIELDS}


_OPTIONAL_JOB_FIELDS = frozenset({"job_run", "pod_uid", "pod_namespace", "pod_name",
                                  "job_from", "job_note"})


@dataclass(frozen=True, slots=True)
class XidEvent:
    """An XID error the driver reported for one GPU at time ``ts`` (POSIX seconds).

    ``source`` is ``"nvml"`` (event set), ``"kmsg"`` (kernel log ``NVRM: Xid`` line),
    ``"sim"`` or ``"replay"``.
    """

    ts: float
    uuid: str
    index: int
    code: int
    source: str = "nvml"
    message: str | None = None

    def to_dict(self) -> JsonDoc:
        return {f: getattr(self, f) for f in self.__slots__}


@dataclass(slots=True)
class Sample:
    """One reading of one GPU at time ``ts`` (POSIX seconds, UTC).

    ``lost`` is True when the GPU has fallen off the bus / NVML reports it lost; then
    ``values`` is empty. ``errors`` lists problems met while reading (an NVML call that
    timed out, an unexpected NVML error), each a one-line string naming the call.
    ``xids`` holds the XID events that arrived since this GPU's previous sample.
    """

    ts: float
    uuid: str
    index: int
    values: dict[str, float | None] = field(default_factory=dict)
    processes: tuple[ProcessInfo, ...] | None = None  # None = not read; () = none running
    xids: tuple[XidEvent, ...] = ()
    lost: bool = False
    errors: tuple[str, ...] = ()

    def get(self, name: str) -> float | None:
        """Value of metric ``name`` or None when missing."""
        v = self.values.get(name)
        if v is None or v != v:  # NaN counts as missing
            return None
        return v
