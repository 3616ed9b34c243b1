"""Rule unit tests in the spirit of ``promtool test rules``.

A test file (format in ``docs/rules.md``) gives input series per GPU in a compact notation
(``"100x120"``, ``"0 10 20"``, ``"95+1x10"``, ``"_x5"``, hex ``"0x4x600"``), the sample
interval, the devices, XID events and the incidents expected at ``eval_time``. The series
are fed to the real :class:`~watchdog.detect.Detector` as one frame (in blocks of whole
ticks, as replay feeds a log); each case passes or
fails with a readable diff. ``watchdog rules test`` and the pytest plugin (``rules/
conftest.py``) both run cases through :func:`run_case`.

Bounds (a test file is input too: ``"0x1000000000"`` must not build a billion-item list).
Each is checked before anything is allocated, and a test beyond one is refused with one
line naming the file, the case and the limit:

* a series expands to at most :data:`MAX_SERIES` samples (100 000: 27 hours at 1 s; the
  longest shipped series is under 1 000), counted segment by segment before expanding;
* a test simulates at most :data:`MAX_READINGS` readings (100 000 GPU-ticks: the longest
  series x the GPUs; the biggest shipped test has 4 000) and :data:`MAX_VALUES` values
  (1 000 000: readings x metrics, the cells of the frame the detector sees), and the
  tests of one file at most :data:`MAX_FILE_VALUES` values together (4 000 000: a file's
  cases are parsed before the first runs). The detector is fed the frame in blocks of
  whole ticks (:data:`BLOCK_ROWS`), as replay feeds it, so a test at the caps runs in
  about a second and well under 200 MB;
* the GPUs of ``series:`` keys are indices 0 to :data:`MAX_GPU` (255, as a simulated
  node), so ``"0-99999999"`` is refused, not expanded;
* ``interval`` lies within :data:`INTERVAL_RANGE` (100 ms to 1 h, as the daemon's).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml

from watchdog import catalogue
from watchdog.errors import InputError
from watchdog.incident import Incident
from watchdog.records import DeviceInfo, XidEvent
from watchdog.units import duration_in, parse_duration
from watchdog.untyped import Array, Json, JsonDoc

if TYPE_CHECKING:
    import pandas as pd

    from watchdog.detect import RuleSet

T0 = 1_700_000_000.0  # t = 0 of every test (POSIX s)
#: The most samples one series may expand to.
MAX_SERIES = 100_000
#: The most readings one test may simulate: longest series x GPUs.
MAX_READINGS = 100_000
#: The most values one test may simulate: readings x metrics.
MAX_VALUES = 1_000_000
#: The most values the tests of one file may simulate together.
MAX_FILE_VALUES = 4_000_000
#: The highest GPU index a ``series:`` key may name.
MAX_GPU = 255
#: Rows fed to the detector at a time (its memory is that of a block; see ``run_case``):
#: a test at the caps (64 GPUs x 1 560 samples) peaks at 140 MB RSS with 8 192, 172 MB
#: with 16 384, at the same speed.
BLOCK_ROWS = 8192
#: The range of a test's ``interval`` (s): the daemon's.
INTERVAL_RANGE = (0.1, 3600.0)
_MAX_DIGITS = 9  # a count of more digits is more than MAX_SERIES anyway
_HEX = re.compile(r"^0[xX](?P<v>[0-9a-fA-F]+)x(?P<n>\d+)$")
_SEG = re.compile(r"^(?P<v>_|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                  r"(?:(?P<sign>[-+])(?P<step>\d+\.?\d*|\.\d+))?(?:x(?P<n>\d+))?$")
CASE_KEYS = ("name", "interval", "devices", "series", "xids", "eval_time", "expect",
             "expect_absent", "allow_extra")
FILE_KEYS = ("rule_files", "interval", "devices", "tests")
EXPECT_KEYS = ("kind", "rule", "gpus", "started_at", "fired_at", "resolved_at", "resolved")


def parse_series(text: str) -> Array:
    """Expand the compact series notation into float values (NaN = missing).

    ``0x10`` is ten zeros; a hex value needs its count: ``0x48x1``, ``0x4x600``.
    """
    out: list[float] = []
    for seg in str(text).split():
        h = _HEX.match(seg)
        if h:
            n = _count(h.group("n"), len(out), seg)
            if len(h.group("v")) > 16:  # more than 64 bits: no bitmask NVML reports
                raise ValueError(f"series segment {_shown(seg)}: a hex value of more than 64 "
                                 "bits")
            out.extend([float(int(h.group("v"), 16))] * n)
            continue
        m = _SEG.match(seg)
        if not m:
            raise ValueError(f"bad series segment {_shown(seg)} (use e.g. 100x120, 95+1x10, "
                             "_x5)")
        v = m.group("v")
        n = _count(m.group("n"), len(out), seg) if m.group("n") else _count("1", len(out), seg)
        if v == "_":
            out.extend([np.nan] * n)
            continue
        start = float(v)
        step = float(m.group("step") or 0) * (-1 if m.group("sign") == "-" else 1)
        out.extend(start + step * i for i in range(n))
    return np.array(out, dtype=np.float64)


def _count(digits: str, have: int, seg: str) -> int:
    """The repeat count of a segment, refused (before expanding) when the series would
    then hold more than :data:`MAX_SERIES` samples."""
    n = int(digits) if len(digits) <= _MAX_DIGITS else MAX_SERIES + 1
    if have + n > MAX_SERIES:
        raise ValueError(f"series segment {_shown(seg)}: the series would hold more than "
                         f"{MAX_SERIES} samples (the most one series may have)")
    return n


def _shown(seg: str) -> str:
    return repr(seg) if len(seg) <= 40 else repr(seg[:36]) + "…"


@dataclass
class Case:
    """One test case, ready to run."""

    name: str
    file: str
    line: int
    rule_files: list[Path] | None
    interval: float
    devices: list[DeviceInfo]
    series: dict[int, dict[str, Array]]
    xids: list[XidEvent] = field(default_factory=list)
    eval_time: float | None = None
    expect: list[JsonDoc] = field(default_factory=list)
    expect_absent: list[str] = field(default_factory=list)
    allow_extra: bool = False
    values: int = 0  # longest series x GPUs x metrics: the size of its frame


def load_cases(path: str | Path) -> list[Case]:
    """Parse a rule-test file; problems raise InputError naming ``FILE:LINE``."""
    from watchdog import yamlsafe

    path = Path(path)
    root, data = yamlsafe.load_file(path, "rule test file")
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list):
        raise InputError(f"{path}: a rule test file is a mapping with a `tests:` list")
    for k in data:
        if k not in FILE_KEYS:
            raise InputError(f"{path}: unknown key {k!r} (expected {', '.join(FILE_KEYS)})")
    lines = _case_lines(root)
    rule_files = None
    if data.get("rule_files") is not None:
        rule_files = [(path.parent / str(f)).resolve() for f in data["rule_files"]]
    cases: list[Case] = []
    total = 0
    for i, raw in enumerate(data["tests"]):
        line = lines[i] if i < len(lines) else 0
        try:
            cases.append(_case(raw, data, str(path), line, rule_files))
        except (ValueError, TypeError, KeyError, AttributeError, InputError) as e:
            name = raw.get("name", i) if isinstance(raw, dict) else i
            raise InputError(f"{path}:{line}: test {name}: {e}") from None
        total += cases[-1].values
        if total > MAX_FILE_VALUES:
            raise InputError(f"{path}:{line}: test {cases[-1].name}: the file's tests simulate "
                             f"more than the {MAX_FILE_VALUES} values one file may have "
                             "together (split it)")
    return cases


def _case_lines(root: yaml.Node | None) -> list[int]:
    if isinstance(root, yaml.MappingNode):
        for k, v in root.value:
            if k.value == "tests" and isinstance(v, yaml.SequenceNode):
                return [n.start_mark.line + 1 for n in v.value]
    return []


def _gpu_keys(key: Json) -> list[int]:
    """The GPU indices of a ``series:`` key (``0``, ``"1-7"``, ``"0,2"``), each 0 to
    :data:`MAX_GPU`."""
    out: list[int] = []
    for part in str(key)[:200].split(","):
        a, _, b = part.partition("-")
        try:
            lo, hi = int(a), int(b) if b else int(a)
        except ValueError:
            raise InputError(f"series: {str(key)[:40]!r} is not a GPU index, range or list "
                             "(use e.g. 0, \"1-7\", \"0,2\")") from None
        if not 0 <= lo <= hi <= MAX_GPU:
            raise InputError(f"series: GPUs {part.strip()!r} out of range (0 to {MAX_GPU}, "
                             "low to high)")
        out.extend(range(lo, hi + 1))
    return out


def _case(raw: Json, top: JsonDoc, file: str, line: int,
          rule_files: list[Path] | None) -> Case:
    if not isinstance(raw, dict):
        raise InputError("a test case must be a mapping")
    for k in raw:
        if k not in CASE_KEYS:
            raise InputError(f"unknown key {k!r} (expected {', '.join(CASE_KEYS)})")
    interval = duration_in(raw.get("interval", top.get("interval", "1s")), *INTERVAL_RANGE,
                           what="interval")
    devs = {}
    for d in raw.get("devices", top.get("devices")) or []:
        d = dict(d)
        d.setdefault("uuid", f"GPU-{int(d['index'])}")
        devs[int(d["index"])] = DeviceInfo.from_dict(d)
    series: dict[int, dict[str, Array]] = {}
    given = raw.get("series") or {}
    if not isinstance(given, dict):
        raise InputError("series: a mapping of GPU -> {metric: values}")
    ticks, gpus, names = 0, set(), set[str]()
    for key, metrics in given.items():
        keys = _gpu_keys(key)
        if not isinstance(metrics, dict | None):
            raise InputError(f"series: {key}: a mapping of metric -> values")
        for mname, text in (metrics or {}).items():
            name = "lost" if mname == "lost" else catalogue.canonical(str(mname))
            if name is None:
                raise InputError(f"series: unknown metric {str(mname)[:40]!r}")
            values = parse_series(str(text))  # once for all the key's GPUs (not copied)
            for gi in keys:
                series.setdefault(gi, {})[name] = values
            # the frame's size so far (an upper bound), refused before the next series
            ticks, names = max(ticks, len(values)), names | {name}
            gpus.update(keys)
            _check_size(ticks, len(gpus), len(names))
        for gi in keys:
            devs.setdefault(gi, DeviceInfo(index=gi, uuid=f"GPU-{gi}"))
    if not series:
        raise InputError("no input series")
    xids = []
    for x in raw.get("xids") or []:
        if not isinstance(x, dict) or int(x["gpu"]) not in devs:
            raise InputError(f"xids: {str(x)[:60]}: a mapping {{gpu, at, code}} naming a GPU "
                             "of the test")
        xids.append(XidEvent(ts=T0 + parse_duration(str(x["at"]), what="xids: at"),
                             uuid=devs[int(x["gpu"])].uuid, index=int(x["gpu"]),
                             code=int(x["code"]), source="replay"))
    expect = list(raw.get("expect") or [])
    for exp in expect:
        if not isinstance(exp, dict) or "kind" not in exp:
            raise InputError("expect: each entry is a mapping with at least `kind:`")
        bad = set(exp) - set(EXPECT_KEYS)
        if bad:
            raise InputError(f"expect: unknown key {sorted(bad)[0]!r} "
                             f"(expected {', '.join(EXPECT_KEYS)})")
        for key in ("started_at", "fired_at", "resolved_at"):
            if key in exp:
                _bounds(exp[key])  # a bad duration fails now, with the case's line
    ev = raw.get("eval_time")
    return Case(name=str(raw.get("name", f"case {line}")), file=file, line=line,
                rule_files=rule_files, interval=interval,
                devices=[devs[i] for i in sorted(devs)], series=series, xids=xids,
                eval_time=None if ev is None else parse_duration(str(ev), what="eval_time"),
                expect=expect,
                expect_absent=[str(x) for x in raw.get("expect_absent") or []],
                allow_extra=bool(raw.get("allow_extra", False)),
                values=ticks * len(gpus) * len(names))


def _check_size(ticks: int, gpus: int, metrics: int) -> None:
    """Refuse a test beyond :data:`MAX_READINGS` or :data:`MAX_VALUES`."""
    if ticks * gpus > MAX_READINGS:
        raise InputError(f"the test simulates {ticks} samples x {gpus} GPUs = "
                         f"{ticks * gpus} readings, more than the {MAX_READINGS} a test may "
                         "have")
    if ticks * gpus * metrics > MAX_VALUES:
        raise InputError(f"the test simulates {ticks * gpus} readings x {metrics} metrics = "
                         f"{ticks * gpus * metrics} values, more than the {MAX_VALUES} a "
                         "test may have")


def build_frame(case: Case) -> pd.DataFrame:
    """The case's input as a replay frame (ts, uuid, index, lost, metrics): one row per
    tick and GPU, sorted by time then GPU index, built column by column (a tick-major
    grid of the series, no per-GPU frames to join and sort)."""
    import pandas as pd

    n = max(len(v) for s in case.series.values() for v in s.values())
    by_index = {d.index: d for d in case.devices}
    gpus = sorted(case.series)
    ticks = T0 + np.arange(n) * case.interval
    if case.eval_time is not None:
        n = int(np.count_nonzero(ticks <= T0 + case.eval_time))
        ticks = ticks[:n]
    g = len(gpus)
    names = list(dict.fromkeys(m for gi in gpus for m in case.series[gi] if m != "lost"))

    def grid(name: str, fill: float) -> Array:
        out = np.full((n, g), fill)
        for j, gi in enumerate(gpus):
            vals = case.series[gi].get(name)
            if vals is not None:
                out[:min(n, len(vals)), j] = vals[:n]
        return out.ravel()

    cols: JsonDoc = {
        "ts": np.repeat(ticks, g),
        "uuid": np.tile(np.array([by_index[gi].uuid for gi in gpus], dtype=object), n),
        "index": np.tile(np.array(gpus, dtype=np.int64), n),
        "lost": np.nan_to_num(grid("lost", 0.0)).astype(bool),
    }
    for name in names:
        cols[name] = grid(name, np.nan)
    return pd.DataFrame(cols)


def run_case(case: Case, rules: RuleSet | None = None) -> list[str]:
    """Run one case; returns failure lines (empty = pass)."""
    from watchdog.detect import load_rules
    from watchdog.pipeline.core import build_detector, feed_blocks

    rules = rules if rules is not None else load_rules(case.rule_files)
    det = build_detector(rules, host="test-host", devices=case.devices, mode="block")
    # in blocks of whole ticks, as replay feeds it (the same incidents as one frame, by
    # the engine's block == tick guarantee): the engine's memory stays that of a block
    feed_blocks(det, build_frame(case), sorted(case.xids, key=lambda x: x.ts),
                block_rows=BLOCK_ROWS)
    got = det.finish()
    failures: list[str] = []
    unmatched = list(got)
    for exp in case.expect:
        hit = next((inc for inc in unmatched if _matches(exp, inc)), None)
        if hit is None:
            failures.append(f"  missing:    {_show_exp(exp)}")
        else:
            unmatched.remove(hit)
    if not case.allow_extra:
        failures.extend(f"  unexpected: {_show(inc)}" for inc in unmatched)
    for name in case.expect_absent:
        for inc in got:
            if name in (inc.kind, inc.rule):
                failures.append(f"  must be absent ({name}): {_show(inc)}")
    if failures:
        failures.append("  got:" + ("" if got else " no incidents"))
        failures.extend(f"    {_show(inc)}" for inc in got)
    return failures


def _bounds(spec: Json) -> tuple[float, float]:
    text = str(spec)
    if ".." in text:
        lo, hi = text.split("..", 1)
        return parse_duration(lo.strip()), parse_duration(hi.strip())
    v = parse_duration(text)
    return v, v


def _within(spec: Json, t: float | None) -> bool:
    if t is None:
        return False
    lo, hi = _bounds(spec)
    return lo - 1e-6 <= t - T0 <= hi + 1e-6


def _matches(exp: JsonDoc, inc: Incident) -> bool:
    if exp.get("kind") != inc.kind:
        return False
    if "rule" in exp and exp["rule"] != inc.rule:
        return False
    if "gpus" in exp and sorted(int(g) for g in exp["gpus"]) != sorted(int(g) for g in inc.gpus):
        return False
    for key in ("started_at", "fired_at", "resolved_at"):
        if key in exp and not _within(exp[key], getattr(inc, key)):
            return False
    return not ("resolved" in exp and bool(exp["resolved"]) != (inc.resolved_at is not None))


def _rel(t: float | None) -> str:
    return "-" if t is None else f"{t - T0:g}s"


def _show(inc: Incident) -> str:
    return (f"{inc.kind} rule={inc.rule} gpus=[{','.join(inc.gpus)}] "
            f"started_at={_rel(inc.started_at)} fired_at={_rel(inc.fired_at)} "
            f"resolved_at={_rel(inc.resolved_at)}")


def _show_exp(exp: JsonDoc) -> str:
    return " ".join(f"{k}={v}" for k, v in exp.items())


def run_files(paths: Sequence[str | Path]) -> tuple[int, int, list[str]]:
    """Run every case of every file; returns (passed, failed, report lines)."""
    from watchdog.detect import load_rules

    passed = failed = 0
    lines: list[str] = []
    cache: dict[tuple[str, ...] | None, RuleSet] = {}
    for p in paths:
        for case in load_cases(p):
            key = None if case.rule_files is None else tuple(map(str, case.rule_files))
            if key not in cache:
                cache[key] = load_rules(case.rule_files)
            fails = run_case(case, cache[key])
            if fails:
                failed += 1
                lines.append(f"FAIL {case.file}:{case.line}: {case.name}")
                lines.extend(fails)
            else:
                passed += 1
                lines.append(f"ok   {case.file}:{case.line}: {case.name}")
    return passed, failed, lines
