"""Speed of the simulated node's bulk generator, ``SimSource.run``.

Goal (issue 2): 8 GPUs x 1 h at 1 s in a few seconds, i.e. far faster than real time.
For each GPU model this times ``run(duration, interval)`` on a fresh source and, in the
same run, a baseline: building the same number of ``Sample`` records from one
precomputed values dict and process tuple (the floor cost of handing out records, no
simulation). It prints median wall time of ``--repeats`` runs, the speed-up over real
time (simulated seconds per wall second) and the ratio simulator / baseline.
Bounded: about ``repeats x 3`` seconds per model at the defaults.

Usage: ``python bench/sim_bench.py [--gpus 8] [--duration 3600] [--interval 1]
[--repeats 3] [--spec sim:comm_hang]``
"""

from __future__ import annotations

import argparse
import statistics
import time

from watchdog.records import Sample
from watchdog.sources.sim import MODELS, SimSource

START = 1_750_000_000.0


def time_sim(spec: str, model: str, gpus: int, duration: float, interval: float) -> float:
    src = SimSource.from_spec(spec, gpus=gpus, model=model, start=START)
    t0 = time.perf_counter()
    n = sum(len(ss) for _, ss in src.run(duration, interval))
    elapsed = time.perf_counter() - t0
    assert n == gpus * int(duration / interval + 1e-9)
    return elapsed


def time_baseline(spec: str, model: str, gpus: int, duration: float, interval: float) -> float:
    proto = SimSource.from_spec(spec, gpus=gpus, model=model, start=START).sample(START)[0]
    ticks = int(duration / interval + 1e-9)
    t0 = time.perf_counter()
    for i in range(ticks):
        ts = START + i * interval
        [Sample(ts=ts, uuid=proto.uuid, index=g, values=dict(proto.values),
                processes=proto.processes) for g in range(gpus)]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--spec", default="sim:comm_hang,thermal_throttle")
    a = ap.parse_args()
    print(f"{a.spec}: {a.gpus} GPUs x {a.duration:g} s at {a.interval:g} s, "
          f"median of {a.repeats}")
    print(f"{'model':<10} {'sim s':>7} {'x real time':>12} {'baseline s':>11} {'sim/base':>9}")
    for model in sorted(MODELS):
        sim, base = [], []
        for _ in range(a.repeats):  # interleaved so load drift hits both alike
            sim.append(time_sim(a.spec, model, a.gpus, a.duration, a.interval))
            base.append(time_baseline(a.spec, model, a.gpus, a.duration, a.interval))
        s, b = statistics.median(sim), statistics.median(base)
        print(f"{model:<10} {s:7.2f} {a.duration / s:12.0f} {b:11.2f} {s / b:9.1f}")


if __name__ == "__main__":
    main()
