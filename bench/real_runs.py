"""Other people's real jobs: every run in ../shared, rules and ``--model auto``, scored
against the labels written before the detector was tuned on them.

The runs are the W&B run files and logs of ``../shared/real-wandb`` (25 training runs of
other people's jobs, about 160 busy GPU-hours), ``real-telemetry`` (other people's
``nvidia-smi`` and custom logs) and ``real-gpu`` (labelled runs recorded on a real H100
and H200). What each run should raise is in ``bench/real_runs_labels.yaml``, with the
evidence (console lines, times, the workload's phase files); a third of the W&B runs is
kept out of all tuning (``held_out``) and reported apart.

Each run is replayed as ``watchdog replay PATH --model auto`` would (the same
:func:`~watchdog.pipeline.replay.replay_inputs` and model stage) and its incidents are
matched to the labels: an expected incident is found when one of its kind, covering its
GPUs, fired within its window (and resolved in time where the label says so); an allowed
one may appear once; every other incident is false. Printed per run, then in total for
the tuned runs and the held-out ones: busy GPU-hours (utilization > 50 %, each sample
counted for at most twice the median sampling interval), false incidents per 1,000 busy
GPU-hours with critical and warning apart, and the expected incidents found.

    .venv/bin/python bench/real_runs.py                # all runs, rules and --model auto
    .venv/bin/python bench/real_runs.py --model off    # the rules alone
    .venv/bin/python bench/real_runs.py --only hllm -v # one run, each incident listed
    .venv/bin/python bench/real_runs.py --write docs/results/real-runs.md

Skipped with a message when ``../shared`` is absent (``WATCHDOG_SHARED`` overrides it).
Exits 1 when a labelled incident is missed or a false critical page is raised.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("WATCHDOG_SHARED", REPO.parent / "shared"))
LABELS = REPO / "bench" / "real_runs_labels.yaml"
BUSY_UTIL_PCT = 50.0  # a sample is busy above this utilization (the corpus README's count)


@dataclass(frozen=True)
class Want:
    """An expected or allowed incident of a label (times: POSIX s)."""

    kind: str
    gpus: frozenset[str]
    start: float
    end: float  # expect: fire by; allow: started by
    resolve_by: float | None = None


@dataclass
class Run:
    """One labelled run and what its replay raised."""

    label: str
    path: Path
    held_out: bool
    expect: list[Want]
    allow: list[Want]
    readings: list[tuple[dict[str, str] | None, str | None]]
    busy_h: float = 0.0
    gpus: int = 0
    incidents: list[Any] = field(default_factory=list)
    false: list[Any] = field(default_factory=list)
    found: list[bool] = field(default_factory=list)
    model: list[str] = field(default_factory=list)  # the model's notes (stderr lines)
    decisions: list[Any] = field(default_factory=list)  # per GPU: fitted or declined
    error: str | None = None
    seconds: float = 0.0


def _t(text: str) -> float:
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def _wants(items: Sequence[dict[str, Any]] | None, allow: bool) -> list[Want]:
    out = []
    for it in items or ():
        end = it["to"] if allow else it["fire_by"]
        out.append(Want(it["kind"], frozenset(str(g) for g in it.get("gpus", ())),
                        _t(it["from"]), _t(end),
                        _t(it["resolve_by"]) if it.get("resolve_by") else None))
    return out


def load_runs(shared: Path, labels: Path = LABELS) -> list[Run]:
    """The labelled runs whose files are in ``shared``, in the labels file's order."""
    from watchdog.testing.real_telemetry import READINGS

    doc = yaml.safe_load(labels.read_text())
    runs = []
    for item in doc["runs"]:
        path = shared / item["path"]
        ways = READINGS.get(item["read"], [(None, None)]) if item.get("read") else [(None, None)]
        runs.append(Run(item["path"], path, bool(item.get("held_out", False)),
                        _wants(item.get("expect"), allow=False),
                        _wants(item.get("allow"), allow=True), list(ways)))
    return runs


def busy_gpu_hours(frame: Any) -> float:
    """GPU-hours at > 50 % utilization, each sample counted for its gap to the GPU's
    previous one, at most twice the GPU's median gap (a logging gap is not work)."""
    if "utilization.gpu" not in frame:
        return 0.0
    total = 0.0
    for _, g in frame.groupby("uuid", sort=False):
        ts = g["ts"].to_numpy()
        if len(ts) < 2:
            continue
        gap = np.diff(ts, prepend=ts[0])
        cap = 2.0 * float(np.median(gap[1:]))
        busy = g["utilization.gpu"].to_numpy() > BUSY_UTIL_PCT
        total += float(np.minimum(gap, cap)[busy].sum())
    return total / 3600.0


def score(run: Run) -> None:
    """Match the run's incidents to its labels (fills ``found`` and ``false``)."""
    used: set[int] = set()
    run.found = []
    for want in run.expect:
        hit = next((k for k, inc in enumerate(run.incidents) if k not in used
                    and inc.kind == want.kind and want.gpus <= set(inc.gpus)
                    and inc.fired_at is not None and want.start <= inc.fired_at <= want.end
                    and (want.resolve_by is None or (inc.resolved_at is not None
                                                     and inc.resolved_at <= want.resolve_by))),
                   None)
        run.found.append(hit is not None)
        if hit is not None:
            used.add(hit)
    for want in run.allow:
        hit = next((k for k, inc in enumerate(run.incidents) if k not in used
                    and inc.kind == want.kind and want.gpus <= set(inc.gpus)
                    and want.start <= inc.started_at <= want.end), None)
        if hit is not None:
            used.add(hit)
    run.false = [inc for k, inc in enumerate(run.incidents) if k not in used]


def replay(run: Run, rules: Any, model: str) -> None:
    """Replay every reading of the run's file (rules, and the model unless ``off``)."""
    from watchdog.errors import InputError
    from watchdog.pipeline.replay import ReplayOptions, replay_inputs

    t0 = time.perf_counter()
    for mapping, host in run.readings:
        opts = ReplayOptions(mapping=dict(mapping or {}), host=host)
        try:
            results = replay_inputs([str(run.path)], rules, opts)
        except InputError as e:
            run.error = str(e)
            break
        if model != "off":
            from watchdog.anomaly.offline import apply

            apply(results, model, None, note=run.model.append)
        for r in results:
            run.incidents.extend(r.incidents)
            run.decisions.extend(getattr(r, "model", None) or ())
            run.busy_h += busy_gpu_hours(r.frame)
            run.gpus += int(r.frame["uuid"].nunique()) if len(r.frame) else 0
    run.seconds = time.perf_counter() - t0
    score(run)


@dataclass
class Totals:
    """False incidents and found labels over a set of runs."""

    runs: int = 0
    busy_h: float = 0.0
    false: Counter[str] = field(default_factory=Counter)
    found: int = 0
    expected: int = 0

    def add(self, run: Run) -> None:
        self.runs += 1
        self.busy_h += run.busy_h
        self.false.update(inc.severity for inc in run.false)
        self.found += sum(run.found)
        self.expected += len(run.found)

    def per_1000(self, severity: str) -> float:
        return 1000.0 * self.false[severity] / self.busy_h if self.busy_h else float("nan")

    def line(self, name: str) -> str:
        return (f"{name:<9} {self.runs:>3} runs {self.busy_h:>7.1f} busy GPU-h   false critical "
                f"{self.false['critical']:>3} ({self.per_1000('critical'):5.1f} per 1,000)   "
                f"false warning {self.false['warning']:>3} ({self.per_1000('warning'):5.1f} per "
                f"1,000)   labelled found {self.found}/{self.expected}")


def _when(t: float | None) -> str:
    return "-" if t is None else dt.datetime.fromtimestamp(t, dt.UTC).strftime("%m-%d %H:%M:%S")


def report(runs: list[Run], verbose: bool) -> list[str]:
    lines = [f"{'run':<58} {'GPUs':>4} {'busy h':>7}  incidents (false marked !)"]
    for run in runs:
        name = run.label.split("/", 1)[1] if "/" in run.label else run.label
        name = (name if len(name) <= 56 else name[:25] + "…" + name[-30:]) + (
            " *" if run.held_out else "")
        if run.error:
            lines.append(f"{name:<58} {'-':>4} {'-':>7}  unreadable: {run.error}")
            continue
        kinds = Counter((i.kind, i in run.false) for i in run.incidents)
        text = ", ".join(f"{k}{'!' if bad else ''} x{n}" for (k, bad), n in sorted(kinds.items()))
        missed = [w.kind for w, ok in zip(run.expect, run.found, strict=True) if not ok]
        if missed:
            text += f"  MISSED {', '.join(missed)}"
        lines.append(f"{name:<58} {run.gpus:>4} {run.busy_h:>7.1f}  {text or '-'}")
        if verbose:
            for inc in run.incidents:
                mark = "FALSE " if inc in run.false else "ok    "
                gpus = ",".join(inc.gpus)
                lines.append(f"      {mark}{inc.kind:<16} {inc.severity:<8} GPU {gpus:<8} "
                             f"{_when(inc.started_at)} fired {_when(inc.fired_at)}  "
                             f"{inc.summary[:110]}")
            for note in run.model:
                lines.append(f"      model: {note}")
        fitted = sum(d.decision == "fitted" for d in run.decisions)
        if run.decisions:
            lines[-1 - (len(run.incidents) + len(run.model) if verbose else 0)] += (
                f"  [model fitted {fitted}/{len(run.decisions)} GPUs]")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="auto", help="auto (default) | off | a model file")
    ap.add_argument("--only", default=None, help="only runs whose path contains this text")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every incident")
    ap.add_argument("--write", metavar="FILE", help="also write the results to FILE (markdown)")
    args = ap.parse_args(argv)
    if not SHARED.is_dir():
        print(f"real runs: skipped ({SHARED} not found)")
        return 0
    from tqdm import tqdm

    from watchdog.detect import load_rules

    rules = load_rules()
    runs = [r for r in load_runs(SHARED) if r.path.exists()
            and (args.only is None or args.only in r.label)]
    t0 = time.perf_counter()
    for run in tqdm(runs, desc="replaying", unit="run", file=sys.stderr,
                    disable=not sys.stderr.isatty()):
        replay(run, rules, args.model)
    lines = report(runs, args.verbose)
    tuned, held = Totals(), Totals()
    corpora: dict[str, Totals] = {}
    for run in runs:
        (held if run.held_out else tuned).add(run)
        corpora.setdefault(run.label.split("/", 1)[0], Totals()).add(run)
    everything = Totals()
    for run in runs:
        everything.add(run)
    lines += ["", "* held out of all tuning", ""]
    lines += [tuned.line("tuned"), held.line("held out"), everything.line("all")]
    lines += [t.line(name[:9]) for name, t in sorted(corpora.items())]
    lines.append(f"model: {args.model}; elapsed {time.perf_counter() - t0:.0f} s")
    print("\n".join(lines))
    if args.write:
        _write(Path(args.write), lines, argv)
    bad = any(not all(r.found) for r in runs) or everything.false["critical"] > 0
    return 1 if bad else 0


#: the opening of a new results file
RESULTS_HEAD = """# Real runs: false incidents and labelled ones found

Written by `bench/real_runs.py --write FILE`: each section is one command's output (the
rules and `--model auto`, or `--model off`: the rules alone), under the date, the commit
and the command that measured it. A run of the same command replaces its section. The
runs, the labels and how an incident is matched are in `bench/real_runs.py` and
`bench/real_runs_labels.yaml`.
"""


def _write(path: Path, lines: list[str], argv: Sequence[str] | None) -> None:
    """The results file's section for this command line: date, commit, the table."""
    import model_results

    args = list(sys.argv[1:] if argv is None else argv)
    if "--write" in args:  # the file written is not part of the command measured
        k = args.index("--write")
        del args[k:k + 2]
    args = [a for a in args if not a.startswith("--write=")]
    command = " ".join(["python", "bench/real_runs.py", *args])
    model_results.write(command, "\n".join(lines), path, head=RESULTS_HEAD)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
