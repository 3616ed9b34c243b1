"""``NvmlSource``: the live ``nvml`` metric source (a :class:`~watchdog.sources.base.LiveSource`).

Opening runs ``nvmlInit`` and the inventory under deadlines (a system lane, then one lane
per GPU, in parallel). ``sample(now)`` hands each sweep of up to 8 GPUs to its lane as one
job (:mod:`watchdog.sources.nvml.sweep`: one thread hand-off per tick, the GPUs read in
turn) and waits for it, each NVML call bounded by ``call_timeout`` seconds: a wedged call
marks that GPU's sample with an error naming the call and the GPU is skipped (with an
error) until the stuck call returns; the other GPUs are read on their own lanes from then
on, unaffected. Readings that need not be fresh every tick are re-read on their own
cadence of the injected clock and carried forward in between: the slow group every
``SLOW_INTERVAL``, GPM every ``GPM_INTERVAL``, the process list every ``PROCS_INTERVAL``.
The caller owns the clock: ``now`` stamps the samples and the XID events they hand out.

No pandas or scikit-learn here: this is on the ``watchdog check`` start-up path.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable
from typing import cast

from watchdog.records import DeviceInfo, ProcessInfo, Sample, XidEvent
from watchdog.sources.nvml.binding import NvmlObject
from watchdog.sources.nvml.deadline import Job, Lane, Wedged
from watchdog.sources.nvml.errors import (
    UNKNOWN,
    GpuLost,
    NvmlUnavailable,
    OnceLog,
    code_of,
    text,
)
from watchdog.sources.nvml.errors import unavailable as _unavailable
from watchdog.sources.nvml.gpm import GpmState
from watchdog.sources.nvml.inventory import cuda_version, read_inventory
from watchdog.sources.nvml.reader import DeviceReader
from watchdog.sources.nvml.sweep import Sweep, sweeps_for
from watchdog.sources.nvml.xid import XidWatcher

# Seconds between reads of the slow group (DeviceReader._slow: violation counters, retired
# page counts, PCIe throughput and link state, the counting field values, enforced power
# limit, fan speed, performance state, graphics and memory clocks). Counters lose nothing by
# a later read, a throughput snapshot every 10 s describes a link as well as one a second,
# and a power limit or link width is at most 10 s stale.
SLOW_INTERVAL = 10.0

# Seconds between GPM samples (watchdog.sources.nvml.gpm): SM, tensor and DRAM activity are
# averages over the interval between two samples, carried forward in between (the first
# two samples are a tick apart). Two seconds halves the GPM calls and moves the real H100
# spin hang's comm_hang (docs/agent-cost.md) 0-1 s later than 1 Hz samples do; 5 s
# moved it 3-4 s, which the rule's "within a minute of the longest wait" cannot spare.
GPM_INTERVAL = 2.0
# Seconds between listings of the compute processes (carried forward in between, like the
# slow group): they name the job in a page and mark serving processes, which the stall
# rule takes the maximum of over 30 s; a job's processes change on a scale of minutes.
PROCS_INTERVAL = 5.0


class _Every:
    """A cadence on the injected clock: ``due(now)`` is true at the first call and then
    once ``interval`` seconds have passed since it last was."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = float("-inf")

    def due(self, now: float) -> bool:
        if now < self._next:
            return False
        self._next = now + self.interval
        return True


_Read = tuple[dict[str, float | None], tuple[ProcessInfo, ...] | None, tuple[str, ...]]


class _Gpu(DeviceReader):
    """A device reader plus what the source knows about the GPU (inventory, open errors)."""

    info: DeviceInfo
    open_error: str | None = None
    sweep: Sweep | None = None  # read with these GPUs on one lane while no call wedged
    held: Lane | None = None  # the abandoned sweep's lane, while it is inside our call

    def open(self, host: str, driver: str | None, cuda: str | None) -> None:
        """Get the handle, UUID, GPM buffers and inventory (runs on the GPU's lane)."""
        nv = self.nv
        self.runs_on.enter("nvmlDeviceGetHandleByIndex")
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(self.index)
        except nv.NVMLError as e:
            if code_of(e) in (15, UNKNOWN):
                self.lost_seen = True
            else:
                self.open_error = f"nvmlDeviceGetHandleByIndex({self.index}): {e}"
            return
        self.handle = handle
        try:
            uuid = text(self.call("uuid", "nvmlDeviceGetUUID")) or f"{host}/gpu{self.index}"
            self.gpm = GpmState.open(self)
            self.info = read_inventory(self, uuid, driver, cuda)
        except GpuLost:
            self.lost_seen = True

    def read_job(self, slow: bool = True, gpm: bool = True, procs: bool = True) -> _Read:
        values, procs_ = self.read(slow, gpm, procs)
        return values, procs_, tuple(self.errors)


class NvmlSource:
    """Live GPU readings through nvidia-ml-py. ``call_timeout``: seconds per NVML call.

    ``kmsg_path`` and ``proc_root`` are for tests (a fake kernel log and ``/proc`` tree).
    Raises :class:`~watchdog.sources.nvml.errors.NvmlUnavailable` (a
    :class:`~watchdog.errors.SourceUnavailable`: one line, the cause and what an operator
    does about it) when the library, the driver or ``nvmlInit`` fails.
    """

    def __init__(self, host: str | None = None, call_timeout: float = 2.0, *,
                 kmsg_path: str = "/dev/kmsg", proc_root: str = "/proc",
                 slow_interval: float = SLOW_INTERVAL,
                 gpm_interval: float = GPM_INTERVAL,
                 procs_interval: float = PROCS_INTERVAL) -> None:
        try:
            import pynvml as nv
        except ImportError as e:
            raise NvmlUnavailable(
                f"nvidia-ml-py is not installed ({e})",
                "`pip install nvidia-ml-py` into nvml-watchdog's environment") from None
        self.host = host or socket.gethostname()
        self.call_timeout = call_timeout
        self._cadences = (_Every(slow_interval), _Every(gpm_interval), _Every(procs_interval))
        self._nv = nv
        self._closed = False
        self._sys = Lane("nvml-system")
        self._once = OnceLog()
        self._gpus: list[_Gpu] = []
        self._sweeps: list[Sweep] = []
        self._xids: XidWatcher | None = None
        try:
            self._sys.run(nv.nvmlInit, call_timeout)
        except Wedged:
            self._sys.stop()
            raise NvmlUnavailable(
                f"nvmlInit did not return within {call_timeout:g} s: the NVIDIA driver may "
                "be wedged",
                "check `nvidia-smi` (a hang there confirms it) and `dmesg | grep -i nvrm`; "
                "a wedged driver usually needs the node drained and rebooted") from None
        except Exception as e:  # noqa: BLE001 - any failure to open NVML is one line
            self._sys.stop()
            raise _unavailable(e) from None
        try:
            self._open(proc_root)
        except Exception:
            self.close()
            raise
        self._xids = XidWatcher(nv, {g.index: g.handle for g in self._gpus if g.handle},
                                {g.index: g.info.pci_bus_id for g in self._gpus},
                                kmsg_path=kmsg_path)

    def _sys_call(self, fn: Callable[[], NvmlObject]) -> NvmlObject:
        try:
            return self._sys.run(fn, self.call_timeout)
        except self._nv.NVMLError:
            return None

    def _open(self, proc_root: str) -> None:
        nv = self._nv
        try:
            count = self._sys.run(nv.nvmlDeviceGetCount, self.call_timeout)
        except (Wedged, nv.NVMLError) as e:
            raise NvmlUnavailable(f"nvmlDeviceGetCount failed: {e}") from None
        driver = text(self._sys_call(nv.nvmlSystemGetDriverVersion))
        cuda = cuda_version(self._sys_call(nv.nvmlSystemGetCudaDriverVersion))
        jobs = []
        for i in range(count):
            g = _Gpu(nv, i, None, Lane(f"nvml-gpu{i}"), self._once, proc_root)
            g.info = DeviceInfo(index=i, uuid=f"{self.host}/gpu{i}", driver_version=driver,
                                cuda_version=cuda)
            self._gpus.append(g)
            jobs.append(g.lane.submit(functools.partial(g.open, self.host, driver, cuda)))
        for g, job in zip(self._gpus, jobs, strict=True):
            try:
                g.lane.wait(job, self.call_timeout)
            except Wedged as w:
                g.open_error = str(w)
        self._sweeps = sweeps_for([g for g in self._gpus if g.handle is not None
                                   and not g.lane.busy])
        for sw in self._sweeps:
            for g in sw.gpus:
                g.sweep = sw

    def devices(self) -> list[DeviceInfo]:
        """Inventory of every GPU NVML enumerates, by index (read once at open)."""
        return [g.info for g in self._gpus]

    def sample(self, now: float) -> list[Sample]:
        """One reading of every GPU, stamped ``now`` (POSIX seconds, injected clock)."""
        out: dict[int, Sample] = {}
        slow, gpm, procs = (c.due(now) for c in self._cadences)

        def read(g: _Gpu) -> _Read:
            return g.read_job(slow, gpm, procs)

        own: list[_Gpu] = []  # read on their own lanes
        swept: dict[Sweep, list[_Gpu]] = {}
        for g in self._gpus:
            uuid = g.info.uuid
            stuck = self._stuck(g)
            if stuck is not None:
                call, since = stuck.inflight
                out[g.index] = Sample(now, uuid, g.index, errors=(
                    f"{call} still outstanding after {time.monotonic() - since:.0f} s: "
                    "GPU skipped",))
            elif g.handle is None:
                out[g.index] = Sample(now, uuid, g.index, lost=g.lost_seen,
                                      errors=(g.open_error,) if g.open_error else ())
            elif g.sweep is not None and not g.sweep.dead:
                swept.setdefault(g.sweep, []).append(g)
            else:
                own.append(g)
        jobs = {g.index: g.lane.submit(functools.partial(read, g)) for g in own}
        runs = []
        for sw, gs in swept.items():
            results: dict[int, object] = {}
            runs.append((sw, gs, results, sw.submit(gs, read, results)))
        for sw, gs, results, job in runs:
            try:
                sw.lane.wait(job, self.call_timeout)
            except Wedged as w:
                results = self._abandon(sw, gs, results, jobs, read, out, now, w)
            for g in gs:
                if g.index in results:
                    out[g.index] = self._outcome(g, now, results[g.index])
        for g in self._gpus:
            if g.index in jobs:
                try:
                    result = g.lane.wait(jobs[g.index], self.call_timeout)
                except Exception as e:  # noqa: BLE001 - Wedged, GpuLost, a bug: one GPU's
                    result = e
                out[g.index] = self._outcome(g, now, result)
        if self._xids is not None:
            for g in self._gpus:
                events = self._xids.take(g.index)
                if events:
                    out[g.index].xids = tuple(
                        XidEvent(now, g.info.uuid, g.index, code, source, message)
                        for code, message, source in events)
        self._once.flush()  # the values found missing so far: one line for the node
        return [out[g.index] for g in self._gpus]

    @staticmethod
    def _stuck(g: _Gpu) -> Lane | None:
        """The lane still inside a call for ``g`` (its own, or the sweep it wedged in)."""
        if g.lane.busy:
            return g.lane
        if g.held is not None:
            if g.held.busy:
                return g.held
            g.held, g.runs_on = None, g.lane  # the stuck call returned: its own lane now
        return None

    def _abandon(self, sw: Sweep[_Gpu], gs: list[_Gpu], results: dict[int, object],
                 jobs: dict[int, Job], read: Callable[[_Gpu], _Read],
                 out: dict[int, Sample], now: float, w: Wedged) -> dict[int, object]:
        """A call in sweep ``sw`` wedged: the GPU inside it keeps the error naming the call
        and stays held; the GPUs the sweep had not reached go to their own lanes now."""
        held = sw.abandon()
        done = dict(results)  # the sweep's thread may still add the held GPU's outcome
        if held is not None:
            if held.index in done:
                held.runs_on = held.lane
            else:
                held.held = sw.lane
                out[held.index] = Sample(now, held.info.uuid, held.index, errors=(str(w),))
        for g in gs:
            if g.index not in done and g.index not in out:
                jobs[g.index] = g.lane.submit(functools.partial(read, g))
        return done

    @staticmethod
    def _outcome(g: _Gpu, now: float, result: object) -> Sample:
        """The sample for one GPU's read: its values, or what stopped it."""
        uuid = g.info.uuid
        if isinstance(result, Wedged):
            return Sample(now, uuid, g.index, errors=(str(result),))
        if isinstance(result, GpuLost):
            return Sample(now, uuid, g.index, lost=True, errors=(str(result),))
        if isinstance(result, BaseException):  # a bug reading one GPU must not stop all
            return Sample(now, uuid, g.index, errors=(
                f"reading GPU {g.index}: {type(result).__name__}: {result}",))
        values, procs, errors = cast(_Read, result)  # what read_job returned
        return Sample(now, uuid, g.index, values, procs, errors=errors)

    @property
    def xid_watcher(self) -> XidWatcher | None:
        """The XID collector (``mode``, ``ready``, ``wait_for_events``), for tools and tests."""
        return self._xids

    def close(self) -> None:
        """Stop the XID thread, free GPM buffers, ``nvmlShutdown``; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._xids is not None:
            self._xids.close()
        for g in self._gpus:
            if g.gpm is not None and self._stuck(g) is None:
                try:
                    g.lane.run(g.gpm.free, self.call_timeout)
                except Wedged:
                    pass
            g.lane.stop()
        for sw in self._sweeps:
            sw.lane.stop()
        try:
            self._sys.run(self._nv.nvmlShutdown, self.call_timeout)
        except (Wedged, self._nv.NVMLError):
            pass
        self._sys.stop()

    def __enter__(self) -> NvmlSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
