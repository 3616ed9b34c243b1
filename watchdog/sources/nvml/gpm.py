"""GPM metrics (Hopper and newer): SM activity and occupancy, tensor activity, DRAM bandwidth.

GPM metrics are computed *between two samples* taken with ``nvmlGpmSampleGet``. Each GPU
keeps its previous sample: a read that is due takes a new one and, when a previous one
exists, asks ``nvmlGpmMetricsGet`` for the interval between them, then swaps the two
buffers; the metrics are averages over that interval. Samples are due every
``GPM_INTERVAL`` (``watchdog.sources.nvml.source``); a read in between carries the last
metrics forward, the way the slow group's readings are. The first read of a GPU reports
the metrics as missing (None), and the next read samples again whether due or not, so
values arrive a tick after start (and a tick after a failed sample) as before.
"""

from __future__ import annotations

from typing import Protocol

from watchdog import catalogue
from watchdog.sources.nvml.binding import NvmlObject
from watchdog.sources.nvml.deadline import Lane


class DeviceReader(Protocol):
    """What GPM sampling needs of :class:`watchdog.sources.nvml.reader.DeviceReader` (a
    Protocol, so this module does not import the reader that imports it)."""

    nv: NvmlObject  # the nvidia-ml-py module
    runs_on: Lane  # the lane its calls run on (deadlines)

    def call(self, field: str, name: str, *args: object, **kwargs: object) -> NvmlObject: ...

    def classify(self, field: str, name: str, e: BaseException) -> None: ...


# NVML_GPM_METRIC_* id -> catalogue name: the catalogue's GPM entries
METRICS: tuple[tuple[int, str], ...] = tuple(
    (m.nvml.id, m.name) for m in catalogue.METRICS if isinstance(m.nvml, catalogue.Gpm))


class GpmState:
    """The previous/current GPM sample buffers of one GPU."""

    def __init__(self, nv: NvmlObject, prev: NvmlObject, cur: NvmlObject) -> None:
        self.nv = nv
        self.prev = prev
        self.cur = cur
        self.have_prev = False
        self.last: dict[str, float | None] | None = None  # metrics carried forward

    @classmethod
    def open(cls, reader: DeviceReader) -> GpmState | None:
        """Buffers for ``reader``'s GPU when it supports GPM, else None (runs on its lane)."""
        support = reader.call("gpm", "nvmlGpmQueryDeviceSupport")
        if support is None or not support.isSupportedDevice:
            return None
        nv = reader.nv
        reader.runs_on.enter("nvmlGpmSampleAlloc")
        try:
            return cls(nv, nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc())
        except nv.NVMLError as e:
            reader.classify("gpm", "nvmlGpmSampleAlloc", e)
            return None

    def read(self, reader: DeviceReader, due: bool = True) -> dict[str, float | None]:
        """The metrics since the previous sample when ``due`` (or when none are known
        yet), else the last ones again."""
        if not due and self.last is not None:
            return self.last
        out: dict[str, float | None] = {name: None for _, name in METRICS}
        if reader.call("gpm", "nvmlGpmSampleGet", self.cur) is None:
            self.have_prev, self.last = False, None
            return out
        if self.have_prev:
            nv = self.nv
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(METRICS)
            mg.sample1, mg.sample2 = self.prev, self.cur
            for k, (mid, _) in enumerate(METRICS):
                mg.metrics[k].metricId = mid
            reader.runs_on.enter("nvmlGpmMetricsGet")
            try:
                nv.nvmlGpmMetricsGet(mg)
            except nv.NVMLError as e:
                reader.classify("gpm", "nvmlGpmMetricsGet", e)
            else:
                for k, (_, name) in enumerate(METRICS):
                    m = mg.metrics[k]
                    out[name] = float(m.value) if m.nvmlReturn == 0 else None
                self.last = out
        self.prev, self.cur = self.cur, self.prev
        self.have_prev = True
        return out

    def free(self) -> None:
        for s in (self.prev, self.cur):
            try:
                self.nv.nvmlGpmSampleFree(s)
            except self.nv.NVMLError:
                pass
