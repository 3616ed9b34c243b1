"""A fake NVML *below* nvidia-ml-py: the real binding code runs, the C library is faked.

``install(scenario)`` puts a :class:`FakeNvml` in ``pynvml.nvmlLib``, clears the binding's
function-pointer cache and makes the binding's loader (``pynvml.CDLL``) find the fake, so
``nvmlInit()`` and every ``nvmlDevice*`` call go through nvidia-ml-py's own ctypes code
into the fake. ``uninstall()`` restores the binding as it was.

Scenarios (:mod:`.scenarios`): healthy, not_supported, gpu_lost, no_library,
init_failure, blocking_call, bytes_strings, xid, xid_kmsg.

Run any console tool against the fake in one process::

    python -m watchdog.testing.fakenvml healthy -- watchdog check --json
    python -m watchdog.testing.fakenvml healthy -- gpustat --json
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from watchdog.testing.fakenvml.ctypesfill import CArg
from watchdog.testing.fakenvml.library import FUNCTIONS, FakeNvml
from watchdog.testing.fakenvml.scenarios import (
    SCENARIOS,
    Blocking,
    GpuSpec,
    Scenario,
    from_dict,
    get,
    load,
)
from watchdog.untyped import JsonDoc

__all__ = ["FUNCTIONS", "SCENARIOS", "Blocking", "FakeNvml", "GpuSpec", "Scenario", "from_dict",
           "get", "install", "installed", "load", "uninstall"]

_lock = threading.Lock()
_saved: JsonDoc | None = None
_current: FakeNvml | None = None


def _no_library(*_args: CArg, **_kwargs: CArg) -> CArg:
    raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")


def install(scenario: str | Scenario, time_fn: Callable[[], float] | None = None) -> FakeNvml:
    """Install the fake for ``scenario`` and return it.

    ``scenario`` is a built-in name, a path to a YAML scenario (``*.yaml``) or a
    :class:`Scenario`.

    ``time_fn`` gives scenario time (POSIX seconds; default the wall clock through
    :class:`watchdog.clock.WallClock`); a test passes ``ManualClock.now``. Installing
    again replaces the previous fake. For ``no_library`` the binding's loader fails as
    when ``libnvidia-ml.so.1`` is absent, so ``nvmlInit`` raises LibraryNotFound.
    """
    import pynvml

    if isinstance(scenario, str):
        sc = load(scenario) if scenario.endswith((".yaml", ".yml")) else get(scenario)
    else:
        sc = scenario
    if time_fn is None:
        from watchdog.clock import WallClock

        time_fn = WallClock().now
    fake = FakeNvml(sc, time_fn)
    global _saved, _current
    with _lock:
        if _current is not None:
            _current.release()
        if _saved is None:
            _saved = {"nvmlLib": pynvml.nvmlLib, "CDLL": pynvml.CDLL,
                      "refcount": pynvml._nvmlLib_refcount}
        pynvml._nvmlGetFunctionPointer_cache.clear()
        if sc.library_missing:
            pynvml.nvmlLib = None
            pynvml.CDLL = _no_library
        else:
            pynvml.nvmlLib = fake
            pynvml.CDLL = lambda *_a, **_k: fake
        _current = fake
    return fake


def installed() -> FakeNvml | None:
    """The fake currently installed, if any."""
    return _current


def uninstall() -> None:
    """Release any blocked call and restore nvidia-ml-py's library state."""
    import pynvml

    global _saved, _current
    with _lock:
        if _current is not None:
            _current.release()
        if _saved is not None:
            pynvml.nvmlLib = _saved["nvmlLib"]
            pynvml.CDLL = _saved["CDLL"]
            pynvml._nvmlLib_refcount = _saved["refcount"]
        pynvml._nvmlGetFunctionPointer_cache.clear()
        _saved = None
        _current = None
