"""Reader for ``nvidia-smi --query-gpu=… --format=csv`` logs (and, through a mapping, any CSV).

The file is read once into memory, its line layout is checked with numpy (every line must
have the header's number of fields; a short *last* line without a newline is a truncated
write and is dropped with a warning), then ``pandas.read_csv`` (C engine) parses it and
every column is converted vectorised (:mod:`.convert`).

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

Bounds, checked from the head before any parsing: the header line at most 64 KiB and
:data:`MAX_COLUMNS` columns; then, in two ``memchr`` passes over the file
(:meth:`.blob.Blob.check_text`), no NUL byte and no line longer than 64 KiB. A NUL tail
(a crash mid-write) was cut off before, with a warning (:meth:`.blob.Blob.trim_nul_tail`).
"""

from __future__ import annotations

import re
import warnings as _warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from watchdog import catalogue, reasons
from watchdog.errors import InputError
from watchdog.sources.replay import convert, maxclock
from watchdog.sources.replay.blob import HEAD, MAX_LINE, Blob
from watchdog.sources.replay.frame import OutOfOrder, Recording, build, standin_uuid

ID_FIELDS = {"timestamp", "index", "uuid", "pci.bus_id", "name", "serial", "vbios_version",
             "driver_version"}
# nvidia-smi inventory fields -> (DeviceInfo field, unit)
INVENTORY_NUMERIC: dict[str, tuple[str, str]] = {
    "power.default_limit": ("power_limit_default_w", "W"),
    "power.min_limit": ("power_limit_min_w", "W"),
    "power.max_limit": ("power_limit_max_w", "W"),
    "clocks.max.sm": ("clocks_max_sm_mhz", "MHz"),
    "clocks.max.memory": ("clocks_max_mem_mhz", "MHz"),
    "pcie.link.gen.max": ("pcie_max_gen", ""),
    "pcie.link.width.max": ("pcie_max_width", ""),
}
INVENTORY_TEXT = {"name": "name", "pci.bus_id": "pci_bus_id", "serial": "serial",
                  "vbios_version": "vbios_version", "driver_version": "driver_version"}
# Individual clock-event reason columns -> bit: the one table in watchdog.reasons.
REASON_BITS = reasons.SMI_COLUMNS
# Distinct nvidia-smi fields read as a metric only when its own field is absent (current
# drivers write both): power.draw.instant (instant vs 1 s average), power.limit (the
# requested limit vs the enforced one). Both present is normal: no "repeats" warning.
SECONDARY = {"power.draw.instant", "power.limit"}
REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
#: The most columns a CSV log may have (``nvidia-smi --query-gpu`` knows about 300 fields).
MAX_COLUMNS = 1024
_PARSER_ERR = re.compile(r"Expected (?P<want>\d+) fields in line (?P<line>\d+), saw (?P<saw>\d+)")


def _base(name: str) -> str:
    """``power.draw [W]`` -> ``power.draw`` (lower case, unit suffix dropped)."""
    return name.split("[", 1)[0].strip().lower()


def _is_value(text: str) -> bool:
    """Whether a header-line field looks like data (a number, a time, a marker)."""
    t = text.strip()
    if t.lower() in convert.MISSING_TEXT or (t.startswith("[") and t.endswith("]")):
        return True
    if convert._NUM.match(t) or (t[:1] in ("P",) and t[1:].isdigit()):
        return True
    return t[:4].isdigit() and len(t) >= 8  # 2026/04/19 ..., 2026-04-19T...


def looks_like_header(line: str) -> bool:
    """A first line is a header when none of its fields looks like a value."""
    fields = line.split(",")
    return not any(_is_value(f) for f in fields)


def layout(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per line: start offset, end offset (exclusive, newline dropped), comma count.

    Vectorised: the comma count of each line is the number of comma positions between its
    start and end, found with two binary searches over the sorted comma positions.
    """
    arr = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], nl + 1))
    if len(starts) and starts[-1] >= len(arr):
        starts = starts[:-1]
    ends = np.concatenate((nl, [len(arr)]))[: len(starts)]
    commas_at = np.flatnonzero(arr == 44)
    commas = np.searchsorted(commas_at, ends) - np.searchsorted(commas_at, starts)
    return starts, ends, commas


class _Lines:
    """Where each data row sits in the file, computed only when a message needs it."""

    def __init__(self, data: Callable[[], bytes], has_header: bool) -> None:
        self._get = data
        self._has_header = has_header
        self._rows: np.ndarray | None = None
        self._commas: np.ndarray | None = None
        self._starts = np.empty(0, np.int64)

    def _compute(self) -> None:
        data = self._get()
        starts, ends, commas = layout(data)
        lengths = ends - starts
        blank = lengths == 0
        if len(lengths):
            cr = np.frombuffer(data, dtype=np.uint8)[np.maximum(ends - 1, 0)] == 13
            blank |= (lengths == 1) & cr
        nonblank = np.flatnonzero(~blank)
        rows = nonblank[1:] if self._has_header else nonblank
        self._rows, self._commas = rows + 1, commas[rows]
        self._starts = starts[rows]

    def rows_before(self, offset: int) -> int:
        """Data rows whose line starts before byte ``offset`` (a part's first row)."""
        if self._rows is None:
            self._compute()
        return int(np.searchsorted(self._starts, offset))

    def consistent(self, n_rows: int) -> bool:
        """Whether pandas saw as many rows as there are data lines (no CR-only line ends,
        no quoted newlines); only then do row numbers map onto lines."""
        if self._rows is None:
            self._compute()
        assert self._rows is not None
        return len(self._rows) == n_rows

    def line(self, row: int) -> int | None:
        """1-based file line of data row ``row``."""
        if self._rows is None:
            self._compute()
        assert self._rows is not None
        return int(self._rows[row]) if row < len(self._rows) else None

    def fields(self, row: int) -> int:
        if self._commas is None:
            self._compute()
        assert self._commas is not None
        return int(self._commas[row]) + 1


@dataclass
class Prep:
    """What the head and tail of a CSV log say before any row is parsed."""

    path: str
    blob: Blob
    mapping: dict[str, str]
    warnings: list[str]
    pos: int  # offset of the header (or first) line
    first_no: int  # its 1-based line number
    first_line: str
    has_header: bool
    expected: int  # commas per line
    body_end: int  # bytes read (a truncated last line is left out)
    lines: _Lines
    dtypes: dict[str, str] | None
    repeats: int = 0  # repeated header lines dropped (the bytes are then in memory)
    skip: int = 0  # lines read_csv skips: an ignored header (reading by column number)

    def where(self, row: int) -> str:
        """``file:line`` of data row ``row``."""
        ln = self.lines.line(row)
        return f"{self.path}:{ln if ln is not None else '?'}"


def prepare(path: str, blob: Blob, mapping: dict[str, str] | None) -> Prep:
    """Decide the header, the field count and a truncated last line from the head and
    tail of the file (no row is parsed here)."""
    mapping = dict(mapping or {})
    warnings: list[str] = list(blob.notes)
    head = blob.head
    if b"\n" not in head and not blob.loaded:
        raise InputError(f"{path}:1: the first line is longer than {HEAD >> 10} KiB (not a "
                         "GPU log?)")
    pos = 0
    while True:  # skip leading blank lines
        nl = head.find(b"\n", pos)
        line = head[pos:] if nl < 0 else head[pos:nl]
        if line.strip() or nl < 0:
            break
        pos = nl + 1
    first_line = line.decode("utf-8", "replace").strip()
    if not first_line:
        raise InputError(f"{path}: empty file (no lines)")
    first_no = head.count(b"\n", 0, pos) + 1
    if first_line.startswith(("+---", "| NVIDIA-SMI", "|===")) or "NVIDIA-SMI" in first_line:
        raise InputError(f"{path}:{first_no}: this is nvidia-smi's table output, not a log: "
                         "record a CSV log with nvidia-smi --query-gpu=timestamp,index,uuid,"
                         "utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,"
                         "clocks.sm,clocks_event_reasons.active --format=csv -l 1 > gpu.csv "
                         "(or use watchdog record)")
    numbered = bool(mapping) and all(v.strip().lstrip("#").isdigit() for v in mapping.values())
    if numbered:
        mapping = {k: v.strip().lstrip("#") for k, v in mapping.items()}
    has_header = not numbered and looks_like_header(first_line)
    skip = 0  # lines before the first data row that read_csv must skip (header ignored)
    if numbered and looks_like_header(first_line):
        # the user reads by column number: a header (e.g. one that does not match its
        # rows) is ignored, the data starts on the next non-blank line
        skip = first_no
        while True:
            pos = head.find(b"\n", pos) + 1
            if pos <= 0 or pos >= len(head):
                raise InputError(f"{path}:{first_no}: a header but no samples (nothing to "
                                 "replay)")
            nl = head.find(b"\n", pos)
            line = head[pos:] if nl < 0 else head[pos:nl]
            if line.strip():
                break
        warnings.append(f"{path}:{first_no}: header line ignored (--map by column number)")
        first_line = line.decode("utf-8", "replace").strip()
        first_no = head.count(b"\n", 0, pos) + 1
    if not has_header and not numbered:
        raise InputError(f"{path}:{first_no}: no header line; name the columns by number, "
                         "e.g. --map timestamp=1,index=2,power.draw=3")
    expected = first_line.count(",")
    if expected + 1 > MAX_COLUMNS:
        raise InputError(f"{path}:{first_no}: {expected + 1} columns, more than the "
                         f"{MAX_COLUMNS} a GPU log may have")
    blob.check_text()  # no NUL byte, no line longer than MAX_LINE: before any parsing
    repeats = 0
    raw_line = line.rstrip(b"\r")
    if has_header and blob.dropped:
        repeats = blob.dropped  # a second reader of the same blob (parts -> whole)
    elif has_header and ((b"\n" + raw_line) in head[pos + len(line):] or (
            blob.loaded and (b"\n" + raw_line) in blob.all()[pos + len(line):])):
        # a log appended by `nvidia-smi --query-gpu=… --format=csv` in a loop: the header
        # line before every sample. Identical repeats are dropped and counted.
        repeats = blob.drop_repeats(raw_line)
    if repeats:
        warnings.append(f"{path}: {repeats} repeated header line(s) skipped (a log "
                        "appended in a loop; add ,noheader to --format after the first)")
    body_end = blob.size
    tail = blob.tail(2 * MAX_LINE + 2)  # holds a line end unless the file is one line
    if not tail.endswith(b"\n"):
        if b"\n" not in tail and not blob.loaded:
            tail = blob.all()
        last_start = blob.size - len(tail) + tail.rfind(b"\n") + 1
        last_text = tail[tail.rfind(b"\n") + 1:].rstrip(b"\r")
        if last_start > pos and (last_text.count(b",") < expected or last_text.endswith(b",")):
            ln = blob.count_lines(last_start) + 1
            warnings.append(f"{path}:{ln}: truncated last line dropped")
            body_end = last_start
    lines = _Lines(lambda: blob.all()[:body_end], has_header or bool(skip))
    dtypes = _text_columns(head, pos, first_line) if has_header else None
    return Prep(path, blob, mapping, warnings, pos, first_no, first_line, has_header,
                expected, body_end, lines, dtypes, repeats, skip)


def read(path: str, blob: Blob, *, mapping: dict[str, str] | None, host: str,
         tz: str | None, fmt: str = "smi_csv") -> Recording:
    """Parse the CSV file ``path`` (bytes through ``blob``) into a :class:`Recording`.

    The fast path never looks at lines one by one: the head and tail decide the header
    and a truncated last line, then ``pandas.read_csv`` parses the bytes. The C parser
    itself rejects a row with too many fields; a row with too few shows up as a missing
    last column, and only then are line layouts computed (:class:`_Lines`) to name it.
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
    short = np.flatnonzero(raw.iloc[:, -1].isna().to_numpy()) if len(raw) else []
    if len(short) and not lines.consistent(len(raw)):
        lines = _Lines(lambda: b"", has_header)  # line numbers unknown from here on
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
    return _convert(path, raw, mapping=prep.mapping, host=host, tz=tz, fmt=fmt, where=where,
                    warnings=warnings)


def _text_columns(body: bytes, pos: int, header: str) -> dict[str, str]:
    """Columns whose first value is not a plain number are read as ``category``.

    The C parser then hashes each distinct text once instead of building a Python string
    per row (timestamps, UUIDs, hex masks, ``P0``, ``41772 MiB``): as fast as a plain
    read, and the conversions work on the categories.
    """
    start = body.find(b"\n", pos) + 1
    if start <= 0:
        return {}
    end = body.find(b"\n", start)
    row = body[start:end if end >= 0 else len(body)].decode("utf-8", "replace").split(",")
    names = header.split(",")
    out = {}
    for name, value in zip(names, row, strict=False):
        try:
            float(value)
        except ValueError:
            out[name] = "category"
    return out


def _assign(raw: pd.DataFrame, mapping: dict[str, str], path: str,
            warnings: list[str]) -> dict[str, str]:
    """Decide what each column is: returns {role: column}, role a catalogue name, an id
    field, ``inv:<field>`` or ``reason:<bit>``."""
    columns = list(raw.columns)
    roles: dict[str, str] = {}
    for metric, col in mapping.items():
        if col not in columns:
            shown = ", ".join(columns[:12]) + (" …" if len(columns) > 12 else "")
            raise InputError(f"{path}:1: --map {metric}={col}: no column {col!r} in the file "
                             f"(columns: {shown})")
        roles[metric] = col
    taken = set(mapping.values())
    unknown = []
    for col in columns:
        if col in taken:
            continue
        base = _base(col)
        role = catalogue.canonical(col)
        if role is None and base in ID_FIELDS:
            role = base
        if role is None and base in INVENTORY_NUMERIC:
            role = f"inv:{base}"
        if role is None and base.startswith(REASON_PREFIXES):
            suffix = base.split(".", 1)[1]
            if suffix in REASON_BITS:
                role = f"reason:{REASON_BITS[suffix]}"
            elif suffix == "supported":
                continue
        if role is None:
            unknown.append(col)
            continue
        if role in roles:
            if base in SECONDARY:  # power.draw.instant beside power.draw: a field of its own
                continue
            if _base(roles[role]) in SECONDARY and roles[role] not in taken:
                roles[role] = col  # the canonical field wins over the stand-in seen first
                continue
            warnings.append(f"{path}:1: column {col!r} repeats {role!r}; the first is used")
            continue
        roles[role] = col
    if unknown:
        warnings.append(f"{path}:1: ignored unknown column(s): {', '.join(unknown[:8])}"
                        + (" …" if len(unknown) > 8 else ""))
    return roles


def _convert(path: str, raw: pd.DataFrame, *, mapping: dict[str, str], host: str,
             tz: str | None, fmt: str, where: Callable[[int], str],
             warnings: list[str], part: bool = False) -> Recording:
    """Raw columns -> a :class:`Recording`. A ``part`` of a log read in parts raises
    :class:`OutOfOrder` where only the whole log gives the right answer: rows out of
    order, or GPUs told apart by their order within a tick (no index column)."""
    roles = _assign(raw, mapping, path, warnings)
    if part and "index" not in roles:
        raise OutOfOrder("no index column")
    metric_roles = [r for r in roles if r in catalogue.BY_NAME]
    if not metric_roles and not any(r.startswith("reason:") for r in roles):
        raise InputError(f"{path}:1: no known metric column (columns: "
                         f"{', '.join(map(str, raw.columns[:10]))}); map them with "
                         "--map METRIC=COLUMN")
    if "timestamp" not in roles:
        raise InputError(f"{path}:1: no timestamp column; map one with --map timestamp=COLUMN")
    n = len(raw)
    problems = convert.Problems()
    ts = convert.parse_timestamps(raw[roles["timestamp"]], tz=tz, where=where)
    metrics: dict[str, np.ndarray] = {}
    for m in metric_roles:
        meta = catalogue.BY_NAME[m]
        parse = convert._text_to_float
        if meta.kind == "flags":
            parse = convert.parse_mask
        elif m == "pstate":
            parse = convert.parse_pstate
        metrics[m] = convert.convert_column(raw[roles[m]], metric=m, unit=meta.unit,
                                            problems=problems, where=where, parse=parse)
    _impossible_memory(metrics, problems, where)
    reason_cols = [r for r in roles if r.startswith("reason:")]
    if reason_cols and "clocks_event_reasons.active" not in metrics:
        mask = np.zeros(n, dtype=np.float64)
        seen = np.zeros(n, dtype=bool)
        for r in reason_cols:
            v = convert.convert_column(raw[roles[r]], metric=roles[r], unit="",
                                       problems=problems, where=where,
                                       parse=convert.parse_active)
            ok = ~np.isnan(v)
            seen |= ok
            mask += np.where(ok & (v > 0), float(r.split(":")[1]), 0.0)
        mask[~seen] = np.nan
        metrics["clocks_event_reasons.active"] = mask
    # --- identity ----------------------------------------------------------------------
    index = None
    if "index" in roles:
        idx = convert.convert_column(raw[roles["index"]], metric="index", unit="",
                                     problems=problems, where=where)
        if np.isnan(idx).any():
            row = int(np.flatnonzero(np.isnan(idx))[0])
            raise InputError(f"{where(row)}: column {roles['index']!r}: missing GPU index")
        index = idx.astype(np.int64)
    uuid = None
    uuid_codes = None  # equal codes <=> equal uuid, when known cheaply
    if "uuid" in roles:
        codes, uniques = convert.factorize(raw[roles["uuid"]])
        texts = [str(u).strip() for u in uniques]
        bad_codes = [i for i, t in enumerate(texts) if t.startswith("[") or
                     t.lower() in convert.MISSING_TEXT]
        table = np.array([*texts, ""], dtype=object)
        uuid = table[codes]
        if index is None:
            # nvidia-smi's order is the order of first appearance (category codes would
            # number GPUs by sorted UUID)
            same = pd.factorize(table)[0][codes]
            index = pd.factorize(same)[0].astype(np.int64)
        bad = (codes < 0) | np.isin(codes, bad_codes)
        if bad.any():
            rows = np.flatnonzero(bad)
            uuid[rows] = [standin_uuid(host, int(i)) for i in index[rows]]
        else:  # one code per distinct (stripped) text: no hashing of a million strings
            uuid_codes = pd.factorize(table)[0][codes]
    if index is None:
        # no GPU column: GPUs of one time step are told apart by their order in it
        index = pd.Series(ts).groupby(ts, sort=False).cumcount().to_numpy(dtype=np.int64)
    if uuid is None:
        uniq, inv = np.unique(index, return_inverse=True)
        uuid = np.array([standin_uuid(host, int(i)) for i in uniq], dtype=object)[inv]
        uuid_codes = inv
    if uuid_codes is None:
        uuid_codes = pd.factorize(uuid)[0]
    first_rows = _first_rows(uuid_codes)
    inventory = _inventory(raw, roles, uuid, first_rows, problems, where)
    warnings.extend(problems.warnings)
    rec = build(path=path, host=host, fmt=fmt, ts=ts, uuid=uuid, index=index,
                lost=problems.lost, metrics=metrics, inventory=inventory,
                row_errors=problems.errors, warnings=warnings, first_rows=first_rows,
                in_order=part)
    return rec


def _impossible_memory(metrics: dict[str, np.ndarray], problems: convert.Problems,
                       where: Callable[[int], str]) -> None:
    """``memory.used`` above ``memory.total`` (a wrong ``--map``, a shifted column) is not
    used: one warning, the values become missing (a memory_pressure at 183063 % is not an
    alert)."""
    used, total = metrics.get("memory.used"), metrics.get("memory.total")
    if used is None or total is None:
        return
    bad = used > total * 1.001  # NaN compares False
    if bad.any():
        rows = np.flatnonzero(bad)
        problems.warnings.append(
            f"{where(int(rows[0]))}: memory.used above memory.total in {len(rows)} row(s) "
            f"(e.g. {used[rows[0]]:.0f} > {total[rows[0]]:.0f} MiB): not used (check --map)")
        used[rows] = np.nan


def _first_rows(codes: np.ndarray) -> np.ndarray:
    """Row of the first appearance of each code (codes 0..k-1), in row order."""
    n = len(codes)
    if n == 0:
        return np.empty(0, np.int64)
    k = int(codes.max()) + 1
    head = codes[:min(n, 64 * k + 1024)]  # every GPU is usually in the first ticks
    if head.min() >= 0 and len(np.unique(head)) == k:
        codes, n = head, len(head)  # first appearances lie in here: the same rows
    first = np.full(k, n, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(n))
    return np.sort(first[first < n])


def _inventory(raw: pd.DataFrame, roles: dict[str, str], uuid: np.ndarray,
               first_rows: np.ndarray, problems: convert.Problems,
               where: Callable[[int], str]) -> dict[str, dict[str, object]]:
    """DeviceInfo fields per uuid, from the first row each GPU appears in (``first_rows``,
    in row order)."""
    out: dict[str, dict[str, object]] = {str(uuid[r]): {} for r in first_rows}
    for role, field in INVENTORY_TEXT.items():
        if role in roles:
            col = raw[roles[role]]
            for r in first_rows:
                v = col.iloc[r]
                if isinstance(v, str) and v.strip() and not v.strip().startswith("["):
                    out[str(uuid[r])][field] = v.strip()
    for role, (field, unit) in INVENTORY_NUMERIC.items():
        if f"inv:{role}" in roles:
            v = convert.convert_column(raw[roles[f"inv:{role}"]], metric=role, unit=unit,
                                       problems=problems, where=where)
            for r in first_rows:
                if not np.isnan(v[r]):
                    val = float(v[r])
                    out[str(uuid[r])][field] = int(val) if field.startswith("pcie") else val
    for info in out.values():  # no clocks.max.sm in the log: the model's known maximum
        if "clocks_max_sm_mhz" not in info:
            known = maxclock.max_sm_mhz(str(info.get("name") or ""))
            if known is not None:
                info["clocks_max_sm_mhz"] = known
    return out
