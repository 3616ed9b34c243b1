"""Reader for ``nvidia-smi dmon`` output (``-s pucvmet…``, with or without ``-o DT``).

dmon prints a ``# gpu pwr gtemp …`` name line and a ``# Idx W C …`` unit line, repeats
them every screenful, separates columns by spaces (or commas with ``--format csv``) and
prints ``-`` for a value it cannot read. Header and unit lines are skipped wherever they
appear; a line whose field count differs from the header is an error, except a truncated
last line, which is dropped with a warning. At most 1024 columns; the file was checked
for NUL bytes and overlong lines before it gets here (:meth:`.blob.Blob.check_text`).

Times: ``-o DT`` gives ``Date`` (YYYYMMDD) and ``Time`` (HH:MM:SS) in the logging host's
local time, read in ``tz`` (default UTC). With ``-o T`` only, the date is taken from the
file's modification time. Without times, rows are grouped into ticks (a tick ends when
the GPU index stops increasing), spaced ``interval`` seconds apart and ending at the file's
modification time; a warning says so.

dmon columns -> catalogue: pwr power.draw (W), gtemp temperature.gpu, mtemp
temperature.memory (C), sm utilization.gpu, mem utilization.memory (%), mclk clocks.mem,
pclk clocks.sm (MHz), fb memory.used (MB read as MiB), rxpci/txpci pcie.rx/tx_throughput
(MB/s -> KB/s). Other dmon columns (enc, dec, jpg, ofa, bar1, ccpm, pviol, tviol, sbecc,
dbecc, pci) have no catalogue metric and are ignored.
"""

from __future__ import annotations

import datetime as dt
import io

import numpy as np
import pandas as pd

from watchdog import catalogue
from watchdog.errors import InputError
from watchdog.sources.replay import convert
from watchdog.sources.replay.frame import Recording, build, standin_uuid
from watchdog.sources.replay.smi_layout import MAX_COLUMNS
from watchdog.untyped import Array

COLUMNS: dict[str, tuple[str, float]] = {  # dmon name -> (catalogue name, scale)
    "pwr": ("power.draw", 1.0), "gtemp": ("temperature.gpu", 1.0),
    "mtemp": ("temperature.memory", 1.0), "sm": ("utilization.gpu", 1.0),
    "mem": ("utilization.memory", 1.0), "mclk": ("clocks.mem", 1.0),
    "pclk": ("clocks.sm", 1.0), "fb": ("memory.used", 1.0),
    "rxpci": ("pcie.rx_throughput", 1000.0), "txpci": ("pcie.tx_throughput", 1000.0),
}


def read(path: str, data: bytes, *, host: str, tz: str | None, interval: float,
         mtime: float) -> Recording:
    """Parse dmon output ``data`` read from ``path``."""
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    names: list[str] | None = None
    sep_comma = False
    rows: list[str] = []
    line_no: list[int] = []
    warnings: list[str] = []
    for i, raw in enumerate(lines):
        s = raw.strip()
        if not s:
            continue
        if s.startswith("#"):
            if names is None:
                sep_comma = "," in s
                body = s.lstrip("#")
                names = [w.strip().lower() for w in
                         (body.split(",") if sep_comma else body.split())]
            continue
        rows.append(s)
        line_no.append(i + 1)
    if names is None:
        raise InputError(f"{path}:1: no '# gpu …' header line (not nvidia-smi dmon output)")
    if "gpu" not in names:
        raise InputError(f"{path}:1: dmon header has no 'gpu' column")
    if len(names) > MAX_COLUMNS:
        raise InputError(f"{path}:1: dmon header has {len(names)} columns, more than the "
                         f"{MAX_COLUMNS} a GPU log may have")
    want = len(names)

    def nfields(s: str) -> int:
        return len(s.split(",")) if sep_comma else len(s.split())

    if rows and nfields(rows[-1]) < want and not data.endswith(b"\n"):
        warnings.append(f"{path}:{line_no[-1]}: truncated last line dropped")
        rows.pop()
        line_no.pop()
    for s, ln in zip(rows, line_no, strict=True):
        if nfields(s) != want:
            raise InputError(f"{path}:{ln}: {nfields(s)} fields, expected {want} like the "
                             "'# gpu …' header (mismatched columns)")
    if not rows:
        raise InputError(f"{path}: no data rows")
    # fields split the way nfields() counted them (any whitespace, \v and \f included),
    # so pandas sees exactly the fields that were checked
    body = "\n".join(rows if sep_comma else (" ".join(r.split()) for r in rows))
    # lines end at "\n" only: a stray "\r" inside a line is not a row of its own (pandas
    # would split it into one, and the row numbers in messages would drift)
    raw = pd.read_csv(io.StringIO(body), sep="," if sep_comma else r"\s+", header=None,
                      names=names, index_col=False, na_values=["-", "N/A", "[N/A]"],
                      skipinitialspace=True, lineterminator="\n")
    lines_arr = np.asarray(line_no)

    def where(row: int) -> str:
        return f"{path}:{int(lines_arr[row])}"

    problems = convert.Problems()
    idx_f = convert.convert_column(raw["gpu"], metric="gpu", unit="", problems=problems,
                                   where=where)
    if np.isnan(idx_f).any():
        raise InputError(f"{where(int(np.flatnonzero(np.isnan(idx_f))[0]))}: missing GPU index")
    index = convert.gpu_index(idx_f, "gpu", where)
    ts = _times(raw, names, index, path=path, tz=tz, interval=interval, mtime=mtime,
                where=where, warnings=warnings)
    metrics: dict[str, Array] = {}
    for col, (metric, scale) in COLUMNS.items():
        if col in names:
            unit = catalogue.BY_NAME[metric].unit
            v = convert.convert_column(raw[col], metric=metric, unit=unit, problems=problems,
                                       where=where)
            metrics[metric] = v * scale
    uniq, inv = np.unique(index, return_inverse=True)
    uuid = np.array([standin_uuid(host, int(i)) for i in uniq], dtype=object)[inv]
    warnings.extend(problems.warnings)
    return build(path=path, host=host, fmt="dmon", ts=ts, uuid=uuid, index=index,
                 lost=problems.lost, metrics=metrics, row_errors=problems.errors,
                 warnings=warnings)


def _times(raw: pd.DataFrame, names: list[str], index: Array, *, path: str,
           tz: str | None, interval: float, mtime: float, where, warnings: list[str]
           ) -> Array:
    if "time" in names:
        time_col = raw["time"].astype(str)
        if "date" in names:
            stamp = raw["date"].astype(str).str.strip() + " " + time_col.str.strip()
            fmt_col = pd.Series(stamp)
        else:
            day = dt.datetime.fromtimestamp(mtime, tz=dt.UTC).strftime("%Y%m%d")
            fmt_col = day + " " + time_col.str.strip()
            warnings.append(f"{path}: dmon log has times but no dates; date taken from the "
                            f"file's modification time ({day})")
        codes, uniques = pd.factorize(fmt_col)
        parsed = pd.to_datetime(pd.Index(uniques, dtype=object), format="%Y%m%d %H:%M:%S",
                                errors="coerce")
        if parsed.isna().any():
            bad = int(np.flatnonzero(parsed.isna())[0])
            row = int(np.flatnonzero(codes == bad)[0])
            raise InputError(f"{where(row)}: dmon date/time {uniques[bad]!r} is not "
                             "YYYYMMDD HH:MM:SS")
        parsed = parsed.tz_localize(tz or "UTC", ambiguous="NaT", nonexistent="NaT")
        secs = parsed.as_unit("ns").asi8.astype(np.float64) / 1e9
        return secs[codes]
    tick = np.concatenate(([0], np.cumsum(np.diff(index) <= 0)))
    n_ticks = int(tick[-1]) + 1 if len(tick) else 0
    start = mtime - (n_ticks - 1) * interval
    warnings.append(f"{path}: dmon log has no times (-o DT); assumed one row per GPU every "
                    f"{interval:g} s, ending at the file's modification time")
    return start + tick.astype(np.float64) * interval
