"""Detection quality: every simulated fault and the real logs, scored against ground truth.

For each sim scenario (several seeds, both GPU models, 1 s and 5 s sampling) the node is
generated with the bulk generator, replayed through the shipped rules in blocks (the
``watchdog replay`` path) and scored against ``SimSource.ground_truth()``:

* found: an incident of the fault's kind naming exactly the fault's GPUs, fired at or
  after the onset; "wrong GPUs" when the kind matched but the GPU set did not;
* duplicates: further incidents of that kind matching the same fault (flapping);
* false alerts: incidents matching no injected fault (another kind, or on a healthy
  node, or before the onset);
* time to alert: fired_at - onset, per kind (min / median / max over runs).

Then every log in ../shared/real-telemetry (skipped with a message when absent) is
replayed: none holds a confirmed incident, so every incident there is a false alert.

With ``--inject``, faults written into copies of the real logs of ../shared/real-telemetry
and ../shared/real-gpu (``watchdog.testing.inject``: a hang, a stall, a thermal throttle,
memory pressure, and an inference server's long idle gap that must stay quiet), with
column subsets removed (power limit, clocks, reason bits, memory total, GPU name; or
``memory.free`` and ``temperature.gpu.tlimit`` written in their place) and the sampling
thinned to 10, 30 and 60 s (``watchdog.testing.recall``), plus every untouched log in
each subset and sampling: per rule x subset x sampling, how many were found in time, how
many the replay said it could not judge (its coverage notes), how many were missed or
late, and the false alerts.

    .venv/bin/python bench/detection_bench.py           # 3 seeds, ~30 s on 2 cores
    .venv/bin/python bench/detection_bench.py --quick   # 1 seed, 1 s only for healthy
    .venv/bin/python bench/detection_bench.py --inject  # + real logs with faults (~3 min)
    .venv/bin/python bench/detection_bench.py --write   # + docs/results/detection.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results" / "detection.md"
RESULTS_HEAD = """# Detection on the simulator and the real logs: measured figures

Written by `bench/detection_bench.py --write`: each section is one command's output, under
the date, the commit and the command that measured it. A run of the same command replaces
its section.
"""
REAL = Path(os.environ.get("WATCHDOG_REAL_TELEMETRY", REPO.parent / "shared" / "real-telemetry"))

# (label, spec, duration s): long enough for the slowest rule (stall: 5 min after onset
# + windows) and, for healthy, for several checkpoints (the hang rule's trap).
SCENARIOS: tuple[tuple[str, str, float], ...] = (
    ("healthy", "sim:healthy", 3600.0),
    ("comm_hang", "sim:comm_hang", 900.0),
    ("comm_hang dead rank", "sim:comm_hang(dead=3)", 900.0),
    ("comm_hang after ckpt", "sim:comm_hang@3000", 3600.0),
    ("stall", "sim:stall@35m", 3000.0),  # judged after steady work (30 min)
    ("thermal_throttle", "sim:thermal_throttle", 900.0),
    ("hw_slowdown", "sim:hw_slowdown", 900.0),
    ("memory_pressure", "sim:memory_pressure", 2400.0),  # a 30 min leak: 15 min to warn
    ("gpu_lost", "sim:gpu_lost", 900.0),
    ("xid 13", "sim:xid", 900.0),
    ("xid 48", "sim:xid(code=48)", 900.0),
    ("xid 79", "sim:xid(code=79)", 900.0),
    ("ecc", "sim:ecc", 900.0),
    ("pcie_degraded", "sim:pcie_degraded", 900.0),
    ("straggler", "sim:straggler", 1500.0),
    ("thermal + xid + ecc", "sim:thermal_throttle,xid(code=48),ecc", 1800.0),
    # a look-alike, not a fault: vLLM idle between bursts for up to an hour (no stall)
    ("inference_server", "sim:inference_server", 3600.0),
)
MODELS = ("h100-sxm", "a100-pcie")
INTERVALS = (1.0, 5.0)


@dataclass
class Score:
    """Totals for one scenario over all its runs."""

    runs: int = 0
    gpu_hours: float = 0.0  # simulated GPU-hours replayed
    injected: int = 0
    found: int = 0
    wrong_gpus: int = 0
    false: int = 0
    dup: int = 0
    tta: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    false_kinds: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    missed: list[str] = field(default_factory=list)
    # comm_hang with history: (time to alert, longest legitimate wait before the onset)
    hang_vs_wait: list[tuple[float, float]] = field(default_factory=list)


def score_run(incidents: list[Any], truth: list[Any], s: Score, where: str,
              waits: list[tuple[float, float, str]] = ()) -> None:
    """Match incidents to injected faults and add the counts to ``s``.

    ``waits`` are the healthy job's checkpoint windows (start, end, variant): for a hang,
    the longest wait where ranks spin in a collective (every variant but the all-GPU
    pause) before the onset is the node's longest legitimate wait, which the hang alert
    should follow within about a minute.
    """
    s.runs += 1
    used: set[int] = set()
    for f in truth:
        s.injected += 1
        end = float("inf") if f.end is None else f.end
        cands = [i for i, inc in enumerate(incidents)
                 if i not in used and inc.kind == f.kind and inc.fired_at is not None
                 and inc.fired_at >= f.onset - 1e-6 and inc.started_at <= end + 60.0]
        want = {str(g) for g in f.gpus}
        exact = [i for i in cands if set(incidents[i].gpus) == want]
        if exact:
            s.found += 1
            first = min(exact, key=lambda i: incidents[i].fired_at)
            tta = incidents[first].fired_at - f.onset
            s.tta[f.kind].append(tta)
            prior = [b - a for a, b, v in waits if "pause" not in v and b <= f.onset]
            if f.kind == "comm_hang" and prior:
                s.hang_vs_wait.append((tta, max(prior)))
            s.dup += len(exact) - 1
            used.update(exact)
        elif cands:
            s.wrong_gpus += 1
            s.missed.append(f"{where}: {f.kind} on {sorted(want)} reported on "
                            f"{[incidents[i].gpus for i in cands]}")
            used.update(cands)
        else:
            s.missed.append(f"{where}: {f.kind} on {sorted(want)} not found")
    for i, inc in enumerate(incidents):
        if i not in used:
            s.false += 1
            s.false_kinds[inc.kind] += 1
            s.missed.append(f"{where}: false {inc.kind} on {inc.gpus} "
                            f"({inc.rule}: {inc.summary[:90]})")


def run_sim(quick: bool, seeds: list[int], verbose: bool) -> dict[str, Score]:
    from watchdog.detect import load_rules
    from watchdog.pipeline.replay import detect
    from watchdog.sources.sim.frames import simulate

    rules = load_rules()
    out: dict[str, Score] = {}
    for label, spec, duration in SCENARIOS:
        s = out.setdefault(label, Score())
        for model in MODELS:
            for interval in INTERVALS:
                for seed in seeds:
                    if quick and label == "healthy" and interval != 1.0:
                        continue
                    rec, src = simulate(spec, duration=duration, interval=interval, gpus=8,
                                        model=model, seed=seed)
                    incidents = detect(rec, rules)
                    s.gpu_hours += duration * 8 / 3600.0
                    score_run(incidents, src.ground_truth(), s,
                              f"{spec} {model} {interval:g}s seed {seed}",
                              src.legit_waits(duration))
        if verbose:
            print(f"  {label}: done", file=sys.stderr)
    return out


def real_logs() -> list[tuple[str, Path, dict[str, str] | None, str | None]]:
    """(label, path, mapping, host) for every real log; empty when the folder is absent."""
    from watchdog.testing.real_telemetry import readings

    return readings(REAL) if REAL.is_dir() else []


def run_real() -> list[tuple[str, int, int, list[str]]]:
    from watchdog.detect import load_rules
    from watchdog.pipeline.replay import detect
    from watchdog.sources.replay import open_log

    rules = load_rules()
    rows = []
    for label, path, mapping, host in real_logs():
        rec = open_log(path, mapping=mapping, host=host)
        incs = detect(rec, rules)
        rows.append((label, len(rec.frame), len(incs),
                     [f"{i.kind} {i.gpus}: {i.summary[:80]}" for i in incs]))
    return rows


def run_injected(verbose: bool) -> int:
    """The injected-fault matrix on real logs (see the module docs); prints the table and
    returns the number of misses, late alerts and false alerts (0 is the goal)."""
    from watchdog.detect import load_rules
    from watchdog.testing import recall

    real_gpu = Path(os.environ.get("WATCHDOG_REAL_GPU", REPO.parent / "shared" / "real-gpu"))
    logs = recall.log_cases(REAL, real_gpu)
    if not logs:
        print(f"injected faults: skipped ({REAL} and {real_gpu} not found)")
        return 0
    rules = load_rules()
    cells: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    bad = 0
    for log, kind, subset, step in recall.cases(logs):
        r = recall.run_case(log, kind, subset, step, rules)
        if r.outcome.startswith("not injected"):
            continue
        cells[(kind or "untouched", subset, "native" if step is None else f"{step:g} s")
              ].append(r)
        worse = r.outcome in ("missed", "late", "paged") or bool(r.false)
        bad += worse
        if worse and verbose:
            print(f"  {r.case} {kind} {subset} {step}: {r.outcome} {r.false[:2]}")
    print("injected faults on real logs (found in time / said it could not judge / missed "
          "or late; false alerts; time to alert min/median/max):")
    print(f"  {'fault':17} {'columns':34} {'sampling':9} {'found':>5} {'said':>5} "
          f"{'miss':>5} {'false':>5}  tta")
    for (kind, subset, step), rs in sorted(cells.items()):
        found = sum(r.outcome == "found" for r in rs)
        said = sum(r.outcome == "said" for r in rs)
        miss = sum(r.outcome in ("missed", "late", "paged") for r in rs)
        false = sum(len(r.false) for r in rs)
        ttas = [r.tta for r in rs if r.tta is not None and r.outcome == "found"]
        quiet = sum(r.outcome == "quiet" for r in rs)
        extra = f"  {fmt_tta(ttas)}" if ttas else (f"  {quiet}/{len(rs)} quiet" if quiet
                                                    else "")
        print(f"  {kind:17} {subset:34} {step:9} {found:5d} {said:5d} {miss:5d} "
              f"{false:5d}{extra}")
    totals = defaultdict(lambda: [0, 0, 0, 0, 0])
    for (kind, _s, _t), rs in cells.items():
        t = totals[kind]
        t[0] += sum(r.outcome == "found" for r in rs)
        t[1] += sum(r.outcome == "said" for r in rs)
        t[2] += sum(r.outcome in ("missed", "late", "paged") for r in rs)
        t[3] += sum(len(r.false) for r in rs)
        t[4] += len(rs)
    for kind, (found, said, miss, false, n) in sorted(totals.items()):
        print(f"  TOTAL {kind:17} {n:4d} cases: {found} found, {said} said, {miss} missed "
              f"or late, {false} false alert(s)")
    return bad


def fmt_tta(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"{min(values):.0f}/{statistics.median(values):.0f}/{max(values):.0f}s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one seed, fewer healthy runs")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per configuration (default 3)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every miss and false alert")
    ap.add_argument("--write", action="store_true",
                    help="also write the output to docs/results/detection.md (its section)")
    ap.add_argument("--inject", action="store_true",
                    help="also write faults into the real logs and score them (~3 min)")
    a = ap.parse_args(argv)
    import model_results

    with model_results.captured("bench/detection_bench.py", argv, a.write, path=RESULTS,
                                head=RESULTS_HEAD):
        return _bench(a)


def _bench(a: argparse.Namespace) -> int:
    seeds = [0] if a.quick else list(range(a.seeds))
    t0 = time.perf_counter()
    scores = run_sim(a.quick, seeds, a.verbose)
    print(f"sim: {len(MODELS)} models x {len(INTERVALS)} intervals x {len(seeds)} seed(s), "
          "8 GPUs")
    print(f"{'scenario':22} {'runs':>4} {'found/inj':>10} {'wrongGPU':>8} {'false':>5} "
          f"{'dup':>4}  time-to-alert min/median/max")
    for label, s in scores.items():
        tta = "  ".join(f"{k} {fmt_tta(v)}" for k, v in s.tta.items()) or "-"
        print(f"{label:22} {s.runs:4d} {s.found:4d}/{s.injected:<5d} {s.wrong_gpus:8d} "
              f"{s.false:5d} {s.dup:4d}  {tta}")
    total = Score()
    for s in scores.values():
        total.gpu_hours += s.gpu_hours
        total.injected += s.injected
        total.found += s.found
        total.false += s.false
        total.dup += s.dup
    print(f"{'TOTAL':22} {'':4} {total.found:4d}/{total.injected:<5d} {'':8} "
          f"{total.false:5d} {total.dup:4d}")
    print(f"simulated: {total.gpu_hours:,.0f} GPU-hours, {total.false} false incident(s) = "
          f"{1000.0 * total.false / max(total.gpu_hours, 1e-9):.2f} per 1,000 GPU-hours")
    pairs = [p for s in scores.values() for p in s.hang_vs_wait]
    if pairs:
        over = [t - w for t, w in pairs]
        print(f"comm_hang after a legitimate wait ({len(pairs)} runs): alert comes "
              f"{min(over):.0f}/{statistics.median(over):.0f}/{max(over):.0f} s "
              "(min/median/max) after the node's longest prior wait (target <= 60 s + window)")
    real = run_real()
    if not real:
        print(f"real telemetry: skipped ({REAL} not found)")
    else:
        print(f"real telemetry ({REAL}):")
        for label, rows, n, details in real:
            print(f"  {label:70} {rows:7d} rows  {n} false alert(s)")
            for d in details:
                print(f"      {d}")
    if a.verbose:
        for s in scores.values():
            for line in s.missed:
                print("  " + line)
    bad = run_injected(a.verbose) if a.inject else 0
    print(f"elapsed {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
