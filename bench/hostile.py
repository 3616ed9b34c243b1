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

    python bench/hostile.py            # everything
    python bench/hostile.py -k sinks   # a subset (pytest -k)
"""

from __future__ import annotations

import argparse
import importlib
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default=None, help="only cases matching this pytest expression")
    args = ap.parse_args(argv)
    files = sorted(str(p) for p in TESTS.glob("test_hostile_*.py"))
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "hostile.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={xml}", *files]
        if args.k:
            cmd += ["-k", args.k]
        t0 = time.monotonic()
        print(f"running {len(files)} files of hostile cases (this takes a few minutes)...",
              file=sys.stderr)
        subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, check=False)
        wall = time.monotonic() - t0
        if not xml.exists():
            print("pytest wrote no report", file=sys.stderr)
            return 2
        root = ET.parse(xml).getroot()
    rows = []
    for tc in root.iter("testcase"):
        failed = tc.find("failure") is not None or tc.find("error") is not None
        skipped = tc.find("skipped")
        state = "BROKEN" if failed else "SKIPPED" if skipped is not None else "HELD"
        why = (skipped.get("message") or "") if skipped is not None else ""
        area = tc.get("classname", "").rsplit(".", 1)[-1].removeprefix("test_hostile_")
        rows.append((area, state, float(tc.get("time") or 0.0),
                     case_name(tc.get("classname", ""), tc.get("name", "")), why))
    width = max((len(r[0]) for r in rows), default=5)
    for area, state, secs, name, why in rows:
        tail = f"  ({why[:80]})" if why else ""
        print(f"{area:<{width}}  {state:<7} {secs:6.1f}s  {name}{tail}")
    counts = {s: sum(1 for r in rows if r[1] == s) for s in ("HELD", "BROKEN", "SKIPPED")}
    print(f"\n{counts['HELD']} held, {counts['BROKEN']} broken, {counts['SKIPPED']} skipped "
          f"of {len(rows)} cases in {wall:.0f} s")
    return 1 if counts["BROKEN"] else 0


if __name__ == "__main__":
    sys.exit(main())
