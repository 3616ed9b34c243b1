"""Rule unit tests in the spirit of ``promtool test rules``.

A test file (format in ``docs/rules.md``) gives input series per GPU in a compact notation
(``"100x120"``, ``"0 10 20"``, ``"95+1x10"``, ``"_x5"``, hex ``"0x4x600"``), the sample
interval, the devices, XID events and the incidents expected at ``eval_time``. The series
are fed to the real :class:`~watchdog.detect.Detector` as one frame; each case passes or
fails with a readable diff. ``watchdog rules test`` and the pytest plugin (``rules/
conftest.py``) both run cases through :func:`run_case`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from watchdog import catalogue
from watchdog.errors import InputError
from watchdog.incident import Incident
from watchdog.model import DeviceInfo, XidEvent
from watchdog.units import parse_duration

T0 = 1_700_000_000.0  # t = 0 of every test (POSIX s)
_HEX = re.compile(r"^0[xX](?P<v>[0-9a-fA-F]+)x(?P<n>\d+)$")
_SEG = re.compile(r"^(?P<v>_|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                  r"(?:(?P<sign>[-+])(?P<step>\d+\.?\d*|\.\d+))?(?:x(?P<n>\d+))?$")
CASE_KEYS = ("name", "interval", "devices", "series", "xids", "eval_time", "expect",
             "expect_absent", "allow_extra")
FILE_KEYS = ("rule_files", "interval", "devices", "tests")
EXPECT_KEYS = ("kind", "rule", "gpus", "started_at", "fired_at", "resolved_at", "resolved")


def parse_series(text: str) -> np.ndarray:
    """Expand the compact series notation into float values (NaN = missing).

    ``0x10`` is ten zeros; a hex value needs its count: ``0x48x1``, ``0x4x600``.
    """
    out: list[float] = []
    for seg in str(text).split():
        h = _HEX.match(seg)
        if h:
            out.extend([float(int(h.group("v"), 16))] * int(h.group("n")))
            continue
        m = _SEG.match(seg)
        if not m:
            raise ValueError(f"bad series segment {seg!r} (use e.g. 100x120, 95+1x10, _x5)")
        v = m.group("v")
        n = int(m.group("n")) if m.group("n") else 1
        if v == "_":
            out.extend([np.nan] * n)
            continue
        start = float(v)
        step = float(m.group("step") or 0) * (-1 if m.group("sign") == "-" else 1)
        out.extend(start + step * i for i in range(n))
    return np.array(out, dtype=np.float64)


@dataclass
class Case:
    """One test case, ready to run."""

    name: str
    file: str
    line: int
    rule_files: list[Path] | None
    interval: float
    devices: list[DeviceInfo]
    series: dict[int, dict[str, np.ndarray]]
    xids: list[XidEvent] = field(default_factory=list)
    eval_time: float | None = None
    expect: list[dict[str, Any]] = field(default_factory=list)
    expect_absent: list[str] = field(default_factory=list)
    allow_extra: bool = False


def load_cases(path: str | Path) -> list[Case]:
    """Parse a rule-test file; problems raise InputError naming ``FILE:LINE``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read rule test file: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InputError(f"{path}{f':{mark.line + 1}' if mark else ''}: invalid YAML: "
                         f"{getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list):
        raise InputError(f"{path}: a rule test file is a mapping with a `tests:` list")
    for k in data:
        if k not in FILE_KEYS:
            raise InputError(f"{path}: unknown key {k!r} (expected {', '.join(FILE_KEYS)})")
    lines = _case_lines(root)
    rule_files = None
    if data.get("rule_files") is not None:
        rule_files = [(path.parent / str(f)).resolve() for f in data["rule_files"]]
    cases = []
    for i, raw in enumerate(data["tests"]):
        line = lines[i] if i < len(lines) else 0
        try:
            cases.append(_case(raw, data, str(path), line, rule_files))
        except (ValueError, TypeError, KeyError, InputError) as e:
            name = raw.get("name", i) if isinstance(raw, dict) else i
            raise InputError(f"{path}:{line}: test {name}: {e}") from None
    return cases


def _case_lines(root: Any) -> list[int]:
    if isinstance(root, yaml.MappingNode):
        for k, v in root.value:
            if k.value == "tests" and isinstance(v, yaml.SequenceNode):
                return [n.start_mark.line + 1 for n in v.value]
    return []


def _gpu_keys(key: Any) -> list[int]:
    out: list[int] = []
    for part in str(key).split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def _case(raw: Any, top: dict[str, Any], file: str, line: int,
          rule_files: list[Path] | None) -> Case:
    if not isinstance(raw, dict):
        raise InputError("a test case must be a mapping")
    for k in raw:
        if k not in CASE_KEYS:
            raise InputError(f"unknown key {k!r} (expected {', '.join(CASE_KEYS)})")
    interval = parse_duration(str(raw.get("interval", top.get("interval", "1s"))),
                              what="interval")
    if interval <= 0:
        raise InputError("interval must be positive")
    devs = {}
    for d in raw.get("devices", top.get("devices")) or []:
        d = dict(d)
        d.setdefault("uuid", f"GPU-{int(d['index'])}")
        devs[int(d["index"])] = DeviceInfo.from_dict(d)
    series: dict[int, dict[str, np.ndarray]] = {}
    for key, metrics in (raw.get("series") or {}).items():
        for gi in _gpu_keys(key):
            for mname, text in (metrics or {}).items():
                name = "lost" if mname == "lost" else catalogue.canonical(str(mname))
                if name is None:
                    raise InputError(f"series: unknown metric {mname!r}")
                series.setdefault(gi, {})[name] = parse_series(str(text))
            devs.setdefault(gi, DeviceInfo(index=gi, uuid=f"GPU-{gi}"))
    if not series:
        raise InputError("no input series")
    xids = [XidEvent(ts=T0 + parse_duration(str(x["at"]), what="xids: at"),
                     uuid=devs[int(x["gpu"])].uuid, index=int(x["gpu"]), code=int(x["code"]),
                     source="replay") for x in raw.get("xids") or []]
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
                allow_extra=bool(raw.get("allow_extra", False)))


def build_frame(case: Case) -> Any:
    """The case's input as a replay frame (ts, uuid, index, lost, metrics)."""
    import pandas as pd

    n = max(len(v) for s in case.series.values() for v in s.values())
    by_index = {d.index: d for d in case.devices}
    parts = []
    for gi, metrics in sorted(case.series.items()):
        cols: dict[str, Any] = {"ts": T0 + np.arange(n) * case.interval,
                                "uuid": by_index[gi].uuid, "index": gi}
        lost = metrics.get("lost")
        cols["lost"] = (np.zeros(n, bool) if lost is None
                        else np.nan_to_num(_pad(lost, n)).astype(bool))
        for name, vals in metrics.items():
            if name != "lost":
                cols[name] = _pad(vals, n)
        parts.append(pd.DataFrame(cols))
    frame = pd.concat(parts, ignore_index=True).sort_values(["ts", "index"], kind="stable")
    if case.eval_time is not None:
        frame = frame[frame["ts"] <= T0 + case.eval_time]
    return frame.reset_index(drop=True)


def _pad(v: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate((v, np.full(n - len(v), np.nan))) if len(v) < n else v


def run_case(case: Case, rules: Any = None) -> list[str]:
    """Run one case; returns failure lines (empty = pass)."""
    from watchdog.detect import Detector, load_rules

    rules = rules if rules is not None else load_rules(case.rule_files)
    det = Detector(rules, "test-host", case.devices)
    det.feed_frame(build_frame(case), case.xids)
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


def _bounds(spec: Any) -> tuple[float, float]:
    text = str(spec)
    if ".." in text:
        lo, hi = text.split("..", 1)
        return parse_duration(lo.strip()), parse_duration(hi.strip())
    v = parse_duration(text)
    return v, v


def _within(spec: Any, t: float | None) -> bool:
    if t is None:
        return False
    lo, hi = _bounds(spec)
    return lo - 1e-6 <= t - T0 <= hi + 1e-6


def _matches(exp: dict[str, Any], inc: Incident) -> bool:
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


def _show_exp(exp: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in exp.items())


def run_files(paths: list[str | Path]) -> tuple[int, int, list[str]]:
    """Run every case of every file; returns (passed, failed, report lines)."""
    from watchdog.detect import load_rules

    passed = failed = 0
    lines: list[str] = []
    cache: dict[tuple[str, ...] | None, Any] = {}
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
