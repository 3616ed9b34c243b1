"""XID errors: an NVML event set on its own thread, the kernel log as a fallback.

The event thread registers ``nvmlEventTypeXidCriticalError`` for every GPU and blocks in
``nvmlEventSetWait_v2`` (2 s at a time: each wake-up with nothing to report costs about
0.28 ms of CPU, mostly nvidia-ml-py raising its timeout error, so 500 ms slices cost 0.55
ms a second and 2 s slices 0.13 ms; the first 10 s use 100 ms slices, so ``close()``
returns at once for a one-shot ``watchdog check`` and within about 2 s later on; an event
arriving mid-wait returns the call at once, so the slice length adds no delivery latency).
Events are queued per GPU index and handed out with that GPU's next sample. Timestamp
choice: an XID gets the injected-clock time of the sample that hands it out (the event
thread never reads a clock), so XIDs are at most one sampling interval late and always
consistent with the sample stream, in replay as in live mode.

When event sets are unsupported (no GPU could register), the source falls back to
``NVRM: Xid`` lines in the kernel log (``/dev/kmsg``, opened non-blocking at start and
positioned at its end, so only lines newer than the source are read), polled at each
sample. :func:`parse_xid_line` reads one line; :func:`bus_key` maps PCI bus ids of both
spellings (``0000:3b:00`` in the kernel log, ``00000000:3B:00.0`` from NVML) to one key.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time

from watchdog.sources.nvml.binding import NvmlObject
from watchdog.sources.nvml.errors import gpu_words, log

_XID_RE = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?\)"
    r"(?:\s*,)?:?\s*(\d+)(?:,\s*(.*?))?\s*$")
_BUS_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.\d)?$")
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError


def bus_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """``(domain, bus, device)`` from ``0000:3b:00``, ``00000000:3B:00.0`` or ``3b:00.0``."""
    if not bus_id:
        return None
    m = _BUS_RE.match(bus_id.strip())
    if not m:
        return None
    return int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16)


def parse_xid_line(line: str) -> tuple[tuple[int, int, int], int, str | None] | None:
    """``(bus key, xid code, rest of the message)`` from a kernel log line, else None.

    Accepts ``/dev/kmsg`` records (``4,1234,5678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=…,
    GPU has fallen off the bus.``), ``dmesg`` lines with a ``[ 123.456]`` prefix and
    journal lines; anything that is not an Xid line gives None.
    """
    m = _XID_RE.search(line)
    if not m:
        return None
    key = (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16))
    return key, int(m.group(4)), (m.group(5) or None)


class KmsgReader:
    """Non-blocking reader of new kernel log records (``/dev/kmsg`` or a test file)."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.path = path
        self._fd: int | None = None
        self._rest = b""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            log.info("kernel log %s not readable (%s): no XID fallback", path, e.strerror)
            return
        try:
            os.lseek(fd, 0, os.SEEK_END)
        except OSError:
            pass
        self._fd = fd

    @property
    def available(self) -> bool:
        return self._fd is not None

    def lines(self) -> list[str]:
        """All complete records written since the previous call."""
        if self._fd is None:
            return []
        chunks = [self._rest]
        while True:
            try:
                data = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as e:  # EPIPE: records overwritten before we read them
                if e.errno == 32:
                    continue
                break
            if not data:
                break
            chunks.append(data)
        raw = b"".join(chunks)
        *done, self._rest = raw.split(b"\n")
        return [d.decode(errors="replace") for d in done if d]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# The first SETTLE_S seconds wait FIRST_WAIT_MS at a time, then ``wait_ms`` (2 s): a
# one-shot reader closes at once, a daemon pays for 0.5 wake-ups a second.
SETTLE_S = 10.0
FIRST_WAIT_MS = 100


class XidWatcher:
    """Collects XID events per GPU index from an NVML event set or the kernel log.

    ``mode`` is ``"starting"``, ``"nvml"``, ``"kmsg"`` or ``"off"``; ``ready`` is set once
    it is known. ``take(index)`` returns and clears ``(code, message, source)`` tuples.
    """

    def __init__(self, pynvml: NvmlObject, handles: dict[int, NvmlObject],
                 bus_ids: dict[int, str | None],
                 kmsg_path: str = "/dev/kmsg", wait_ms: int = 2000) -> None:
        self._nvml = pynvml
        self._handles = handles
        self._by_bus = {k: i for i, b in bus_ids.items() if (k := bus_key(b)) is not None}
        self._wait_ms = wait_ms
        self._pending: dict[int, list[tuple[int, str | None, str]]] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.mode = "starting"
        self._kmsg: KmsgReader | None = KmsgReader(kmsg_path)
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        self._thread.start()

    def _add(self, index: int, code: int, message: str | None, source: str) -> None:
        with self._cond:
            self._pending.setdefault(index, []).append((code, message, source))
            self._cond.notify_all()

    def take(self, index: int) -> list[tuple[int, str | None, str]]:
        if self.mode == "kmsg":
            self.poll_kmsg()
        with self._cond:
            return self._pending.pop(index, [])

    def wait_for_events(self, timeout: float) -> bool:
        """Block until at least one event is queued (for tests and tools); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: bool(self._pending), timeout)

    def poll_kmsg(self) -> None:
        if self._kmsg is None:
            return
        for line in self._kmsg.lines():
            hit = parse_xid_line(line)
            if hit is None:
                continue
            key, code, message = hit
            index = self._by_bus.get(key)
            if index is None:
                log.info("XID %d for unknown PCI device %04x:%02x:%02x ignored", code, *key)
                continue
            self._add(index, code, message, "kmsg")

    def _setup(self) -> NvmlObject:
        nv = self._nvml
        try:
            es = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            log.info("NVML event sets unavailable (%s): XIDs from the kernel log", e)
            return None
        registered = 0
        refused: dict[str, list[int]] = {}  # error -> GPUs: one line for the node
        for index, h in self._handles.items():
            try:
                nv.nvmlDeviceRegisterEvents(h, XID_CRITICAL, es)
                registered += 1
            except nv.NVMLError as e:
                log.debug("GPU %d: XID events not supported (%s)", index, e)
                refused.setdefault(str(e), []).append(index)
        for err, gpus in refused.items():
            log.info("XID events not supported on %s (%s)", gpu_words(gpus), err)
        if registered == 0:
            nv.nvmlEventSetFree(es)
            return None
        return es

    def _run(self) -> None:
        try:
            es = self._setup()
        except Exception as e:  # noqa: BLE001 - a broken event set must not kill sampling
            log.warning("XID event set setup failed: %s: %s", type(e).__name__, e)
            es = None
        if es is None:
            self.mode = "kmsg" if self._kmsg is not None and self._kmsg.available else "off"
            self.ready.set()
            return
        if self._kmsg is not None:
            self._kmsg.close()
            self._kmsg = None
        self.mode = "nvml"
        self.ready.set()
        try:
            self._wait_loop(es)
        finally:
            try:
                self._nvml.nvmlEventSetFree(es)
            except self._nvml.NVMLError:
                pass

    def _wait_loop(self, es: NvmlObject) -> None:
        nv = self._nvml
        by_addr = {ctypes.cast(h, ctypes.c_void_p).value: i for i, h in self._handles.items()}
        logged: set[int | None] = set()
        settled = time.monotonic() + SETTLE_S
        while not self._stop.is_set():
            # short slices while the source may be a one-shot reader (``watchdog check``
            # closes it a second or two after opening, and close() waits for the slice)
            ms = self._wait_ms if time.monotonic() >= settled else min(self._wait_ms,
                                                                          FIRST_WAIT_MS)
            try:
                data = nv.nvmlEventSetWait_v2(es, ms)
            except nv.NVMLError as e:
                code = getattr(e, "value", None)
                if code != 10:  # NVML_ERROR_TIMEOUT just means nothing came
                    if code not in logged:  # once per code: this loop runs all the time
                        logged.add(code)
                        log.warning("nvmlEventSetWait_v2: %s", e)
                    self._stop.wait(ms / 1000.0)
                continue
            if not data.eventType & XID_CRITICAL:
                continue
            index = by_addr.get(ctypes.cast(data.device, ctypes.c_void_p).value)
            if index is not None:
                self._add(index, int(data.eventData), None, "nvml")

    def close(self) -> None:
        """Stop the event thread (waits at most one ``wait_ms`` slice) and the kmsg reader."""
        self._stop.set()
        self._thread.join(timeout=self._wait_ms / 1000.0 + 0.5)
        if self._kmsg is not None:
            self._kmsg.close()
            self._kmsg = None
