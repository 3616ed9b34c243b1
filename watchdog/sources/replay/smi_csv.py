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
(``--map timestamp=1,index=2,power.draw=3``): ``nvidia-smi`` has no default field order to
assume, and guessing would silently mislabel columns.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import pandas as pd

from watchdog import catalogue
from watchdog.errors import InputError
from watchdog.sources.replay import convert
from watchdog.sources.replay.frame import Recording, build, standin_uuid

NA_VALUES = ["[N/A]", "N/A", "[Not Supported]", "Not Supported", "-"]

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
# Individual clock-event reason columns -> bit.
REASON_BITS = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
    "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")


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
    """Per line: start offset, end offset (exclusive, newline dropped), comma count."""
    arr = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], nl + 1))
    if len(starts) and starts[-1] >= len(arr):
        starts = starts[:-1]
    ends = np.concatenate((nl, [len(arr)]))[: len(starts)]
    if len(starts) == 0:
        return starts, ends, np.zeros(0, dtype=np.int64)
    commas = np.add.reduceat((arr == 44).view(np.uint8), starts, dtype=np.int64)
    return starts, ends, commas


def read(path: str, data: bytes, *, mapping: dict[str, str] | None, host: str,
         tz: str | None, fmt: str = "smi_csv") -> Recording:
    """Parse CSV bytes ``data`` read from ``path`` into a :class:`Recording`."""
    mapping = dict(mapping or {})
    warnings: list[str] = []
    starts, ends, commas = layout(data)
    lengths = ends - starts
    # a line of only "\r" or nothing is blank; pandas skips those.
    blank = lengths == 0
    if len(lengths):
        cr = np.frombuffer(data, dtype=np.uint8)[np.maximum(ends - 1, 0)] == 13
        blank |= (lengths == 1) & cr
    nonblank = np.flatnonzero(~blank)
    if len(nonblank) == 0:
        raise InputError(f"{path}: empty file (no lines)")
    first = nonblank[0]
    first_line = data[starts[first]:ends[first]].decode("utf-8", "replace").strip("\r")
    numbered = bool(mapping) and all(v.strip().isdigit() for v in mapping.values())
    has_header = not numbered and looks_like_header(first_line)
    if not has_header and not numbered:
        raise InputError(f"{path}:{first + 1}: no header line; name the columns by number, "
                         "e.g. --map timestamp=1,index=2,power.draw=3")
    expected = int(commas[first])
    data_lines = nonblank[1:] if has_header else nonblank
    body_end = len(data)
    if len(data_lines):
        last = data_lines[-1]
        unterminated = not data.endswith(b"\n")
        last_text = data[starts[last]:ends[last]].rstrip(b"\r")
        if unterminated and (commas[last] < expected or last_text.endswith(b",")):
            warnings.append(f"{path}:{last + 1}: truncated last line dropped")
            body_end = int(starts[last])
            data_lines = data_lines[:-1]
        bad = np.flatnonzero(commas[data_lines] != expected)
        if len(bad):
            ln = int(data_lines[bad[0]])
            raise InputError(f"{path}:{ln + 1}: {int(commas[ln]) + 1} fields, expected "
                             f"{expected + 1} like the header (mismatched columns)")
    line_no = data_lines + 1

    def where(row: int) -> str:
        return f"{path}:{int(line_no[row]) if row < len(line_no) else '?'}"

    try:
        raw = pd.read_csv(io.BytesIO(data[:body_end]), header=0 if has_header else None,
                          skipinitialspace=True, na_values=NA_VALUES, index_col=False,
                          skip_blank_lines=True, encoding="utf-8", encoding_errors="replace",
                          low_memory=False)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty file (no data)") from None
    except (pd.errors.ParserError, ValueError, UnicodeError) as e:
        raise InputError(f"{path}: not a CSV log: {str(e).splitlines()[0][:120]}") from None
    if has_header:
        raw.columns = [str(c).strip() for c in raw.columns]
    else:
        raw.columns = [str(i + 1) for i in range(raw.shape[1])]
    if len(raw) != len(line_no):  # a quoted field spanning lines: lose exact line numbers
        line_no = np.arange(len(raw)) + (2 if has_header else 1)
    return _convert(path, raw, mapping=mapping, host=host, tz=tz, fmt=fmt, where=where,
                    warnings=warnings)


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
            warnings.append(f"{path}:1: column {col!r} repeats {role!r}; the first is used")
            continue
        roles[role] = col
    if unknown:
        warnings.append(f"{path}:1: ignored unknown column(s): {', '.join(unknown[:8])}"
                        + (" …" if len(unknown) > 8 else ""))
    return roles


def _convert(path: str, raw: pd.DataFrame, *, mapping: dict[str, str], host: str,
             tz: str | None, fmt: str, where: Callable[[int], str],
             warnings: list[str]) -> Recording:
    roles = _assign(raw, mapping, path, warnings)
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
    if "uuid" in roles:
        u = raw[roles["uuid"]].astype(str).str.strip()
        bad = u.str.startswith("[") | u.isin(["nan", "", "N/A"])
        uuid = u.to_numpy(dtype=object)
        if index is None:
            index = pd.factorize(u)[0].astype(np.int64)
        if bad.any():
            rows = np.flatnonzero(bad.to_numpy())
            uuid[rows] = [standin_uuid(host, int(i)) for i in index[rows]]
    if index is None:
        # no GPU column: GPUs of one time step are told apart by their order in it
        index = pd.Series(ts).groupby(ts, sort=False).cumcount().to_numpy(dtype=np.int64)
    if uuid is None:
        uniq, inv = np.unique(index, return_inverse=True)
        uuid = np.array([standin_uuid(host, int(i)) for i in uniq], dtype=object)[inv]
    inventory = _inventory(raw, roles, uuid, problems, where)
    warnings.extend(problems.warnings)
    rec = build(path=path, host=host, fmt=fmt, ts=ts, uuid=uuid, index=index,
                lost=problems.lost, metrics=metrics, inventory=inventory,
                row_errors=problems.errors, warnings=warnings)
    return rec


def _inventory(raw: pd.DataFrame, roles: dict[str, str], uuid: np.ndarray,
               problems: convert.Problems,
               where: Callable[[int], str]) -> dict[str, dict[str, object]]:
    """DeviceInfo fields per uuid, from the first row each GPU appears in."""
    _, first_rows = np.unique(uuid.astype(str), return_index=True)
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
    return out
