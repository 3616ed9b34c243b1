"""The fake ``libnvidia-ml.so.1``: an object whose attributes are the C entry points.

nvidia-ml-py looks every function up with ``getattr(nvmlLib, name)`` and calls it with
ctypes arguments; :class:`FakeNvml` answers those calls from a scripted
:class:`~watchdog.testing.fakenvml.scenarios.Scenario`. A function the scenario's driver
lacks is simply not an attribute, so the binding raises ``NVMLError_FunctionNotFound``
exactly as with a real old driver.

Strings and the ``bytes_strings`` scenario: the C library only ever writes bytes into
``char`` buffers; nvidia-ml-py 11.515+ decodes them (``convertStrBytes`` and
``_PrintableStructure``), while older bindings handed those bytes straight to the caller.
A fake below the binding cannot change what today's binding does with the bytes, so the
scenario reproduces what *is* reachable from below: the function set of a 470-era driver
(no ``_v2`` memory info, no ``_v3`` process lists, only the old throttle-reasons name, no
GPM), which sends our source down its fallback paths. The bytes-or-str handling itself is
covered by unit tests of ``watchdog.sources.nvml.errors.text``, which every string read goes
through.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from watchdog.testing.fakenvml import ctypesfill as cf
from watchdog.testing.fakenvml.ctypesfill import CArg, CEntry
from watchdog.testing.fakenvml.device import DeviceFns
from watchdog.testing.fakenvml.events import EventFns
from watchdog.testing.fakenvml.scenarios import GpuSpec, Scenario

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
GPU_IS_LOST = 15

_NO_DEVICE_ARG = frozenset({"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2"})
_PRE_INIT = frozenset({"nvmlInitWithFlags", "nvmlErrorString"})


class Status(Exception):
    """Raised inside an implementation to return an NVML status code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Impl(DeviceFns, EventFns):
    """All entry points as methods named like the C functions, plus the shared state."""

    def __init__(self, scenario: Scenario, time_fn: Callable[[], float]) -> None:
        self.scenario = scenario
        self.time_fn = time_fn
        self.t0 = time_fn()
        self.lock = threading.Lock()
        self.initialized = 0
        self.init_flags: list[int] = []
        self.gpm_samples: dict[int, tuple[int, float] | None] = {}
        self.event_sets: dict[int, set[int]] = {}
        self.wait_ms: list[int] = []  # the timeout of every nvmlEventSetWait_v2, in order
        self.delivered: set[int] = set()
        self.next_id = 1

    # --- helpers used by the mixins ----------------------------------------------------
    def elapsed(self) -> float:
        """Scenario time: seconds since the fake was installed, on the injected clock."""
        return self.time_fn() - self.t0

    def device(self, handle: CArg) -> tuple[int, GpuSpec]:
        addr = cf.pointer_value(handle)
        idx = (addr or 0) - cf.HANDLE_BASE
        if addr is None or not 0 <= idx < len(self.scenario.gpus):
            raise Status(INVALID_ARGUMENT)
        return idx, self.scenario.gpus[idx]

    def new_id(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id

    # --- library lifetime ---------------------------------------------------------------
    def nvmlInitWithFlags(self, flags: CArg) -> int:
        if self.scenario.init_error is not None:
            return self.scenario.init_error
        with self.lock:
            self.initialized += 1
            self.init_flags.append(cf.as_int(flags))
        return SUCCESS

    def nvmlShutdown(self) -> int:
        with self.lock:
            if self.initialized == 0:
                return UNINITIALIZED
            self.initialized -= 1
        return SUCCESS

    def nvmlErrorString(self, result: CArg) -> bytes:
        # The binding sets ``restype = c_char_p`` and receives bytes: so do we.
        return f"Fake NVML error {cf.as_int(result)}".encode()

    # --- system ---------------------------------------------------------------------------
    def nvmlSystemGetDriverVersion(self, buf: CArg, size: CArg) -> int:
        return SUCCESS if cf.write_string(buf, size, self.scenario.driver_version) else 7

    def nvmlSystemGetNVMLVersion(self, buf: CArg, size: CArg) -> int:
        nvml = "12." + self.scenario.driver_version
        return SUCCESS if cf.write_string(buf, size, nvml) else 7

    def nvmlSystemGetCudaDriverVersion(self, out: CArg) -> int:
        cf.set_value(out, self.scenario.cuda_version)
        return SUCCESS

    def nvmlSystemGetCudaDriverVersion_v2(self, out: CArg) -> int:
        return self.nvmlSystemGetCudaDriverVersion(out)

    def nvmlSystemGetProcessName(self, pid: CArg, buf: CArg, size: CArg) -> int:
        for g in self.scenario.gpus:
            if any(p == cf.as_int(pid) for p, _ in g.processes):
                return SUCCESS if cf.write_string(buf, size, "python") else 7
        return 6  # NVML_ERROR_NOT_FOUND

    def nvmlDeviceGetCount_v2(self, out: CArg) -> int:
        cf.set_value(out, len(self.scenario.gpus))
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index: CArg, out: CArg) -> int:
        i = cf.as_int(index)
        if not 0 <= i < len(self.scenario.gpus):
            return INVALID_ARGUMENT
        g = self.scenario.gpus[i]
        if g.lost_after is not None and self.elapsed() >= g.lost_after:
            return GPU_IS_LOST
        cf.set_pointer(out, cf.HANDLE_BASE + i)
        return SUCCESS


FUNCTIONS: tuple[str, ...] = tuple(sorted(n for n in dir(_Impl) if n.startswith("nvml")))
"""Every C entry point the fake can provide (the conformance test checks each)."""


class _CFunction:
    """What ``getattr(nvmlLib, name)`` returns: callable, and attributes such as
    ``restype`` can be set on it as on a ctypes function pointer."""

    def __init__(self, lib: FakeNvml, name: str, impl: CEntry) -> None:
        self._lib = lib
        self._name = name
        self._impl = impl
        self.restype: CArg = None
        self.argtypes: CArg = None

    def __call__(self, *args: CArg) -> CArg:
        return self._lib._dispatch(self._name, self._impl, args)


class FakeNvml:
    """The library object installed as ``pynvml.nvmlLib``.

    Public, for tests: ``scenario``, ``calls`` (a Counter of C function names),
    ``wait_ms`` (the timeout of each ``nvmlEventSetWait_v2`` call, in order), ``blocked``
    (set while a scripted blocking call is waiting), ``release()`` (let it return) and
    ``functions()``. Every other public attribute is a C entry point.
    """

    _impl: _Impl  # set once, past __setattr__

    def __init__(self, scenario: Scenario, time_fn: Callable[[], float]) -> None:
        impl = _Impl(scenario, time_fn)
        object.__setattr__(self, "_impl", impl)
        self.scenario = scenario
        self.calls: Counter[str] = Counter()
        self.blocked = threading.Event()
        self._release = threading.Event()
        self._calls_lock = threading.Lock()
        for name in FUNCTIONS:
            if name not in scenario.missing:
                setattr(self, name, _CFunction(self, name, getattr(impl, name)))

    @staticmethod
    def functions() -> tuple[str, ...]:
        return FUNCTIONS

    @property
    def initialized(self) -> int:
        """nvmlInit calls not yet matched by nvmlShutdown."""
        return self._impl.initialized

    @property
    def wait_ms(self) -> list[int]:
        """The timeout (ms) of each ``nvmlEventSetWait_v2`` call so far, in order."""
        return list(self._impl.wait_ms)

    def release(self) -> None:
        """Let a scripted blocking call (and any later one) return."""
        self._release.set()

    def _dispatch(self, name: str, impl: CEntry, args: tuple[CArg, ...]) -> CArg:
        with self._calls_lock:
            self.calls[name] += 1
        st = self._impl
        if name not in _PRE_INIT and st.initialized == 0:
            return UNINITIALIZED
        try:
            if (name.startswith("nvmlDevice") and name not in _NO_DEVICE_ARG) or name in (
                    "nvmlGpmSampleGet", "nvmlGpmQueryDeviceSupport"):
                idx, gpu = st.device(args[0])
                if gpu.lost_after is not None and st.elapsed() >= gpu.lost_after:
                    return GPU_IS_LOST
                if name in gpu.unsupported:
                    return NOT_SUPPORTED
                b = self.scenario.blocking
                if b is not None and b.function == name and b.gpu in (None, idx):
                    self.blocked.set()
                    self._release.wait()
            return impl(*args)
        except Status as s:
            return s.code
