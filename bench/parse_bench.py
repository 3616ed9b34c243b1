"""Parse throughput of the nvidia-smi CSV reader against plain ``pandas.read_csv``.

Generates (deterministically, seed 0) a 1-million-row ``nvidia-smi --query-gpu`` CSV: 8 GPUs
at 1 s, 14 fields including the timestamp (``2026/04/19 14:28:10.123``), UUID, pstate and the
hex clock-event reasons, units in the header, into a temporary directory. Then times
``pandas.read_csv(path)`` and ``watchdog.sources.replay.open_log(path)`` (best of 3 each,
same run, same file, interleaved) and prints both times and their ratio (goal: <= 1.5).

    /tmp/venv/bin/python bench/parse_bench.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

HEADER = ("timestamp, index, uuid, pstate, utilization.gpu [%], utilization.memory [%], "
          "memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu, "
          "clocks.current.sm [MHz], clocks.current.memory [MHz], "
          "clocks_event_reasons.active, enforced.power.limit [W]")


def generate(path: Path, rows: int, gpus: int = 8) -> None:
    """Write a deterministic synthetic log of ``rows`` rows (``gpus`` GPUs per tick)."""
    rng = np.random.default_rng(0)
    ticks = rows // gpus
    n = ticks * gpus
    t0 = pd.Timestamp("2026-04-19 14:28:10.123")
    stamps = (t0 + pd.to_timedelta(np.arange(ticks), unit="s")).strftime(
        "%Y/%m/%d %H:%M:%S.%f").str[:-3]
    busy = rng.random(n) < 0.8
    util = np.where(busy, rng.integers(90, 101, n), rng.integers(0, 5, n))
    power = np.where(busy, rng.normal(650, 30, n), rng.normal(75, 3, n)).round(2)
    reasons = np.where(busy, "0x0000000000000004", "0x0000000000000001")
    df = pd.DataFrame({
        "timestamp": np.repeat(np.asarray(stamps), gpus),
        "index": np.tile(np.arange(gpus), ticks),
        "uuid": np.tile([f"GPU-{i:08x}-1111-2222-3333-444455556666" for i in range(gpus)],
                        ticks),
        "pstate": "P0",
        "util": util, "memutil": (util * 0.4).astype(int),
        "mem": rng.integers(60000, 80000, n), "memtot": 81559,
        "power": power, "temp": rng.integers(30, 80, n),
        "sm": np.where(busy, 1980, 345), "mclk": 2619,
        "reasons": reasons, "limit": "700.00",
    })
    with open(path, "w") as f:
        f.write(HEADER + "\n")
        df.to_csv(f, header=False, index=False, sep=",", lineterminator="\n")


def best_of(fns: list, repeat: int) -> list[float]:
    """Best wall time of each function; runs are interleaved so that load from other
    processes on a shared machine hits both sides alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from watchdog.sources.replay import open_log

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "smi.csv"
        generate(path, args.rows)
        size = path.stat().st_size
        rec = open_log(path)  # also a warm-up; check the result is whole
        assert len(rec.frame) == args.rows // 8 * 8, len(rec.frame)
        t_pandas, t_ours = best_of([lambda: pd.read_csv(path), lambda: open_log(path)],
                                   args.repeat)
    print(f"rows={len(rec.frame)} size={size / 1e6:.1f} MB metrics={len(rec.metrics)}")
    print(f"pandas.read_csv: {t_pandas:.3f} s")
    print(f"open_log:        {t_ours:.3f} s")
    print(f"ratio open_log / read_csv = {t_ours / t_pandas:.2f} (goal <= 1.5)")


if __name__ == "__main__":
    main()
