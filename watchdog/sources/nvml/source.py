"""``NvmlSource``: the live ``nvml`` metric source (a :class:`~watchdog.sources.base.LiveSource`).

Opening runs ``nvmlInit`` and the inventory under deadlines (a system lane, then one lane
per GPU, in parallel). ``sample(now)`` submits one read job per GPU to its lane and waits
for all of them (one batch per GPU per tick: a single thread handoff, not one per call),
each NVML call bounded by ``call_timeout`` seconds: a wedged call marks that GPU's sample
with an error naming the call and the GPU is skipped (with an error) until the stuck call
returns; the other GPUs are unaffected. Slow-changing readings (the slow group, see
``SLOW_INTERVAL``) are re-read every ``slow_interval`` seconds of the injected clock and
carried forward in between. The caller owns the clock:
``now`` stamps the samples and the XID events they hand out.

No pandas or scikit-learn here: this is on the ``watchdog check`` start-up path.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from watchdog.errors import SourceUnavailable
from watchdog.model import DeviceInfo, ProcessInfo, Sample, XidEvent
from watchdog.sources.nvml.deadline import Lane, Wedged
from watchdog.sources.nvml.errors import REMEDY, UNKNOWN, GpuLost, OnceLog, code_of, text
from watchdog.sources.nvml.errors import unavailable as _unavailable
from watchdog.sources.nvml.gpm import GpmState
from watchdog.sources.nvml.inventory import cuda_version, read_inventory
from watchdog.sources.nvml.reader import DeviceReader
from watchdog.sources.nvml.xid import XidWatcher

# Seconds between reads of the slow group (DeviceReader._slow: violation counters, retired
# page counts, PCIe throughput and link state, the counting field values, enforced power
# limit, fan speed, performance state, graphics and memory clocks). Counters lose nothing by
# a later read, a throughput snapshot every 10 s describes a link as well as one a second,
# and a power limit or link width is at most 10 s stale.
SLOW_INTERVAL = 10.0

_Read = tuple[dict[str, float | None], tuple[ProcessInfo, ...] | None, tuple[str, ...]]


class _Gpu(DeviceReader):
    """A device reader plus what the source knows about the GPU (inventory, open errors)."""

    info: DeviceInfo
    open_error: str | None = None

    def open(self, host: str, driver: str | None, cuda: str | None) -> None:
        """Get the handle, UUID, GPM buffers and inventory (runs on the GPU's lane)."""
        nv = self.nv
        self.lane.enter("nvmlDeviceGetHandleByIndex")
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

    def read_job(self, slow: bool = True) -> _Read:
        values, procs = self.read(slow)
        return values, procs, tuple(self.errors)


class NvmlSource:
    """Live GPU readings through nvidia-ml-py. ``call_timeout``: seconds per NVML call.

    ``kmsg_path`` and ``proc_root`` are for tests (a fake kernel log and ``/proc`` tree).
    Raises :class:`~watchdog.errors.SourceUnavailable` (one line, with the remedy) when
    the library, the driver or ``nvmlInit`` fails.
    """

    def __init__(self, host: str | None = None, call_timeout: float = 2.0, *,
                 kmsg_path: str = "/dev/kmsg", proc_root: str = "/proc",
                 slow_interval: float = SLOW_INTERVAL) -> None:
        try:
            import pynvml as nv
        except ImportError as e:
            raise SourceUnavailable(
                f"nvidia-ml-py is not installed ({e}): `pip install nvidia-ml-py`. {REMEDY}"
            ) from None
        self.host = host or socket.gethostname()
        self.call_timeout = call_timeout
        self.slow_interval = slow_interval
        self._next_slow = float("-inf")
        self._nv = nv
        self._closed = False
        self._sys = Lane("nvml-system")
        self._once = OnceLog()
        self._gpus: list[_Gpu] = []
        self._xids: XidWatcher | None = None
        try:
            self._sys.run(nv.nvmlInit, call_timeout)
        except Wedged:
            self._sys.stop()
            raise SourceUnavailable(
                f"nvmlInit did not return within {call_timeout:g} s: the NVIDIA driver may be "
                f"wedged (check `nvidia-smi` and the kernel log). {REMEDY}") from None
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

    def _sys_call(self, fn: Any) -> Any:
        try:
            return self._sys.run(fn, self.call_timeout)
        except self._nv.NVMLError:
            return None

    def _open(self, proc_root: str) -> None:
        nv = self._nv
        try:
            count = self._sys.run(nv.nvmlDeviceGetCount, self.call_timeout)
        except (Wedged, nv.NVMLError) as e:
            raise SourceUnavailable(f"nvmlDeviceGetCount failed: {e}. {REMEDY}") from None
        driver = text(self._sys_call(nv.nvmlSystemGetDriverVersion))
        cuda = cuda_version(self._sys_call(nv.nvmlSystemGetCudaDriverVersion))
        jobs = []
        for i in range(count):
            g = _Gpu(nv, i, None, Lane(f"nvml-gpu{i}"), self._once, proc_root)
            g.info = DeviceInfo(index=i, uuid=f"{self.host}/gpu{i}", driver_version=driver,
                                cuda_version=cuda)
            self._gpus.append(g)
            jobs.append(g.lane.submit(lambda g=g: g.open(self.host, driver, cuda)))
        for g, job in zip(self._gpus, jobs, strict=True):
            try:
                g.lane.wait(job, self.call_timeout)
            except Wedged as w:
                g.open_error = str(w)

    def devices(self) -> list[DeviceInfo]:
        """Inventory of every GPU NVML enumerates, by index (read once at open)."""
        return [g.info for g in self._gpus]

    def sample(self, now: float) -> list[Sample]:
        """One reading of every GPU, stamped ``now`` (POSIX seconds, injected clock)."""
        jobs: dict[int, Any] = {}
        out: dict[int, Sample] = {}
        slow = now >= self._next_slow
        if slow:
            self._next_slow = now + self.slow_interval
        for g in self._gpus:
            uuid = g.info.uuid
            if g.lane.busy:
                call, since = g.lane.inflight
                out[g.index] = Sample(now, uuid, g.index, errors=(
                    f"{call} still outstanding after {time.monotonic() - since:.0f} s: "
                    "GPU skipped",))
            elif g.handle is None:
                out[g.index] = Sample(now, uuid, g.index, lost=g.lost_seen,
                                      errors=(g.open_error,) if g.open_error else ())
            else:
                jobs[g.index] = g.lane.submit(lambda g=g: g.read_job(slow))
        for g in self._gpus:
            if g.index not in jobs:
                continue
            uuid = g.info.uuid
            try:
                values, procs, errors = g.lane.wait(jobs[g.index], self.call_timeout)
                out[g.index] = Sample(now, uuid, g.index, values, procs, errors=errors)
            except Wedged as w:
                out[g.index] = Sample(now, uuid, g.index, errors=(str(w),))
            except GpuLost as e:
                out[g.index] = Sample(now, uuid, g.index, lost=True, errors=(str(e),))
            except Exception as e:  # noqa: BLE001 - a bug reading one GPU must not stop all
                out[g.index] = Sample(now, uuid, g.index,
                                      errors=(f"reading GPU {g.index}: {type(e).__name__}: {e}",))
        if self._xids is not None:
            for g in self._gpus:
                events = self._xids.take(g.index)
                if events:
                    out[g.index].xids = tuple(
                        XidEvent(now, g.info.uuid, g.index, code, source, message)
                        for code, message, source in events)
        return [out[g.index] for g in self._gpus]

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
            if g.gpm is not None and not g.lane.busy:
                try:
                    g.lane.run(g.gpm.free, self.call_timeout)
                except Wedged:
                    pass
            g.lane.stop()
        try:
            self._sys.run(self._nv.nvmlShutdown, self.call_timeout)
        except (Wedged, self._nv.NVMLError):
            pass
        self._sys.stop()

    def __enter__(self) -> NvmlSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
