"""Faults written into other people's real W&B runs, found by the rules and the model.

The runs are those of ``../shared/real-wandb`` (listed with their held-out flag in
``bench/real_runs_labels.yaml``). Every run with a busy hour (a GPU that worked at least
:data:`BUSY_HOUR_MIN` minutes) gets five fault classes, each at two onsets, each written
into a copy of the run's frame (:class:`~watchdog.testing.framelog.FrameLog`: the run file
is only read) by the injector of the rules' and the model's real-log benches:

* ``hang``: :func:`inject.hang` on the GPUs busy at the onset (100 % utilization at 1.5x
  idle power, 8 min);
* ``stall``: :func:`inject.stall` on the same GPUs (0 % with memory held, 10 min);
* ``thermal``: :func:`inject.thermal` on one GPU, climbing to its catalogue's max operating
  temperature (where the board throttles itself) + 1 C, then power -30 %, clocks -25 %;
* ``power drop``: :func:`model_faults.slowdown`, one GPU at 65 % of its power at
  unchanged work (10 min);
* ``drift``: :func:`model_faults.temp_drift`, one GPU warming 0.5 C/min (10 min).

Onsets: at :data:`ONSETS` of the fault GPU's busy windows (after the first 40 % that
``--model auto`` fits on), moved on to the first time it worked the 2 minutes before; a
one-GPU fault goes on the run's first working GPU at the first onset and on its last at
the second. Each copy is replayed as ``watchdog replay`` does, with the rules alone and
with the rules and ``--model auto``. A fault is **found** when incidents (of any kind)
covering all its GPUs fire from its onset until the deadline: the rule's promise for the
faults a rule names (a hang and a stall: the rule's ``for`` + 60 s; a throttle: 60 s:
:mod:`watchdog.testing.recall`), :data:`MODEL_DEADLINE_S` for a power drop and a drift
(only the model names them), each plus two sampling steps. **False**: every anomaly on
an untouched run, and on a copy every incident the untouched run does not raise that is
not on the fault's GPUs while it lasts (or :data:`AFTER_S` after).

Printed: per run and class the outcome; per class found/total with the rules alone and
with the model, the median time to alert; the false counts; the tuned runs and the held-out
third of ``real_runs_labels.yaml`` apart.

    .venv/bin/python bench/model_wandb.py                  # every run: a few minutes
    .venv/bin/python bench/model_wandb.py --only TRAVEL -v # one run, every case
    .venv/bin/python bench/model_bench.py --only wandb     # the same, as section 5

Skipped with a message when ``../shared/real-wandb`` is absent.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

BUSY_HOUR_MIN = 60.0  # a run with a GPU busy this long (min) gets the faults
ONSETS = (0.6, 0.85)  # of the fault GPU's busy windows
WORKED_S = 120.0  # the GPU worked this long before an onset
MODEL_DEADLINE_S = 300.0  # a fault only the model names is found within 5 min
AFTER_S = 300.0  # an incident on the fault's GPUs this long after it ends is still its
CLASSES = ("hang", "stall", "thermal", "power drop", "drift")
MODEL_ONLY = ("power drop", "drift")
DEFAULT_HOT_C = 87.0  # a GPU the catalogue has no temperature for (H100's max operating)


@dataclass
class Case:
    """One fault at one onset in one run, and what the replays found."""

    run: str
    held_out: bool
    fault: str
    gpus: tuple[int, ...] = ()
    onset: float = 0.0
    outcome: dict[str, str] = field(default_factory=dict)  # "rules" / "model" -> word
    tta: dict[str, float] = field(default_factory=dict)
    by: dict[str, str] = field(default_factory=dict)  # the kinds that found it
    false: list[str] = field(default_factory=list)  # with the model
    note: str = ""


def _busy(log: Any, g: int) -> tuple[np.ndarray, np.ndarray]:
    """GPU ``g``'s times and whether it worked then (utilization >= 50 %, the model's)."""
    mine = log.gpu == g
    return log.ts[mine], log.values("utilization.gpu")[mine] >= 50.0


def busy_minutes(log: Any, g: int) -> float:
    t, b = _busy(log, g)
    if len(t) < 2:
        return 0.0
    gap = np.minimum(np.diff(t, prepend=t[0]), 2.0 * float(np.median(np.diff(t))))
    return float(gap[b].sum()) / 60.0


def onset_at(log: Any, g: int, frac: float) -> float:
    """The first time at ``frac`` of GPU ``g``'s busy samples or later at which it worked
    throughout the :data:`WORKED_S` before (ValueError: none)."""
    t, b = _busy(log, g)
    at = np.flatnonzero(b)
    if not len(at):
        raise ValueError(f"GPU {g} never works")
    for i in at[int(frac * (len(at) - 1)):]:
        near = (t >= t[i] - WORKED_S) & (t < t[i])
        if near.sum() >= 2 and b[near].all() and t[i] - t[0] >= WORKED_S:
            return float(t[i])
    raise ValueError(f"GPU {g} never works {WORKED_S:g} s on after {frac:.0%} of its work")


def hot_c(name: str | None) -> float:
    """Where the fault's GPU throttles itself: its catalogue max operating temperature."""
    from watchdog.catalogue import gpu_model

    m = gpu_model(name)
    for v in ((m.max_operating_c, m.slowdown_c) if m is not None else ()):
        if v is not None:
            return float(v)
    return DEFAULT_HOT_C


def idle_w(log: Any, name: str | None) -> dict[int, float]:
    """Each GPU's idle power (W) for a run whose GPU never idles (the injector takes the
    GPU's own first): another GPU of the node idle in the run (the same part), else the
    catalogue's figure, else the GPU's power limit times the median idle-to-limit ratio of
    the catalogue's GPUs that have both figures (0.11: H100 74 of 700 W, A100 PCIe 35 of
    250 W, RTX A5000 25 of 230 W)."""
    from watchdog.catalogue import GPU_MODELS, gpu_model

    node = [w for w in (log.idle_w(g) for g in log.gpus()) if w is not None]
    if node:
        return dict.fromkeys(log.gpus(), min(node))
    m = gpu_model(name)
    if m is not None and m.idle_w is not None:
        return dict.fromkeys(log.gpus(), m.idle_w)
    ratio = statistics.median(x.idle_w / x.tdp_w for x in GPU_MODELS
                              if x.idle_w is not None and x.tdp_w)
    limit = log.values("enforced.power.limit")
    out = {}
    for g in log.gpus():
        mine = limit[log.gpu == g]
        lim = float(np.nanmedian(mine)) if not np.isnan(mine).all() else \
            (m.tdp_w if m is not None and m.tdp_w else None)
        if lim is not None:
            out[g] = ratio * lim
    return out


def working(log: Any, at: float) -> list[int]:
    """The GPUs that worked (mean utilization >= 50 %) in the :data:`WORKED_S` before
    ``at``: the job's, which a hang or a stall stops."""
    u = log.values("utilization.gpu")
    near = (log.ts >= at - WORKED_S) & (log.ts < at)
    return [g for g in log.gpus() if (near & (log.gpu == g)).any()
            and np.nanmean(u[near & (log.gpu == g)]) >= 50.0]


def write(log: Any, fault: str, onset: float, gpu: int, name: str | None) -> Any:
    """Write ``fault`` into ``log`` at ``onset``; its :class:`inject.Label`."""
    from watchdog.testing import inject
    from watchdog.testing import model_faults as MF

    idle = idle_w(log, name)
    if fault == "hang":
        return inject.hang(log, onset, idle_w=idle, gpus=working(log, onset))
    if fault == "stall":
        return inject.stall(log, onset, idle_w=idle, gpus=working(log, onset))
    if fault == "thermal":
        return inject.thermal(log, onset, hot_c(name), gpu=gpu)
    if fault == "power drop":
        return MF.slowdown(log, onset, gpu, 0.65, duration=600.0)
    return MF.temp_drift(log, onset, gpu, 0.5, duration=600.0)


RULE_KIND = {"hang": "comm_hang", "stall": "stall", "thermal": "thermal_throttle"}


def deadline(fault: str, inc: Any) -> float:
    """How long after the onset ``inc`` may fire and still find ``fault`` (s, before the
    two sampling steps): the rule's promise (:mod:`watchdog.testing.recall`: a hang or a
    stall within the ``for`` its incident quotes, or the rule's default, + 60 s; a
    throttle within 60 s), or :data:`MODEL_DEADLINE_S` for a fault only the model names."""
    from watchdog.testing import recall

    if fault in MODEL_ONLY:
        return MODEL_DEADLINE_S
    kind = RULE_KIND[fault]
    if kind in recall.DEADLINE_S:
        return recall.DEADLINE_S[kind]
    wait = inc.evidence.get("for_s") if inc.kind == kind else None
    slack = recall.HANG_SLACK_S if kind == "comm_hang" else recall.STALL_SLACK_S
    return float(wait or (150.0 if kind == "comm_hang" else 300.0)) + slack


def _key(inc: Any) -> tuple[str, tuple[str, ...]]:
    return inc.kind, tuple(inc.gpus)


def judge(case: Case, lab: Any, incs: list[Any], control: list[Any], step: float,
          how: str) -> list[Any]:
    """Score one replay of a copy (``how``: rules / model); returns the false incidents."""
    def in_control(inc: Any) -> bool:
        return any(_key(c) == _key(inc) and abs(lab.moved(c.started_at) - inc.started_at)
                   <= 60.0 for c in control)

    new = [i for i in incs if not in_control(i)]
    mine = [i for i in new if set(int(g) for g in i.gpus) & set(lab.gpus)
            and lab.onset - 1.0 <= i.started_at <= lab.end + AFTER_S]
    slack = 2.0 * step
    covered: dict[int, float] = {}
    kinds = set()
    for inc in sorted(mine, key=lambda i: i.fired_at or np.inf):
        if inc.fired_at is None or inc.fired_at - lab.onset > deadline(case.fault, inc) + slack:
            continue
        for g in inc.gpus:
            covered.setdefault(int(g), inc.fired_at)
        kinds.add(inc.kind)
    if set(lab.gpus) <= set(covered):
        case.outcome[how] = "found"
        case.tta[how] = max(covered[g] for g in lab.gpus) - lab.onset
        case.by[how] = ",".join(sorted(kinds))
    else:
        late = [i for i in mine if i.fired_at is not None]
        case.outcome[how] = "late" if late else "missed"
    return [i for i in new if i not in mine]


def replay_run(path: Path, rules: Any, model: bool, rec: Any = None) -> Any:
    """One run (or a faulted copy ``rec``) as ``watchdog replay [--model auto]`` does."""
    from watchdog.anomaly.offline import apply
    from watchdog.pipeline.replay import ReplayOptions, replay_inputs, replay_recording

    if rec is None:
        (r,) = replay_inputs([str(path)], rules, ReplayOptions())
    else:
        r = replay_recording(rec, rules, ReplayOptions(), path=str(path))
    rules_only = list(r.incidents)
    notes: list[str] = []
    if model:
        apply([r], "auto", None, note=notes.append)
    return rules_only, list(r.incidents), r


def run_cases(path: Path, label: str, held_out: bool, rules: Any, verbose: bool,
              say: Callable[[str], None]) -> tuple[list[Case], list[str], float]:
    """Every fault at both onsets in one run; also its untouched replay's anomalies."""
    from watchdog.pipeline.replay import ReplayOptions, open_input
    from watchdog.testing.framelog import FrameLog

    rec = open_input(str(path), ReplayOptions(), in_parts=False)
    base = FrameLog(rec)
    ctl_rules, ctl_all, _ = replay_run(path, rules, True)
    untouched = [f"{i.kind} GPU {','.join(i.gpus)} {i.summary[:100]}" for i in ctl_all
                 if i.kind == "anomaly"]
    gpus = [g for g in base.gpus() if busy_minutes(base, g) >= 30.0]
    step = float(np.median(np.diff(base.ts[base.gpu == base.gpus()[0]])))
    name = rec.devices()[0].name if rec.devices() else None
    cases = []
    for k, frac in enumerate(ONSETS):
        gpu = gpus[0] if k == 0 else gpus[-1]
        for fault in CLASSES:
            case = Case(label, held_out, fault)
            cases.append(case)
            log = FrameLog(rec)
            try:
                lab = write(log, fault, onset_at(log, gpu, frac), gpu, name)
            except ValueError as e:
                case.outcome = {"rules": "not written", "model": "not written"}
                case.note = str(e)
                if verbose:
                    say(_case_line(case))
                continue
            case.gpus, case.onset = lab.gpus, lab.onset
            rules_incs, all_incs, r = replay_run(path, rules, True, log.recording())
            judge(case, lab, rules_incs, ctl_rules, step, "rules")
            false = judge(case, lab, all_incs, ctl_all, step, "model")
            case.false = [f"{i.kind} GPU {','.join(i.gpus)} {i.summary[:100]}" for i in false]
            fit = [d for d in r.model if d.decision == "fitted"]
            case.note = f"{len(fit)} of {len(r.model)} GPUs fitted"
            if verbose:
                say(_case_line(case))
    return cases, untouched, step


def _case_line(c: Case) -> str:
    def part(how: str) -> str:
        out = c.outcome.get(how, "-")
        if out == "found":
            out += f" {c.tta[how]:.0f} s ({c.by[how]})"
        return out

    gpus = ",".join(map(str, c.gpus)) or "-"
    return (f"    {c.fault:10s} GPU {gpus:8s} rules: {part('rules'):32s}"
            f" +model: {part('model'):32s} false {len(c.false)}  {c.note}"
            + "".join(f"\n        false: {f}" for f in c.false[:3]))


def totals(cases: list[Case], say: Callable[[str], None], name: str) -> tuple[int, int]:
    """Per class found/total, rules alone and with the model; returns (found, total)."""
    say(f"  {name}:")
    found_all = total_all = 0
    for fault in CLASSES:
        mine = [c for c in cases if c.fault == fault and c.outcome.get("model") != "not written"]
        n = len(mine)
        fr = sum(c.outcome.get("rules") == "found" for c in mine)
        fm = sum(c.outcome.get("model") == "found" for c in mine)
        tt = [c.tta["model"] for c in mine if "model" in c.tta]
        med = f"{statistics.median(tt):.0f} s" if tt else "-"
        say(f"    {fault:10s} rules alone {fr:>3}/{n:<3} with the model {fm:>3}/{n:<3} "
            f"median time to alert {med}")
        found_all += fm
        total_all += n
    pct = 100.0 * found_all / total_all if total_all else float("nan")
    say(f"    all        with the model {found_all}/{total_all} ({pct:.1f} %); false "
        f"on the faulted copies {sum(len(c.false) for c in cases)}")
    return found_all, total_all


def wandb_injected(shared: Path, rules: Any, only: str | None = None,
                   verbose: bool = False, say: Callable[[str], None] = print) -> bool:
    """The bench (see the module docs); returns whether every goal holds."""
    from real_runs import load_runs

    say("\n5. faults written into the real W&B runs (rules alone, and with --model auto)")
    runs = [r for r in load_runs(shared) if r.label.startswith("real-wandb/")
            and r.path.suffix == ".wandb" and r.path.exists() and (only is None or only in r.label)]
    if not runs:
        say(f"  skipped: no W&B runs under {shared / 'real-wandb'}")
        return True
    from watchdog.pipeline.replay import ReplayOptions, open_input
    from watchdog.testing.framelog import FrameLog

    t0 = time.perf_counter()
    cases: list[Case] = []
    untouched_false = 0
    for run in runs:
        log = FrameLog(open_input(str(run.path), ReplayOptions(), in_parts=False))
        most = max(busy_minutes(log, g) for g in log.gpus())
        name = run.label.split("/")[1]
        if most < BUSY_HOUR_MIN:
            say(f"  {name}: no busy hour (its busiest GPU worked {most:.0f} min): no faults")
            continue
        say(f"  {name}{' (held out)' if run.held_out else ''}:")
        got, untouched, _ = run_cases(run.path, name, run.held_out, rules, verbose, say)
        cases += got
        untouched_false += len(untouched)
        for u in untouched:
            say(f"    FALSE on the untouched run: {u}")
        if not verbose:
            say("    " + "  ".join(f"{c.fault}@{c.outcome.get('model', '-')}" for c in got))
    say("")
    tuned = totals([c for c in cases if not c.held_out], say, "tuned runs")
    held = totals([c for c in cases if c.held_out], say, "held-out runs")
    found, total = tuned[0] + held[0], tuned[1] + held[1]
    per_class = all(
        sum(c.outcome.get("model") == "found" for c in cases if c.fault == f)
        >= sum(c.outcome.get("rules") == "found" for c in cases if c.fault == f)
        for f in CLASSES)
    false = sum(len(c.false) for c in cases)
    ok = total > 0 and found >= 0.95 * total and per_class and untouched_false == 0
    say(f"W&B injected: {found}/{total} found ({100.0 * found / max(total, 1):.1f} %, goal >= "
        f"95 %), every class at least the rules': {'yes' if per_class else 'NO'}; false "
        f"anomalies on the untouched runs {untouched_false} (goal 0), on the faulted copies "
        f"{false}; {time.perf_counter() - t0:.0f} s: {'HOLDS' if ok else 'MISSED'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="only runs whose path contains this text")
    ap.add_argument("-v", "--verbose", action="store_true", help="every case on its line")
    ap.add_argument("--write", action="store_true",
                    help="also write the output to docs/results/model.md (its own section)")
    args = ap.parse_args(argv)
    import model_results
    from real_runs import SHARED

    from watchdog.detect import load_rules

    if not (SHARED / "real-wandb").is_dir():
        print(f"W&B injected: skipped ({SHARED / 'real-wandb'} not found)")
        return 0
    with model_results.captured("bench/model_wandb.py", argv, args.write):
        ok = wandb_injected(SHARED, load_rules(), args.only, args.verbose)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
