"""W&B system metrics as a wide table: one row per stats record, one column per GPU key.

Two shapes are read: the table W&B's API gives (``wandb.Api().run(…).history(stream=
"system")`` saved with ``to_csv``: columns ``system.gpu.<i>.<key>``, ``_timestamp`` in
POSIX s, ``_runtime``, ``_wandb``, often an unnamed index column first) and the same keys
without the ``system.`` prefix beside ``timestamp_unix`` (and ``timestamp_utc``, not
read). Every other column is ignored. The values go through the run file's conversion
(:mod:`.convert`), so a run file and its table give the same frame.

Its bounds are the replay readers' (no line over 64 KiB, so no header of more than a few
thousand columns; a piped table at most 64 MiB). A table is recognised by its header
(:func:`looks_like`): a ``gpu.<i>.<key>`` column and a time column, in the first line.
"""

from __future__ import annotations

import csv
import io

from watchdog.errors import InputError
from watchdog.sources.wandb.convert import KEY, Samples

TIME_COLUMNS = ("timestamp_unix", "_timestamp")


def _header(head: bytes) -> list[str] | None:
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        return next(csv.reader(io.StringIO(text)))
    except (csv.Error, StopIteration):
        return None


def looks_like(head: bytes) -> bool:
    """Whether a CSV's first bytes are a W&B system-metrics table."""
    cols = _header(head)
    if not cols:
        return False
    names = [c.strip() for c in cols]
    return any(c in TIME_COLUMNS for c in names) and any(KEY.match(c) for c in names)


def read(path: str, data: bytes) -> Samples:
    """The samples of the table ``data`` read from ``path``."""
    import numpy as np
    import pandas as pd

    cols = _header(data[:1 << 16]) or []  # the replay readers' line bound: 64 KiB
    names = [c.strip() for c in cols]
    tcol = next((c for c in TIME_COLUMNS if c in names), None)
    if tcol is None:
        raise InputError(f"{path}: a W&B table without a timestamp_unix or _timestamp "
                         "column")
    keep = [c for c in names if KEY.match(c)]
    try:
        frame = pd.read_csv(io.BytesIO(data), usecols=[tcol, *keep], dtype=str,
                            keep_default_na=False, skipinitialspace=True)
    except (ValueError, pd.errors.ParserError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: not a readable W&B table: {first}") from None
    ts = pd.to_numeric(frame[tcol], errors="coerce").to_numpy(dtype=np.float64)
    ok = np.isfinite(ts) & (ts > 0)
    samples = Samples(path)
    dropped = int((~ok).sum())
    values = {c: frame[c].to_numpy(dtype=object) for c in keep}
    for r in np.flatnonzero(ok).tolist():
        samples.add(float(ts[r]), [(c, v[r]) for c, v in values.items()
                                   if v[r] not in ("", "nan", "NaN", "None")])
    if dropped:
        samples.notes.append(f"{path}: {dropped} row(s) without a readable time dropped")
    return samples
