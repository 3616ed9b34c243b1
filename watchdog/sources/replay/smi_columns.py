"""Parsed CSV columns -> a :class:`~.frame.Recording` (:func:`to_recording`).

What each column is (:func:`assign`: a catalogue metric, an id field, an inventory field or
one clock-event reason bit), each converted vectorised (:mod:`.convert`), then the GPUs
told apart (by index, by UUID, or by their order within a time step), the inventory read
from each GPU's first row, and the frame built (:func:`.frame.build`).

Column variants: header with or without units (``power.draw [W]``), a metric's secondary
field (``power.draw.instant``) used only when its own is absent, ``clocks_event_reasons.*``
and ``clocks_throttle_reasons.*`` (``active`` as a hex bitmask; the individual
``Active``/``Not Active`` columns are folded into the bitmask when ``active`` is absent),
and a ``memory.used`` above ``memory.total`` (a wrong ``--map``) left out with a warning.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from watchdog import catalogue, reasons
from watchdog.errors import InputError
from watchdog.sources.replay import convert, maxclock
from watchdog.sources.replay.frame import OutOfOrder, Recording, build, standin_uuid
from watchdog.sources.replay.smi_layout import base_name
from watchdog.untyped import Array

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


def assign(raw: pd.DataFrame, mapping: dict[str, str], path: str,
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
        base = base_name(col)
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
            if base_name(roles[role]) in SECONDARY and roles[role] not in taken:
                roles[role] = col  # the canonical field wins over the stand-in seen first
                continue
            warnings.append(f"{path}:1: column {col!r} repeats {role!r}; the first is used")
            continue
        roles[role] = col
    if unknown:
        warnings.append(f"{path}:1: ignored unknown column(s): {', '.join(unknown[:8])}"
                        + (" …" if len(unknown) > 8 else ""))
    return roles


def to_recording(path: str, raw: pd.DataFrame, *, mapping: dict[str, str], host: str,
                 tz: str | None, fmt: str, where: Callable[[int], str],
                 warnings: list[str], part: bool = False) -> Recording:
    """Raw columns -> a :class:`Recording`. A ``part`` of a log read in parts raises
    :class:`OutOfOrder` where only the whole log gives the right answer: rows out of
    order, or GPUs told apart by their order within a tick (no index column)."""
    roles = assign(raw, mapping, path, warnings)
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
    metrics: dict[str, Array] = {}
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
        index = convert.gpu_index(idx, roles["index"], where)
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
        index = _order_in_tick(np.asarray(ts, dtype=np.float64))
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


def _impossible_memory(metrics: dict[str, Array], problems: convert.Problems,
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


# with no GPU column, rows at most this far apart (s) are one query: nvidia-smi reads the
# GPUs of a query 1-22 ms apart and stamps each row, and queries come at least 100 ms
# apart (-lms 100, its shortest loop); a real 2-GPU TITAN X log at 0.1 s has its pairs
# 2-3 ms apart and its queries 100-110 ms apart
NO_INDEX_TICK_S = 0.05


def _order_in_tick(ts: Array) -> Array:
    """GPU numbers for a log with no GPU column: the rows of one query (consecutive rows
    at most :data:`NO_INDEX_TICK_S` apart, in file order) are its GPUs in order. The GPU
    count is the log's usual number of rows per query: a query a moment's jitter joined to
    the next (two rows of a 1-GPU log 30 ms apart) is split into queries of that size, so
    a stray short gap never invents a GPU. Times that are not rising (or unreadable) start
    a new query."""
    if len(ts) == 0:
        return np.zeros(0, np.int64)
    with np.errstate(invalid="ignore"):
        gap = np.diff(ts)
        new = np.concatenate(([True], ~((gap >= 0) & (gap <= NO_INDEX_TICK_S))))
    tick = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    per_query = int(np.bincount(np.bincount(tick)).argmax())
    return ((np.arange(len(ts)) - first[tick]) % max(per_query, 1)).astype(np.int64)


def _first_rows(codes: Array) -> Array:
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


def _inventory(raw: pd.DataFrame, roles: dict[str, str], uuid: Array,
               first_rows: Array, problems: convert.Problems,
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
