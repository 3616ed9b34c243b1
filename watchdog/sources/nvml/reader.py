"""Read one GPU: every NVML call for a sample, run on that GPU's lane.

:class:`DeviceReader` wraps each call (``call``) so the lane knows which call is in
flight (for the deadline), NotSupported-style errors become ``None`` (logged once),
a lost GPU aborts the read (:class:`GpuLost`) and other errors are kept as one-line
strings for the sample.

What to call is the catalogue's (:mod:`watchdog.catalogue`): every metric whose entry is a
:class:`~watchdog.catalogue.Call` or a :class:`~watchdog.catalogue.Field` is read from that
entry alone, scaled to the catalogue's unit (mW -> W, bytes -> MiB, mJ -> J, ns -> s), so
a new NVML metric is one catalogue entry. Metrics of one call share it (the utilization
pair, the memory pair); field values come in one ``nvmlDeviceGetFieldValues`` call per
group, each field with its own status. Two groups: every tick (what the rules need now),
and the slow group (``slow=True``: counters and settings, carried forward between
reads). This module reads the rest itself: the retired pages (two calls, counted), the
running processes (and whether one serves), and GPM (:mod:`.gpm`).
"""

from __future__ import annotations

from dataclasses import replace

from watchdog import catalogue
from watchdog.catalogue import Call, Field
from watchdog.records import ProcessInfo
from watchdog.serving import serving_value
from watchdog.sources.nvml.binding import NvmlObject
from watchdog.sources.nvml.deadline import Lane
from watchdog.sources.nvml.errors import (
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    MISSING_CODES,
    NOT_SUPPORTED,
    UNKNOWN,
    GpuLost,
    OnceLog,
    code_of,
)
from watchdog.sources.nvml.gpm import METRICS as GPM_METRICS
from watchdog.sources.nvml.gpm import GpmState
from watchdog.sources.nvml.procs import describe

MiB = 1024.0 * 1024.0
NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF


def _calls(slow: bool) -> tuple[tuple[str, Call, tuple[tuple[str, Call], ...]], ...]:
    """The catalogue's calls of one group, in catalogue order: ``(key, call, metrics)``,
    one per distinct call; ``key`` names it in logs and in the set of calls a GPU cannot
    answer (the metric's name, or the common prefix of the metrics sharing the call)."""
    groups: dict[Call, list[tuple[str, Call]]] = {}
    for m in catalogue.METRICS:
        if isinstance(m.nvml, Call) and m.nvml.slow == slow:
            groups.setdefault(replace(m.nvml, attr=None, scale=1.0), []).append(
                (m.name, m.nvml))
    out = []
    for call, metrics in groups.items():
        names = [n for n, _ in metrics]
        key = names[0] if len(names) == 1 else names[0].split(".")[0]
        out.append((key, call, tuple(metrics)))
    return tuple(out)


def _fields(slow: bool) -> tuple[tuple[int, str, float], ...]:
    """(field id, catalogue name, scale to the catalogue's unit) of one group."""
    return tuple((m.nvml.id, m.name, m.nvml.scale) for m in catalogue.METRICS
                 if isinstance(m.nvml, Field) and m.nvml.slow == slow)


CALLS = _calls(slow=False)  # every tick: the rules' signals
SLOW_CALLS = _calls(slow=True)  # the slow group
# Every tick: the ecc rule's urgent signals (a new uncorrectable error, pending
# retirements and remaps, a failed remap) and the memory temperature the thermal rule
# reports. Slow: cumulative counters the rules difference over minutes (NVLink errors
# over 5 min, PCIe replays over 2 min), so a 10 s old reading loses nothing, and counters
# no rule pages on (corrected and lifetime ECC, correctable remaps, energy).
FIELDS = _fields(slow=False)
SLOW_FIELDS = _fields(slow=True)
FIELD_IDS = [f[0] for f in FIELDS]
SLOW_FIELD_IDS = [f[0] for f in SLOW_FIELDS]
_UNION_MEMBER = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


class DeviceReader:
    """All reads of GPU ``index``; every method runs on ``runs_on``'s thread (``lane``, the
    GPU's own, or a sweep's)."""

    def __init__(self, nv: NvmlObject, index: int, handle: NvmlObject, lane: Lane, once: OnceLog,
                 proc_root: str = "/proc") -> None:
        self.nv = nv
        self.index = index
        self.handle = handle
        self.lane = lane
        # The lane whose thread makes this GPU's calls now: its own, or a sweep's
        # (watchdog.sources.nvml.sweep); each call marks it, for the deadline.
        self.runs_on = lane
        self.once = once
        self.proc_root = proc_root
        self.errors: list[str] = []
        self.lost_seen = False
        self.gpm: GpmState | None = None
        # Fields this GPU/driver cannot give (NotSupported & co. are static): not asked
        # again, which keeps a sample of an old GPU cheap. And fields read via the old API.
        self.skip: set[str] = set()
        self.older: set[str] = set()
        self.procs: dict[int, ProcessInfo] = {}  # pid -> /proc details seen last tick
        self.slow_values: dict[str, float | None] = {}  # the slow group's last reading
        self.last_procs: tuple[ProcessInfo, ...] | None = None  # the last listing

    def call(self, field: str, name: str, *args: object, **kwargs: object) -> NvmlObject:
        """``pynvml.<name>(handle, *args)``; None when missing; raises GpuLost."""
        if field in self.skip:
            return None
        self.runs_on.enter(name)
        try:
            return getattr(self.nv, name)(self.handle, *args, **kwargs)
        except self.nv.NVMLError as e:
            return self.classify(field, name, e)

    def call_or_older(self, field: str, name: str, older: str, *args: object,
                      **kwargs: object) -> NvmlObject:
        """``call(name)``, or ``call(older)`` when the driver lacks ``name`` (or, for the
        versioned APIs, does not support it): old drivers keep the old entry points."""
        if field in self.skip:
            return None
        if field in self.older:
            return self.call(field, older, *args)
        self.runs_on.enter(name)
        try:
            return getattr(self.nv, name)(self.handle, *args, **kwargs)
        except self.nv.NVMLError as e:
            if code_of(e) in (FUNCTION_NOT_FOUND, NOT_SUPPORTED):
                self.older.add(field)
                return self.call(field, older, *args)
            return self.classify(field, name, e)

    def classify(self, field: str, name: str, e: BaseException) -> None:
        """None for a missing value (logged once); GpuLost; else keep the error line."""
        code = code_of(e)
        if code == GPU_IS_LOST or (code == UNKNOWN and self.lost_seen):
            self.lost_seen = True
            raise GpuLost(f"{name}: {e}") from None
        if code in MISSING_CODES:
            self.skip.add(field)
            self.once(self.index, field, f"{name}: {e}")
        else:
            self.errors.append(f"{name}: {e}")
        return None

    # --- one sample -----------------------------------------------------------------------
    def read(self, slow: bool = True, gpm: bool = True, procs: bool = True
             ) -> tuple[dict[str, float | None], tuple[ProcessInfo, ...] | None]:
        """Values keyed by catalogue name and the running compute processes.

        ``slow``: also re-read the slow group (:meth:`_slow`); otherwise its last values
        are carried forward (the first read always reads it). ``gpm``: take a GPM sample
        (:meth:`GpmState.read`); otherwise the last GPM metrics are carried forward.
        ``procs``: list the compute processes again; otherwise the last list is carried
        forward, unless the last listing failed.
        """
        self.errors = []
        v: dict[str, float | None] = {}
        self._calls(v, CALLS)
        if slow or not self.slow_values:
            self.slow_values = self._slow()
        v.update(self.slow_values)
        self._fields(v, "field_values", FIELDS, FIELD_IDS)
        if self.gpm is not None:
            v.update(self.gpm.read(self, gpm))
        else:  # every catalogue metric is present; missing ones are None
            v.update({name: None for _, name in GPM_METRICS})
        if procs or self.last_procs is None:
            self.last_procs = self._processes()
        # stall waits: servers idle by design
        v["processes.serving"] = serving_value(self.last_procs)
        return v, self.last_procs

    def _slow(self) -> dict[str, float | None]:
        """The slow group: the calls no rule needs every tick, read on their own schedule.

        Violation times (cumulative ns counters: a later read loses nothing), retired-page
        counts (cumulative; the ecc rule's urgent signals, pending retirements and remaps,
        come every tick from the field values), PCIe throughput (a 20 ms sample inside
        the driver that blocks about 8 ms per call on an H100, two calls per GPU), the
        enforced power limit (changed only by an operator or a power-capping policy; the
        rules compare power to it over windows of tens of seconds), the fan speed and the
        graphics and memory clocks (no rule reads them; ``clocks.sm`` is read every tick).
        """
        v: dict[str, float | None] = {}
        self._calls(v, SLOW_CALLS)
        v["retired_pages.count"] = self._retired_pages()
        self._fields(v, "field_values.slow", SLOW_FIELDS, SLOW_FIELD_IDS)
        return v

    def _calls(self, v: dict[str, float | None],
               calls: tuple[tuple[str, Call, tuple[tuple[str, Call], ...]], ...]) -> None:
        """Make each of ``calls`` once and put its metrics, scaled, into ``v``."""
        nv = self.nv
        for key, call, metrics in calls:
            args = tuple(getattr(nv, a) if isinstance(a, str) else a for a in call.args)
            kwargs = {k: getattr(nv, c) for k, c in call.kwargs}
            if call.older is None:
                got = self.call(key, call.fn, *args, **kwargs)
            else:
                try:
                    got = self.call_or_older(key, call.fn, call.older, *args, **kwargs)
                except TypeError:  # gpustat, if imported, patches this binding: no version
                    got = self.call(key, call.fn, *args)
            for name, m in metrics:
                x = got if got is None or m.attr is None else getattr(got, m.attr)
                v[name] = None if x is None else float(x) * m.scale

    def _fields(self, v: dict[str, float | None], key: str,
                fields: tuple[tuple[int, str, float], ...], ids: list[int]) -> None:
        """One ``nvmlDeviceGetFieldValues`` call for ``fields``, each with its own status.
        (Each attribute of pynvml's structures goes through a Python ``__getattribute__``,
        so every one is read once.)"""
        values = self.call(key, "nvmlDeviceGetFieldValues", ids)
        if values is None:
            v.update({name: None for _, name, _ in fields})
            return
        for fv, (fid, name, scale) in zip(values, fields, strict=True):
            rc = fv.nvmlReturn
            if rc == GPU_IS_LOST:
                self.lost_seen = True
                raise GpuLost(f"nvmlDeviceGetFieldValues({fid}): GPU is lost")
            if rc != 0:
                if rc in MISSING_CODES:
                    self.once(self.index, name, f"field {fid}: NVML error {rc}")
                else:
                    self.errors.append(f"nvmlDeviceGetFieldValues field {fid} ({name}): "
                                       f"NVML error {rc}")
                v[name] = None
                continue
            vt = fv.valueType
            member = _UNION_MEMBER[vt] if 0 <= vt < 7 else "ullVal"
            v[name] = float(getattr(fv.value, member)) * scale

    def _retired_pages(self) -> float | None:
        total = 0
        for cause in (0, 1):  # multiple single-bit, double-bit
            pages = self.call("retired_pages.count", "nvmlDeviceGetRetiredPages", cause)
            if pages is None:
                return None
            total += len(pages)
        return float(total)

    def _processes(self) -> tuple[ProcessInfo, ...] | None:
        procs = self.call_or_older("processes", "nvmlDeviceGetComputeRunningProcesses_v3",
                                   "nvmlDeviceGetComputeRunningProcesses_v2")
        if procs is None:
            return None
        out = []
        known: dict[int, ProcessInfo] = {}
        for p in procs:
            mem = p.usedGpuMemory
            mib = None if mem is None or mem == NOT_AVAILABLE_ULL else mem / MiB
            pid = int(p.pid)
            # name, job and container are fixed for a pid's life: read /proc once per pid
            info = self.procs.get(pid) or describe(pid, None, self.proc_root)
            known[pid] = info
            out.append(replace(info, used_memory_mib=mib))
        self.procs = known
        return tuple(out)
