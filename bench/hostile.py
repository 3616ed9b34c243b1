"""Run every hostile-conditions case and print held/broken per case.

The cases are the tests in ``tests/test_hostile_*.py`` (issue 16's list: a second agent,
storage faults, misbehaving sinks, a clock that steps, inputs without bounds, admin
access, operator clarity; issue 32's: rule bombs and reloads, a flood on the metrics
port, a job's identity and every medium's escaping, a full outbox, ``alerts test``, log
GPU indices, the agent's own gaps, secrets on one line, and the operator mistakes of
``test_hostile_operator.py``), each through the real command with a bound on time and
memory (``bench/metrics_flood.py`` measures the page delay under a flood of idle
connections). This script runs them all, slow ones included, and prints one line per
case: the case as an operator would name it (the test's docstring), HELD or BROKEN (or
SKIPPED with the reason: some need root, libfaketime or openssl), and its wall time.

The tests judge what an operator sees; the time and memory budgets each case states
(``tests/hostile_helpers.budget``) are judged here: a case's command must finish within
its ``work_s`` beyond the start-up of ``watchdog --version`` (the baseline, the best of
three measured in the same run) and peak under its memory budget. A case over either
is BROKEN, with the figure against its budget.

    python bench/hostile.py            # everything
    python bench/hostile.py -k sinks   # a subset (pytest -k)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def case_name(classname: str, name: str) -> str:
    """The first line of the test's docstring, or its name."""
    module = classname.rsplit(".", 1)[-1]
    func = name.split("[", 1)[0]
    param = name[len(func):]
    try:
        sys.path.insert(0, str(TESTS))
        doc = getattr(importlib.import_module(module), func).__doc__ or ""
    except (ImportError, AttributeError):
        doc = ""
    first = " ".join(doc.strip().split("\n\n")[0].split()) if doc.strip() else func
    return f"{first} {param}".strip()


def start_up_s() -> float:
    """Wall time of ``watchdog --version`` (interpreter and imports), the best of three."""
    best = float("inf")
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "watchdog", "--version"], cwd=REPO,
                       capture_output=True, check=False)
        best = min(best, time.monotonic() - t0)
    return best


def over_budget(rows: list[dict[str, float | str | None]], base_s: float) -> dict[str, str]:
    """Case id -> what went over its budget (time beyond start-up, peak memory)."""
    out: dict[str, str] = {}
    for r in rows:
        why = []
        wall, work = r.get("wall_s"), r.get("work_s")
        if isinstance(wall, float) and isinstance(work, float | int) and wall - base_s > work:
            why.append(f"{wall - base_s:.2f} s beyond start-up > {work:g} s")
        peak, bound = r.get("peak_rss_mb"), r.get("rss_mb")
        if isinstance(peak, float | int) and isinstance(bound, float | int) and peak >= bound:
            why.append(f"peak {peak:.0f} MB >= {bound:g} MB")
        if why:
            out[str(r["case"])] = "; ".join(why)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default=None, help="only cases matching this pytest expression")
    args = ap.parse_args(argv)
    files = sorted(str(p) for p in TESTS.glob("test_hostile_*.py"))
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "hostile.xml"
        budgets = Path(tmp) / "budgets.jsonl"
        # one case at a time (-n 0): the time budgets are judged against an idle start-up
        cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
               f"--junitxml={xml}", *files]
        if args.k:
            cmd += ["-k", args.k]
        base_s = start_up_s()
        t0 = time.monotonic()
        print(f"running {len(files)} files of hostile cases (this takes a few minutes)...",
              file=sys.stderr)
        subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, check=False,
                       env={**os.environ, "WATCHDOG_BUDGETS": str(budgets)})
        wall = time.monotonic() - t0
        if not xml.exists():
            print("pytest wrote no report", file=sys.stderr)
            return 2
        root = ET.parse(xml).getroot()
        measured = [json.loads(x) for x in budgets.read_text().splitlines()] \
            if budgets.exists() else []
    over = over_budget(measured, base_s)
    rows = []
    for tc in root.iter("testcase"):
        failed = tc.find("failure") is not None or tc.find("error") is not None
        skipped = tc.find("skipped")
        case = f"tests/{tc.get('classname', '').rsplit('.', 1)[-1]}.py::{tc.get('name', '')}"
        budget = over.get(case)
        state = "BROKEN" if failed or budget else "SKIPPED" if skipped is not None else "HELD"
        why = (skipped.get("message") or "") if skipped is not None else budget or ""
        area = tc.get("classname", "").rsplit(".", 1)[-1].removeprefix("test_hostile_")
        rows.append((area, state, float(tc.get("time") or 0.0),
                     case_name(tc.get("classname", ""), tc.get("name", "")), why))
    width = max((len(r[0]) for r in rows), default=5)
    for area, state, secs, name, why in rows:
        tail = f"  ({why[:80]})" if why else ""
        print(f"{area:<{width}}  {state:<7} {secs:6.1f}s  {name}{tail}")
    counts = {s: sum(1 for r in rows if r[1] == s) for s in ("HELD", "BROKEN", "SKIPPED")}
    print(f"\n{counts['HELD']} held, {counts['BROKEN']} broken, {counts['SKIPPED']} skipped "
          f"of {len(rows)} cases in {wall:.0f} s; {len(measured)} budgets judged against a "
          f"start-up of {base_s:.2f} s (watchdog --version)")
    return 1 if counts["BROKEN"] else 0


if __name__ == "__main__":
    sys.exit(main())
