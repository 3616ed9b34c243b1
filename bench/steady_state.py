"""The agent's memory once its longest window is full: peak RSS against DESIGN's 150 MB.

``bench/agent_bench.py`` runs ``watchdog run`` for a minute of wall time, so the rules'
windows of 15 and 30 minutes hold only a minute of readings there. This bench runs the
live pipeline (the agent's code from samples to incidents: the same
:class:`~watchdog.pipeline.live.LivePipeline` and detector) on the simulated node on a
manual clock, one reading a second, for 35 minutes of data time (the longest window, the
stall rule's 30 minutes of work before an idle spell, plus 5; about a minute of wall time
per GPU count at 8 GPUs), each GPU count in its own process, and prints
the peak RSS every 5 data minutes and at the end, against the budget (RSS <= 150 MB,
DESIGN.md; the ratio is RSS / budget), with the CPU per tick of the last 5 minutes.

Usage: ``python bench/steady_state.py [--gpus 8,64] [--interval 1] [--minutes 35]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPORT_EVERY_S = 300.0
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

# the agent bench's budget and peak RSS (MB, 10^6 bytes: ``VmHWM`` of this process image;
# getrusage's ``ru_maxrss`` survives exec and would count the parent that started it)
from agent_bench import RSS_BUDGET_MB as BUDGET_MB  # noqa: E402
from agent_bench import proc_hwm_mb  # noqa: E402


def child(gpus: int, interval: float, minutes: float) -> None:
    """One GPU count: run the live pipeline to steady state; one JSON line per report."""
    from watchdog.clock import ManualClock
    from watchdog.detect import load_rules
    from watchdog.detect.engine import Detector
    from watchdog.pipeline.live import LivePipeline
    from watchdog.sources.sim import SimSource

    rules = load_rules()
    clock = ManualClock(start=1_750_000_000.0)
    spec = "sim:healthy"
    pipe = LivePipeline(lambda now: SimSource.from_spec(spec, gpus=gpus, seed=1, start=now),
                        lambda src: Detector(rules, host=src.host, devices=src.devices()),
                        clock, spec=spec, interval=interval)
    total = 60.0 * minutes
    t_cpu, n_cpu, data_s = time.process_time(), 0, 0.0
    while data_s < total:
        pipe.tick()
        clock.advance(interval)
        n_cpu += 1
        data_s += interval
        if data_s % REPORT_EVERY_S < interval or data_s >= total:
            cpu = time.process_time()
            print(json.dumps({"data_min": round(data_s / 60), "rss_mb": proc_hwm_mb(os.getpid()),
                              "ms_per_tick": 1000.0 * (cpu - t_cpu) / n_cpu}), flush=True)
            t_cpu, n_cpu = cpu, 0
    pipe.close(drain_s=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="8,64", help="comma-separated GPU counts")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between readings")
    ap.add_argument("--minutes", type=float, default=35.0, help="data time to run")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.interval, args.minutes)
        return 0
    worst = 0.0
    print(f"{'GPUs':>4} {'data min':>8} {'RSS MB':>7} {'RSS/budget':>10} {'ms/tick':>8}")
    for n in (int(g) for g in args.gpus.split(",")):
        cmd = [sys.executable, __file__, "--child", str(n), "--interval", str(args.interval),
               "--minutes", str(args.minutes)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
        assert proc.stdout is not None
        for line in proc.stdout:
            d = json.loads(line)
            worst = max(worst, d["rss_mb"])
            print(f"{n:>4} {d['data_min']:>8} {d['rss_mb']:>7.1f} "
                  f"{d['rss_mb'] / BUDGET_MB:>10.2f} {d['ms_per_tick']:>8.2f}", flush=True)
        if proc.wait() != 0:
            print(f"{n} GPUs: the run failed (exit {proc.returncode})")
            return 1
    verdict = "PASS" if worst <= BUDGET_MB else "FAIL"
    print(f"peak RSS {worst:.1f} MB, budget {BUDGET_MB:.0f} MB: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
