"""``watchdog replay PATH…``: run the full detector over recorded telemetry.

Each PATH is a log the replay readers know (``nvidia-smi`` CSV in its variants, ``dmon``,
the project's recordings, any CSV with ``--map``) or ``sim:SCENARIO[,…]`` to generate a
recording from the simulated node (``--duration``, ``--interval``, ``--gpus``,
``--gpu-model``, ``--seed``) so the product can be seen with no files at all.

The detector is fed the recording's frame in blocks of whole ticks (``--block-rows``,
default 131 072 rows, the engine's own block bound): block replay has exactly the
incremental semantics of live tick-by-tick evaluation (the engine guarantees it), at a
fraction of the cost.

Output: a table (times in UTC) or, with ``--json``, exactly one JSON object on stdout:
``{"incidents": [...], "sources": [{"path", "host", "gpus", "samples", "start", "end"}],
"rules": N, "coverage": [{"path", "rule", "judged", "note"[, "since"]}]}``. What each log
let the rules judge is said once per log on stderr too: the rules that could not run on it
and why (``comm_hang: no power.draw column``), and those that ran on a fallback
(``thermal_throttle: temperature only: slowdown at 87 C from the catalogue``). Several
paths are replayed one after another, each with a fresh detector,
and their incidents concatenated. Progress goes to stderr, only on a terminal and never
with ``--json``.

Exit status: 0 when the replay ran (incidents or not: finding incidents is the command
doing its job); 1 with ``--fail-on SEVERITY`` when an incident of that severity or worse
was found; 2 for bad input (a file, a rule, an option).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.commands.common import add_tz_arg
from watchdog.incident import SEVERITIES
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    from watchdog.detect import RuleSet
    from watchdog.detect.coverage import Note
    from watchdog.incident import Incident
    from watchdog.pipeline.replay import Replayed

BLOCK_ROWS = 131_072  # the engine's MAX_BLOCK_ROWS (watchdog.pipeline.replay.BLOCK_ROWS)
#: ``--interval`` of a simulated node (s): the daemon's range, 100 ms to 1 h.
INTERVAL_RANGE = (0.1, 3600.0)
#: ``--duration`` of a simulated node (s): 100 ms to 400 days (a simulated day streams
#: through the detector in well under a minute; 400 days, a year and its margin, is
#: hours of work and never more memory: the node is streamed).
DURATION_RANGE = (0.1, 400 * 86400.0)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``replay`` sub-command (cheap imports only)."""
    p = subparsers.add_parser(
        "replay", help="run the detector over recorded telemetry (or a simulated node)",
        description="Run the full detector (the daemon's code) over recorded telemetry "
                    "(nvidia-smi CSV, dmon, recordings, any CSV with --map) or over a "
                    "simulated node (PATH = sim:SCENARIO), and list the incidents.",
        epilog="Exit status: 0 ran fine (with or without incidents); 1 an incident at or "
               "above --fail-on; 2 bad input. Times in the table are UTC.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="log file or recording ('-': standard input, at most 64 MiB), or "
                        "sim:SCENARIO[,SCENARIO…]")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (incidents, sources, rule count) on stdout")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw a timeline with incidents shaded (several paths: FILE-2.png…)")
    p.add_argument("--rules", action="append", metavar="DIR_OR_FILE",
                   help="rule file or folder of *.yaml (repeatable; default: shipped rules)")
    p.add_argument("--map", action="append", default=[], metavar="METRIC=COLUMN,…",
                   help="map catalogue metrics onto a foreign CSV's columns by name, or by "
                        "column number (power.draw=#5: the header is then ignored, for a "
                        "header that does not match its rows); targets: timestamp, index, "
                        "uuid, name and the metric names listed by "
                        "`watchdog record --list-metrics`")
    p.add_argument("--host", default=None, help="host name to report (default: from the log)")
    add_tz_arg(p)
    p.add_argument("--fail-on", choices=SEVERITIES, default=None, metavar="SEVERITY",
                   help="exit 1 when an incident of this severity or worse is found "
                        f"({' | '.join(SEVERITIES)})")
    p.add_argument("--model", default=None, metavar="MODEL|auto",
                   help="also run the anomaly model: a file from `watchdog train`, or auto "
                        "(fit on the first 40%% of each log when it holds 10 busy minutes "
                        "per GPU). Default: no model")
    p.add_argument("--block-rows", type=int, default=BLOCK_ROWS, metavar="N",
                   help=f"rows fed to the detector at a time (default {BLOCK_ROWS})")
    sim = p.add_argument_group("simulated recordings (PATH = sim:SCENARIO…)")
    sim.add_argument("--duration", default="30m",
                     help="length to simulate, 100ms to 400d (default 30m)")
    sim.add_argument("--interval", default="1s",
                     help="sampling interval, 100ms to 1h (default 1s)")
    sim.add_argument("--gpus", type=int, default=8, help="simulated GPUs (default 8)")
    sim.add_argument("--gpu-model", default="h100-sxm", help="h100-sxm | a100-pcie")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.set_defaults(func=run)


def replay(args: argparse.Namespace) -> tuple[list[Replayed], RuleSet]:
    """Replay every path in ``args``; returns the results and the rule set used."""
    from watchdog.commands.common import old_gpu_model, parse_map
    from watchdog.detect import load_rules
    from watchdog.errors import InputError
    from watchdog.pipeline.replay import ReplayOptions, replay_inputs
    from watchdog.report.progress import Terminal, should_show
    from watchdog.sources import is_sim
    from watchdog.units import check_tz

    if args.block_rows < 1:
        raise InputError(f"--block-rows {args.block_rows}: expected a positive number")
    if args.plot:
        check_plot_target(args.plot)
    if old_gpu_model(args.model):  # the old spelling of the simulated GPU type
        args.gpu_model, args.model = args.model, None
    if args.model is not None and args.model != "auto" and not Path(args.model).is_file():
        raise InputError(f"--model {args.model}: no such model file (train one with "
                         "`watchdog train --output FILE`, or use --model auto)")
    mapping = parse_map(args.map)
    check_tz(args.tz)
    sim = any(is_sim(p) for p in args.paths)
    duration, interval = sim_times(args.duration, args.interval) if sim else (0.0, 1.0)
    opts = ReplayOptions(
        mapping=mapping, host=args.host, tz=args.tz, block_rows=args.block_rows,
        duration=duration, interval=interval,
        gpus=args.gpus, gpu_model=args.gpu_model, seed=args.seed)
    rules = load_rules(args.rules or None)
    feedback = Terminal(should_show(args.json))
    skipped: list[tuple[str, str]] = []
    results = replay_inputs(args.paths, rules, opts, feedback, skipped=skipped)
    if skipped and not results:  # nothing could be read: the first reason, exit 2
        raise InputError(skipped[0][1])
    args.skipped = skipped
    if args.model is not None:
        from watchdog.anomaly.offline import apply

        apply(results, args.model, args.gpu_model, note=_note)
    return results, rules


def _note(line: str) -> None:
    """The model's one-line notes (``--model auto`` declined, a coarse fit)."""
    print(f"watchdog: {line}", file=sys.stderr)


def sim_times(duration: str, interval: str) -> tuple[float, float]:
    """``(duration, interval)`` in s of a simulated node (``replay sim:…``, ``record
    --source sim…``), each within its range (:data:`DURATION_RANGE`,
    :data:`INTERVAL_RANGE`); an :class:`InputError` names the option and the range."""
    return (bounded("--duration", duration, DURATION_RANGE),
            bounded("--interval", interval, INTERVAL_RANGE))


def bounded(option: str, text: str, limits: tuple[float, float]) -> float:
    """The duration ``text`` of ``option`` within ``limits`` (s); 0 is "must be positive"
    (the words a zero has always had), anything else outside is "out of range"."""
    from watchdog.errors import InputError
    from watchdog.units import duration_in, parse_duration

    if parse_duration(text, what=option) <= 0:
        raise InputError(f"{option} {text}: must be positive")
    return duration_in(text, *limits, what=option)


def rule_count(rules: RuleSet) -> int:
    """Number of rules in a RuleSet (``len`` or its ``rules`` attribute)."""
    try:
        return len(rules)
    except TypeError:
        return len(rules.rules)


def check_plot_target(target: str) -> None:
    """``--plot`` into a folder that does not exist (or is not a folder) is bad input,
    caught before any work rather than after the table is printed."""
    from watchdog.errors import InputError

    parent = Path(target).parent
    if not parent.is_dir():
        raise InputError(f"--plot {target}: no such folder {str(parent)!r}")
    if Path(target).is_dir():
        raise InputError(f"--plot {target}: is a folder; name a file such as timeline.png")


def plot_paths(target: str, n: int) -> list[Path]:
    """``FILE.png`` for one input; ``FILE.png``, ``FILE-2.png``… for several."""
    p = Path(target)
    return [p] + [p.with_name(f"{p.stem}-{k}{p.suffix}") for k in range(2, n + 1)]


def coverage_lines(path: str, notes: list[Note]) -> list[str]:
    """What a log let the rules judge, for stderr: the rules that could not run on it
    (rules with the same reason on one line) and those that ran on a fallback."""
    off: dict[str, list[str]] = {}
    on: list[str] = []
    for n in notes:
        if n.judged:
            on.append(f"  {'every rule' if n.rule == '*' else n.rule}: {n.text}")
        else:
            off.setdefault(n.text, []).append(n.rule)
    from watchdog.sources import is_sim

    out = []
    name = path if is_sim(path) else Path(path).name
    if off:
        count = sum(len(v) for v in off.values())
        out.append(f"watchdog: {name}: {count} rule(s) cannot judge this log:")
        out += [f"  {', '.join(rules)}: {text}" for text, rules in off.items()]
    if on:
        out.append(f"watchdog: {name}: judged on fallbacks:")
        out += on
    return out


def incident_json(r: Replayed, inc: Incident) -> JsonDoc:
    """One incident of the JSON document: :meth:`Incident.to_json`, and for an input that
    records the job's console (a W&B run) ``console``: the lines near it."""
    doc = inc.to_json()
    if r.console is not None:
        doc["console"] = [ln.to_json() for ln in r.console_near(inc)]
    return doc


def console_lines(results: list[Replayed]) -> str:
    """For the table: each incident's nearby console lines, under the incident's name."""
    from datetime import UTC, datetime

    from watchdog.incident import gpu_list

    out = []
    for r in results:
        for inc in r.incidents:
            near = r.console_near(inc)
            if not near:
                continue
            out.append(f"  {inc.kind} GPU {gpu_list(inc.gpus)} ({r.host}, from "
                       f"{datetime.fromtimestamp(inc.started_at, tz=UTC):%H:%M:%S}):")
            out += [f"    {datetime.fromtimestamp(ln.ts, tz=UTC):%H:%M:%S}  {ln.text}"
                    for ln in near]
    return "\n".join(out)


def plot_notes(r: Replayed) -> list[tuple[float, str]]:
    """The console lines near any incident of ``r``, for the timeline (time, text)."""
    seen: dict[tuple[float, str], None] = {}
    for inc in r.incidents:
        for ln in r.console_near(inc):
            seen[(ln.ts, ln.text)] = None
    return sorted(seen)


def summary_line(results: list[Replayed], skipped: list[tuple[str, str]]) -> str:
    """The last line of a replay of several inputs: inputs, incidents by severity."""
    from collections import Counter

    sev = Counter(inc.severity for r in results for inc in r.incidents)
    n = sum(sev.values())
    hit = sum(1 for r in results if r.incidents)
    parts = ", ".join(f"{sev[s]} {s}" for s in reversed(SEVERITIES) if sev[s])
    line = (f"{len(results)} inputs replayed: {n} incident{'' if n == 1 else 's'}"
            f"{f' ({parts})' if parts else ''} in {hit} of them")
    if skipped:
        line += f"; {len(skipped)} skipped (unreadable, said above)"
    return line


def run(args: argparse.Namespace) -> int:
    """Entry point of ``watchdog replay``."""
    from watchdog.escape import line as one_line

    results, rules = replay(args)
    incidents = [inc for r in results for inc in r.incidents]
    skipped = getattr(args, "skipped", [])
    for _path, why in skipped:
        print(f"watchdog: error: {why} (skipped)", file=sys.stderr)
    for r in results:  # once per log
        for line in coverage_lines(r.path, r.notes):
            print(one_line(line), file=sys.stderr)
    if args.json:
        doc: JsonDoc = {
            "incidents": [incident_json(r, inc) for r in results for inc in r.incidents],
            "sources": [r.source_json() for r in results],
            "rules": rule_count(rules),
            "coverage": [{"path": r.path, **n.to_json()} for r in results
                         for n in r.notes]}
        if args.model is not None:
            doc["model"] = [{"path": r.path, "host": r.host, **d.to_json()}
                            for r in results for d in r.model]
        if skipped:
            doc["skipped"] = [{"path": p, "error": why} for p, why in skipped]
        sys.stdout.write(json.dumps(doc) + "\n")
    else:
        from watchdog.report.table import format_table, gpu_legend

        for r in results:
            s = r.source_json()
            gpus = f"{s['gpus']} GPU{'' if s['gpus'] == 1 else 's'}"
            job = "" if r.console is None else \
                f", exit code {'unknown' if r.exit_code is None else r.exit_code}"
            print(one_line(f"{r.path}: host {s['host']}, {gpus}, {s['samples']} samples, "
                           f"{s['start']} .. {s['end']}{job}"))
        print(format_table(incidents))
        said = console_lines(results)
        if said:
            print("The job's console near its incidents (UTC):\n" + said)
        legend = gpu_legend(incidents)
        if legend:
            print("GPU identities:\n" + legend)
        if len(results) + len(skipped) > 1:
            print(summary_line(results, skipped))
    if args.plot:
        from watchdog.report.plot import plot_timeline
        from watchdog.sources import is_sim

        for r, target in zip(results, plot_paths(args.plot, len(results)), strict=True):
            if len(r.frame) == 0:
                print(f"watchdog: {r.path}: no samples, no timeline drawn", file=sys.stderr)
                continue
            name = Path(r.path).name if not is_sim(r.path) else r.path
            title = name if r.host == Path(r.path).stem else f"{r.host}: {name}"
            plot_timeline(r.frame, r.incidents, target, title=title,
                          notes=plot_notes(r))
            print(f"watchdog: timeline written to {target}", file=sys.stderr)
    if skipped:
        return 2  # bad input, though the rest was replayed
    if args.fail_on is not None:
        floor = SEVERITIES.index(args.fail_on)
        if any(SEVERITIES.index(inc.severity) >= floor for inc in incidents):
            return 1
    return 0
