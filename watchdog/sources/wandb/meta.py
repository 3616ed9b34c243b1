"""The GPU name, count and memory size from a run's ``files/wandb-metadata.json``.

That file also holds the host name, user paths, the command line and more: this module
reads the GPU fields only and keeps nothing else, and no message quotes the file's
content (a damaged file is named by its path alone). Older W&B versions write
``gpu``, ``gpu_count`` and ``gpu_devices: [{name, memory_total}]``; newer ones
``gpu_nvidia: [{name, memoryTotal}]`` (bytes, as a string).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

#: Largest metadata file read (bytes): a few KiB in practice.
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class GpuMeta:
    """What the metadata says of the GPUs (None: not said)."""

    name: str | None = None
    count: int | None = None
    memory_mib: float | None = None


def find(near: str | os.PathLike[str]) -> Path | None:
    """The metadata file of the run file or table at ``near``: ``files/wandb-metadata.json``
    or ``wandb-metadata.json`` in its folder; None when there is none."""
    folder = Path(near).parent
    for p in (folder / "files" / "wandb-metadata.json", folder / "wandb-metadata.json"):
        if p.is_file():
            return p
    return None


def read(path: Path | None, warnings: list[str]) -> GpuMeta:
    """The GPU fields of the metadata at ``path`` (an empty :class:`GpuMeta` when None or
    unreadable; then one line in ``warnings``, without the file's content)."""
    if path is None:
        return GpuMeta()
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ValueError("over 1 MiB")
        doc = json.loads(path.read_bytes())
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        if isinstance(e, ValueError) and str(e) in ("over 1 MiB", "not a JSON object"):
            why = str(e)
        warnings.append(f"{path}: metadata not read ({why}): GPU name unknown")
        return GpuMeta()
    devices = doc.get("gpu_nvidia") or doc.get("gpu_devices") or []
    first = devices[0] if isinstance(devices, list) and devices else {}
    first = first if isinstance(first, dict) else {}
    name = doc.get("gpu") if isinstance(doc.get("gpu"), str) else first.get("name")
    count = doc.get("gpu_count")
    size = first.get("memoryTotal", first.get("memory_total"))
    try:
        mib = float(size) / 2**20 if size is not None else None
    except (TypeError, ValueError):
        mib = None
    return GpuMeta(name=_clean(name), count=count if isinstance(count, int)
                   and 0 <= count <= 1024 else None,
                   memory_mib=mib if mib and 0 < mib < 2**30 else None)


def _clean(name: object) -> str | None:
    """A GPU product name fit to print: printable, at most 64 characters."""
    if not isinstance(name, str):
        return None
    s = "".join(ch for ch in name if ch.isprintable()).strip()[:64]
    return s or None
