"""How NVML errors become values, lost GPUs, error strings or one-line start-up failures.

* NotSupported / NotFound / NoPermission / FunctionNotFound: the GPU or driver cannot give
  this value: ``None`` (missing, never 0), logged once per (GPU, field) at DEBUG and once
  per node at INFO, one line for all GPUs (:class:`OnceLog`).
* GpuIsLost, and Unknown once the GPU was seen lost: the GPU fell off the bus.
* Anything else: the value is ``None`` and the sample carries an error string naming the
  call, so a flaky driver is visible instead of silently missing.
* Library not found / driver not loaded / other init failures: :class:`NvmlUnavailable`
  (a :class:`~watchdog.errors.SourceUnavailable`, ``watchdog check`` exits 3): one line,
  the cause and what an operator does about it on a production node (:data:`DRIVER_CHECKS`).
  That line becomes the ``nvml_error`` incident's summary and page, so it never says
  "try the simulator": that advice (:data:`TRY_WITHOUT_GPU`) is the exception's ``hint``,
  for the commands a person runs at a terminal to add to their error line.
"""

from __future__ import annotations

import logging
import threading

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

#: What an operator does when NVML cannot be opened or read on a GPU node.
DRIVER_CHECKS = ("check the driver: `nvidia-smi`, `dmesg | grep -i nvrm`, the persistence "
                 "daemon (`systemctl status nvidia-persistenced`); reload the driver "
                 "(`modprobe nvidia` once no job holds the GPUs) or reinstall it if these fail")

#: For a person trying nvml-watchdog on a machine without a GPU, and only for them: never
#: part of an exception's message (which reaches incidents and pages).
TRY_WITHOUT_GPU = "no GPU here? try it on a simulated node: --source sim"


class NvmlUnavailable(SourceUnavailable):
    """NVML cannot be opened: ``str()`` is ``"<cause>: <remedy>"``, one line an operator
    can act on; ``hint`` is the try-it-without-a-GPU advice for an interactive error line
    only (``watchdog check`` at a terminal), never for an incident or a page."""

    def __init__(self, cause: str, remedy: str = DRIVER_CHECKS) -> None:
        super().__init__(f"{cause}: {remedy}")
        self.cause = cause
        self.remedy = remedy
        self.hint = TRY_WITHOUT_GPU


class GpuLost(Exception):
    """Raised inside a device read when NVML reports the GPU lost."""


def text(value: object) -> str | None:
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
    """Which values NVML cannot give, per (GPU, field): each is logged once at DEBUG when
    first seen, and the node's new ones are said in one INFO line by :meth:`flush` (the
    source calls it after a sample): ``metrics not supported on this node (reported as
    missing): fan.speed, violation.{power,thermal} on GPUs 0-7``, not a line per GPU per
    metric. Thread-safe (GPUs are read on their own lanes)."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, str]] = set()
        self._new: dict[str, set[int]] = {}
        self._said = False
        self._lock = threading.Lock()

    def __call__(self, index: int, field: str, message: str) -> bool:
        key = (index, field)
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            self._new.setdefault(field, set()).add(index)
        log.debug("GPU %d: %s: %s (reported as missing from now on)", index, field, message)
        return True

    def summary(self) -> str | None:
        """The fields first seen missing since the last call, as one line; None if none.
        Fields missing on the same GPUs are listed together, with a shared prefix once."""
        with self._lock:
            new, self._new = self._new, {}
            first = not self._said
            self._said = self._said or bool(new)
        if not new:
            return None
        by_gpus: dict[tuple[int, ...], list[str]] = {}
        for field, found_on in new.items():
            by_gpus.setdefault(tuple(sorted(found_on)), []).append(field)
        parts = []
        for gpus, fields in sorted(by_gpus.items(), key=lambda kv: (-len(kv[0]), kv[0])):
            parts.append(f"{_fields(fields)} on {gpu_words(gpus)}")
        head = ("metrics not supported on this node (reported as missing)" if first
                else "more metrics not supported (reported as missing)")
        return f"{head}: {'; '.join(parts)}"

    def flush(self) -> None:
        """Log :meth:`summary` at INFO when there is anything new."""
        line = self.summary()
        if line:
            log.info("%s", line)


def gpu_words(gpus: tuple[int, ...] | list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"GPUs 0-2,5"``; ``[3]`` -> ``"GPU 3"``."""
    gpus = sorted(set(gpus))
    out: list[str] = []
    i = 0
    while i < len(gpus):
        j = i
        while j + 1 < len(gpus) and gpus[j + 1] == gpus[j] + 1:
            j += 1
        out.append(str(gpus[i]) if i == j else f"{gpus[i]}-{gpus[j]}")
        i = j + 1
    return ("GPU " if len(gpus) == 1 else "GPUs ") + ",".join(out)


def _fields(fields: list[str]) -> str:
    """``["violation.power", "violation.thermal", "fan.speed"]`` ->
    ``"violation.{power,thermal}, fan.speed"`` (order of first appearance kept)."""
    groups: dict[str, list[str]] = {}
    for f in fields:
        prefix, dot, rest = f.rpartition(".")
        groups.setdefault(prefix if dot else "", []).append(rest if dot else f)
    out = []
    for prefix, names in groups.items():
        if not prefix:
            out.extend(names)
        elif len(names) == 1:
            out.append(f"{prefix}.{names[0]}")
        else:
            out.append(f"{prefix}.{{{','.join(names)}}}")
    return ", ".join(out)


def unavailable(exc: BaseException, call: str = "nvmlInit") -> NvmlUnavailable:
    """The one-line start-up error for an exception raised while opening NVML."""
    code = code_of(exc)
    if code == LIBRARY_NOT_FOUND:
        return NvmlUnavailable(
            "NVML library libnvidia-ml.so.1 not found (is the NVIDIA driver installed?)",
            "check `nvidia-smi`; install or reinstall the NVIDIA driver, which ships "
            "libnvidia-ml.so.1")
    if code == DRIVER_NOT_LOADED:
        return NvmlUnavailable(
            "NVIDIA driver not loaded (nvmlInit: Driver Not Loaded)",
            "load it (`modprobe nvidia`), then check `nvidia-smi` and `dmesg | grep -i "
            "nvrm`; reinstall the driver if it does not load")
    if code == NO_PERMISSION:
        return NvmlUnavailable(
            f"{call}: no permission to open the NVIDIA device files (/dev/nvidia*)",
            "run as root or as a user in the video group (the service unit's "
            "DeviceAllow= must allow /dev/nvidia*)")
    if code is not None:
        return NvmlUnavailable(f"{call} failed: {exc} (NVML error {code})")
    return NvmlUnavailable(f"{call} failed: {type(exc).__name__}: {exc}")
