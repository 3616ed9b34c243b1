"""Reader for ``nvidia-smi --query-gpu=… --format=csv`` logs (and, through a mapping, any CSV).

The file is read once into memory, its head and tail decide the header, the field count
and a truncated last line (:mod:`.smi_layout`), then ``pandas.read_csv`` (C engine) parses
it and every column is converted vectorised into a :class:`Recording`
(:mod:`.smi_columns`, :mod:`.convert`).

Variants handled: header with or without units (``power.draw [W]``), values with or without
units (``41772 MiB``), ``[N/A]``/``[Not Supported]``/``N/A``, error strings (``[GPU is
lost]`` -> lost row; ``[Unknown Error]`` -> missing value plus a ``Sample.errors`` entry),
``clocks_event_reasons.*`` and ``clocks_throttle_reasons.*`` (``active`` as a hex bitmask;
the individual ``Active``/``Not Active`` columns are folded into the bitmask when ``active``
is absent), ``P0`` pstates, leading spaces, several GPUs per file.

A log without a header line needs a mapping by 1-based column number
(``--map timestamp=1,index=2,power.draw=3``, or ``#3``): ``nvidia-smi`` has no default
field order to assume, and guessing would silently mislabel columns. With such a mapping
a header line, if there is one, is ignored: the way out for a header that does not match
its rows. A header repeated before every sample (a logging loop) is skipped and counted;
``nvidia-smi``'s table output is recognised and answered with how to log CSV.

Bounds (the header, the column count, NUL bytes, line lengths) are checked before any
parsing: see :mod:`.smi_layout`.
"""

from __future__ import annotations

import re
import warnings as _warnings

import numpy as np
import pandas as pd

from watchdog.errors import InputError
from watchdog.sources.replay.blob import Blob
from watchdog.sources.replay.frame import Recording
from watchdog.sources.replay.smi_columns import to_recording
from watchdog.sources.replay.smi_layout import Lines, prepare
from watchdog.untyped import Array

_PARSER_ERR = re.compile(r"Expected (?P<want>\d+) fields in line (?P<line>\d+), saw (?P<saw>\d+)")


def read(path: str, blob: Blob, *, mapping: dict[str, str] | None, host: str,
         tz: str | None, fmt: str = "smi_csv") -> Recording:
    """Parse the CSV file ``path`` (bytes through ``blob``) into a :class:`Recording`.

    The fast path never looks at lines one by one: the head and tail decide the header
    and a truncated last line, then ``pandas.read_csv`` parses the bytes. The C parser
    itself rejects a row with too many fields; a row with too few shows up as a missing
    last column, and only then are line layouts computed (:class:`.smi_layout.Lines`) to name it.
    """
    prep = prepare(path, blob, mapping)
    has_header, expected, first_no = prep.has_header, prep.expected, prep.first_no
    lines = prep.lines
    warnings = list(prep.warnings)
    # From memory (a memory map: Blob.reader), not from the path: with category columns,
    # pandas reading a path is about twice as slow (measured with bench/parse_bench.py).
    where = prep.where
    try:
        # No skipinitialspace / na_values / low_memory=False: each slows the C parser
        # down; numbers with leading spaces still parse, and text columns are converted
        # (and stripped) per distinct value.
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore", pd.errors.DtypeWarning)
            _warnings.simplefilter("error", pd.errors.ParserWarning)
            with blob.reader(prep.body_end) as source:
                raw = pd.read_csv(source, header=0 if has_header else None,
                                  skiprows=prep.skip or None,
                                  index_col=False, skip_blank_lines=True, encoding="utf-8",
                                  encoding_errors="replace", dtype=prep.dtypes)
    except pd.errors.ParserWarning:  # the first data row is longer than the header
        ln = lines.line(0)
        raise InputError(f"{path}:{ln if ln is not None else '?'}: more fields than the "
                         f"header's {expected + 1} (mismatched columns)") from None
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty file (no data)") from None
    except pd.errors.ParserError as e:
        m = _PARSER_ERR.search(str(e))
        if m:
            raise InputError(f"{path}:{m['line']}: {m['saw']} fields, expected {m['want']} "
                             "like the header (mismatched columns)") from None
        raise InputError(f"{path}: not a CSV log: {str(e).splitlines()[0][:120]}") from None
    except (ValueError, UnicodeError) as e:
        raise InputError(f"{path}: not a CSV log: {str(e).splitlines()[0][:120]}") from None
    if len(raw) == 0:
        raise InputError(f"{path}:{first_no}: a header but no samples (nothing to replay)")
    if raw.shape[1] != expected + 1:
        raise InputError(f"{path}:{first_no}: header has {expected + 1} fields but rows have "
                         f"{raw.shape[1]} (mismatched columns)")
    short: Array = np.flatnonzero(raw.iloc[:, -1].isna().to_numpy()) if len(raw) \
        else np.zeros(0, dtype=np.int64)
    if len(short) and not lines.consistent(len(raw)):
        lines = Lines(lambda: b"", has_header)  # line numbers unknown from here on
        prep.lines = lines
        warnings.append(f"{path}: odd line endings or quoted newlines: line numbers unknown, "
                        "short rows read as missing values")
    elif len(short):
        for row in short[:100_000]:
            if lines.fields(int(row)) != expected + 1:
                raise InputError(f"{where(int(row))}: {lines.fields(int(row))} fields, expected "
                                 f"{expected + 1} like the header (mismatched columns)")
    if has_header:
        raw.columns = [str(c).strip() for c in raw.columns]
    else:
        raw.columns = [str(i + 1) for i in range(raw.shape[1])]
    return to_recording(path, raw, mapping=prep.mapping, host=host, tz=tz, fmt=fmt, where=where,
                        warnings=warnings)
