"""How NVML errors become values, lost GPUs, error strings or one-line start-up failures.

* NotSupported / NotFound / NoPermission / FunctionNotFound: the GPU or driver cannot give
  this value: ``None`` (missing, never 0), logged once per (GPU, field).
* GpuIsLost, and Unknown once the GPU was seen lost: the GPU fell off the bus.
* Anything else: the value is ``None`` and the sample carries an error string naming the
  call, so a flaky driver is visible instead of silently missing.
* Library not found / driver not loaded / other init failures: :class:`SourceUnavailable`
  with one line and the remedy (``watchdog check`` exits 3).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from watchdog.errors import SourceUnavailable

log = logging.getLogger("watchdog.sources.nvml")

# pynvml error codes (mirrors NVML_ERROR_*; kept here so importing this module is cheap)
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
UNKNOWN = 999
MISSING_CODES = frozenset({NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, FUNCTION_NOT_FOUND})

REMEDY = "Use --source sim to try without a GPU"


class GpuLost(Exception):
    """Raised inside a device read when NVML reports the GPU lost."""


def text(value: Any) -> str | None:
    """A string from a binding result: older nvidia-ml-py returns bytes, newer str."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        value = bytes(value).split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return str(value).strip()


def code_of(exc: BaseException) -> int | None:
    """The NVML status code of a pynvml ``NVMLError`` (None for other exceptions)."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class OnceLog:
    """Log a (GPU, field) condition only the first time it is seen (thread-safe)."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, index: int, field: str, message: str) -> bool:
        key = (index, field)
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
        log.info("GPU %d: %s: %s (reported as missing from now on)", index, field, message)
        return True


def unavailable(exc: BaseException, call: str = "nvmlInit") -> SourceUnavailable:
    """The one-line start-up error for an exception raised while opening NVML."""
    code = code_of(exc)
    if code == LIBRARY_NOT_FOUND:
        msg = ("NVML library libnvidia-ml.so.1 not found: is the NVIDIA driver installed? "
               f"{REMEDY}")
    elif code == DRIVER_NOT_LOADED:
        msg = ("NVIDIA driver not loaded (nvmlInit: Driver Not Loaded): load it "
               f"(`modprobe nvidia`) or check `nvidia-smi`. {REMEDY}")
    elif code == NO_PERMISSION:
        msg = (f"{call}: no permission to open the NVIDIA device files (/dev/nvidia*): "
               f"run as a user in the video group or as root. {REMEDY}")
    elif code is not None:
        msg = f"{call} failed: {exc} (NVML error {code}); check `nvidia-smi`. {REMEDY}"
    else:
        msg = f"{call} failed: {type(exc).__name__}: {exc}. {REMEDY}"
    return SourceUnavailable(msg)
