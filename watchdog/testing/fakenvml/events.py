"""Event sets (XID delivery) and GPM samples of the fake NVML.

``nvmlEventSetWait_v2`` behaves like the real call: it blocks up to ``timeoutms`` for an
event and returns ``NVML_ERROR_TIMEOUT`` when none came. Scripted XIDs become due at their
scenario time and are delivered once, to a set that registered their GPU.

GPM samples are opaque ids recording (GPU, scenario time); ``nvmlGpmMetricsGet`` answers
from the readings at the later sample's time, as real GPM averages over the interval.
"""

from __future__ import annotations

import threading

from watchdog.testing.fakenvml import ctypesfill as cf
from watchdog.testing.fakenvml.ctypesfill import CArg
from watchdog.testing.fakenvml.scenarios import GpuSpec, Scenario, readings

OK = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
TIMEOUT = 10
XID_CRITICAL = 0x8
_GPM_KEYS = {2: "sm_activity", 3: "sm_occupancy", 5: "tensor_activity", 10: "dram_bw"}


class EventFns:
    """Mixin: needs ``scenario``, ``lock``, ``event_sets``, ``delivered``, ``gpm_samples``,
    ``new_id()``, ``device()``, ``elapsed()`` from the library state."""

    scenario: Scenario
    lock: threading.Lock
    event_sets: dict[int, set[int]]
    delivered: set[int]
    wait_ms: list[int]
    gpm_samples: dict[int, tuple[int, float] | None]
    _event_wake = threading.Event()  # never set: a wait on it is a plain blocking sleep

    def new_id(self) -> int:
        raise NotImplementedError

    def device(self, handle: CArg) -> tuple[int, GpuSpec]:
        raise NotImplementedError

    def elapsed(self) -> float:
        raise NotImplementedError

    # --- events ---------------------------------------------------------------------------
    def nvmlEventSetCreate(self, out: CArg) -> int:
        sid = self.new_id()
        with self.lock:
            self.event_sets[sid] = set()
        cf.set_pointer(out, sid)
        return OK

    def nvmlDeviceRegisterEvents(self, h: CArg, types: CArg, event_set: CArg) -> int:
        i, _ = self.device(h)
        if not self.scenario.events_supported:
            return NOT_SUPPORTED
        sid = cf.pointer_value(event_set)
        with self.lock:
            if sid not in self.event_sets:
                return INVALID_ARGUMENT
            if cf.as_int(types) & XID_CRITICAL:
                self.event_sets[sid].add(i)
        return OK

    def _due(self, sid: int) -> tuple[int, int, int] | None:
        now = self.elapsed()
        with self.lock:
            gpus = self.event_sets.get(sid, set())
            for k, (t, gpu, code) in enumerate(self.scenario.xids):
                if k not in self.delivered and t <= now and gpu in gpus:
                    self.delivered.add(k)
                    return k, gpu, code
        return None

    def nvmlEventSetWait_v2(self, event_set: CArg, data: CArg, timeoutms: CArg) -> int:
        sid = cf.pointer_value(event_set)
        if sid not in self.event_sets:
            return INVALID_ARGUMENT
        self.wait_ms.append(cf.as_int(timeoutms))
        remaining = cf.as_int(timeoutms) / 1000.0
        while True:
            hit = self._due(sid)
            if hit is not None:
                _, gpu, code = hit
                d = cf.target(data)
                cf.set_pointer(d.device, cf.HANDLE_BASE + gpu)
                d.eventType, d.eventData = XID_CRITICAL, code
                d.gpuInstanceId = d.computeInstanceId = 0xFFFFFFFF
                return OK
            if remaining <= 0:
                return TIMEOUT
            # Nothing scripted is left for this set: block for the whole timeout in one
            # wait, as the real call sleeps in the driver (no Python wake-ups to inflate a
            # CPU measurement). Scripted XIDs still to come are checked every 10 ms, since
            # scenario time may be a manual clock that does not advance with the wait.
            step = min(0.01, remaining) if self._undelivered(sid) else remaining
            self._event_wake.wait(step)
            remaining -= step

    def _undelivered(self, sid: int) -> bool:
        with self.lock:
            gpus = self.event_sets.get(sid, set())
            return any(k not in self.delivered and gpu in gpus
                       for k, (_, gpu, _) in enumerate(self.scenario.xids))

    def nvmlEventSetFree(self, event_set: CArg) -> int:
        with self.lock:
            sid = cf.pointer_value(event_set)
            return OK if sid is not None and self.event_sets.pop(sid, None) is not None \
                else INVALID_ARGUMENT

    # --- GPM ------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h: CArg, out: CArg) -> int:
        _, g = self.device(h)
        cf.target(out).isSupportedDevice = 1 if g.gpm else 0
        return OK

    def nvmlGpmSampleAlloc(self, out: CArg) -> int:
        sid = self.new_id()
        with self.lock:
            self.gpm_samples[sid] = None
        cf.set_pointer(out, sid)
        return OK

    def nvmlGpmSampleFree(self, sample: CArg) -> int:
        with self.lock:
            return OK if self.gpm_samples.pop(cf.pointer_value(sample) or 0, 0) != 0 \
                else INVALID_ARGUMENT

    def nvmlGpmSampleGet(self, h: CArg, sample: CArg) -> int:
        i, g = self.device(h)
        if not g.gpm:
            return NOT_SUPPORTED
        sid = cf.pointer_value(sample) or 0
        with self.lock:
            if sid not in self.gpm_samples:
                return INVALID_ARGUMENT
            self.gpm_samples[sid] = (i, self.elapsed())
        return OK

    def nvmlGpmMetricsGet(self, metrics_get: CArg) -> int:
        mg = cf.target(metrics_get)
        with self.lock:
            s1 = self.gpm_samples.get(cf.pointer_value(mg.sample1) or 0)
            s2 = self.gpm_samples.get(cf.pointer_value(mg.sample2) or 0)
        if s1 is None or s2 is None or s1[0] != s2[0] or mg.version != 1:
            return INVALID_ARGUMENT
        gpu = s2[0]
        r = readings(self.scenario.gpus[gpu], gpu, s2[1])
        for k in range(mg.numMetrics):
            m = mg.metrics[k]
            key = _GPM_KEYS.get(m.metricId)
            if key is None:
                m.nvmlReturn = NOT_SUPPORTED
            else:
                m.nvmlReturn, m.value = OK, r[key]
        return OK
