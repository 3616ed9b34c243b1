"""A W&B run file or table -> :class:`WandbRecording` (the replay frame and the job's
console). See the package docstring."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from watchdog.sources.replay.frame import Recording, build, standin_uuid
from watchdog.sources.wandb import meta as meta_mod
from watchdog.sources.wandb.console import ConsoleLine
from watchdog.sources.wandb.convert import MAX_ROWS, Samples, columns, metrics_of
from watchdog.untyped import Array


@dataclass
class WandbRecording(Recording):
    """A :class:`Recording` with what the job said: ``console`` (notable lines, time
    order, the exit as a last line), ``console_seen`` (console lines read in all),
    ``exit_code`` (None: the file has no exit record, the run crashed or still ran)."""

    console: list[ConsoleLine] = field(default_factory=list)
    console_seen: int = 0
    exit_code: int | None = None


def host_of(path: str) -> str:
    """The name a run's incidents carry: ``run-<id>`` (the file's stem, or a table's
    stem without ``.system-metrics``)."""
    stem = Path(path).stem
    return stem.removesuffix(".system-metrics")


def read_run(path: str, host: str | None = None,
             data: bytes | None = None) -> WandbRecording:
    """Read a W&B run file (see :mod:`.runfile`) and its metadata beside it (``data``:
    the file's bytes when it was read from a pipe)."""
    from watchdog.sources.wandb import runfile

    got = runfile.read(path, data)
    warnings = list(got.warnings)
    gm = meta_mod.read(meta_mod.find(path), warnings)
    rec = _recording(path, host or host_of(path), got.samples, gm, warnings)
    rec.console, rec.console_seen, rec.exit_code = got.console, got.console_seen, \
        got.exit_code
    return rec


def read_table(path: str, data: bytes, host: str | None = None) -> WandbRecording:
    """Read a W&B system-metrics table (see :mod:`.table`); the GPU name comes from a
    ``wandb-metadata.json`` beside it (or in ``files/`` beside it) when there is one."""
    from watchdog.sources.wandb import table

    samples = table.read(path, data)
    warnings = samples.warnings()
    gm = meta_mod.read(meta_mod.find(path), warnings)
    if not samples.ts:
        from watchdog.errors import InputError

        raise InputError(f"{path}: a W&B table with no GPU values: nothing to replay")
    return _recording(path, host or host_of(path), samples, gm, warnings, fmt="wandb-table")


def _recording(path: str, host: str, samples: Samples, gm: meta_mod.GpuMeta,
               warnings: list[str], fmt: str = "wandb") -> WandbRecording:
    from watchdog.errors import InputError

    t, cols = columns(samples)
    gpus = sorted({g for g, _ in cols})
    if len(t) * len(gpus) > MAX_ROWS:
        raise InputError(f"{path}: {len(t)} readings x {len(gpus)} GPUs is over "
                         f"{MAX_ROWS} rows: not replayed")
    per_gpu: list[dict[str, Array]] = []
    names: set[str] = set()
    for g in gpus:
        mine = {k: v for (gg, k), v in cols.items() if gg == g}
        m = metrics_of(mine, gm.memory_mib)
        per_gpu.append(m)
        names |= set(m)
    order = [n for n in _CATALOGUE_ORDER if n in names]
    ts_parts: list[Array] = []
    idx_parts: list[Array] = []
    col_parts: dict[str, list[Array]] = {n: [] for n in order}
    for g, m in zip(gpus, per_gpu, strict=True):
        have = np.zeros(len(t), dtype=bool)
        for v in m.values():
            have |= ~np.isnan(v)
        ts_parts.append(t[have])
        idx_parts.append(np.full(int(have.sum()), g, dtype=np.int64))
        for n in order:
            col_parts[n].append(m[n][have] if n in m else np.full(int(have.sum()), np.nan))
    ts = np.concatenate(ts_parts) if ts_parts else np.zeros(0)
    index = np.concatenate(idx_parts) if idx_parts else np.zeros(0, dtype=np.int64)
    uuid = np.array([standin_uuid(host, int(i)) for i in range(max(gpus, default=-1) + 1)],
                    dtype=object)[index] if len(index) else np.zeros(0, dtype=object)
    metrics = {n: np.concatenate(p) if p else np.zeros(0) for n, p in col_parts.items()}
    inventory = {standin_uuid(host, g): _device(gm) for g in gpus}
    rec = build(path=path, host=host, fmt=fmt, ts=ts, uuid=uuid, index=index, lost=None,
                metrics=metrics, inventory=inventory, warnings=warnings)
    return WandbRecording(**{f: getattr(rec, f) for f in rec.__dataclass_fields__})


def _device(gm: meta_mod.GpuMeta) -> dict[str, object]:
    out: dict[str, object] = {}
    if gm.name:
        out["name"] = gm.name
    return out


def _order() -> tuple[str, ...]:
    from watchdog.catalogue import NAMES

    return NAMES


_CATALOGUE_ORDER = _order()


def is_run_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is named like a W&B run file (``*.wandb``)."""
    return os.fspath(path).endswith(".wandb")
