"""Any CSV read through a column mapping (``--map power.draw=power_W,index=gpu_id,…``).

The mapping names which column holds which catalogue metric (or ``timestamp``, ``index``,
``uuid``, ``name``); columns not mapped are still recognised when they carry an
``nvidia-smi`` field name. Values go through the same vectorised conversions as the
``nvidia-smi`` reader (units in values, missing markers, absurd values), so a custom
logger that wraps ``nvidia-smi`` output loads the same way.
"""

from __future__ import annotations

from watchdog import catalogue
from watchdog.errors import InputError
from watchdog.sources.replay import smi_csv
from watchdog.sources.replay.blob import Blob
from watchdog.sources.replay.frame import Recording

SPECIAL = ("timestamp", "index", "uuid", "name", "pci.bus_id")


def normalise(mapping: dict[str, str], path: str) -> dict[str, str]:
    """Canonical metric names for the mapping's keys; an unknown metric is an error."""
    out: dict[str, str] = {}
    for key, col in mapping.items():
        name = key if key in SPECIAL else catalogue.canonical(key)
        if name is None:
            raise InputError(f"{path}: --map {key}={col}: unknown metric {key!r}")
        if not str(col).strip():
            raise InputError(f"{path}: --map {key}=: empty column name")
        col = str(col).strip()
        if col.startswith("#") and col[1:].isdigit():
            col = col[1:]  # power.draw=#5: the fifth column (the header is ignored)
        out[name] = col
    return out


def read(path: str, data: Blob, *, mapping: dict[str, str], host: str,
         tz: str | None) -> Recording:
    """Parse CSV ``data`` with ``mapping`` applied (see :func:`smi_csv.read`)."""
    return smi_csv.read(path, data, mapping=normalise(mapping, path), host=host, tz=tz,
                        fmt="mapped_csv")
