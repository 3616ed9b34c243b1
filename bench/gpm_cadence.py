"""What sampling GPM less often costs hang detection, on the real H100 spin hang.

The NVML source takes a GPM sample every ``GPM_INTERVAL`` seconds and carries the metrics
(averages between two samples) forward in between. This replays the real H100 recording
(``../shared/real-gpu/h100-spin-hang/a.wdrec``, 1 Hz, a labelled spinning-kernel hang) with
its GPM columns replaced by what a given cadence would have reported: at each sample, the
mean of the 1 Hz values since the previous sample, carried forward; the first two samples a
tick apart, as the source takes them; every phase of the cadence against the recording's
ticks. It prints when ``comm_hang`` starts and fires, in seconds after the hang began::

    python bench/gpm_cadence.py [--cadences 1,2,5] [--log PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_LOG = HERE.parent.parent / "shared" / "real-gpu" / "h100-spin-hang" / "a.wdrec"


def carried(ts: np.ndarray, values: np.ndarray, samples: list[float]) -> np.ndarray:
    """What the source reports at each tick of ``ts`` when it samples at ``samples``: the
    mean of ``values`` over the ticks since the previous sample, carried forward."""
    out = np.full(len(values), np.nan)
    last, prev, k = np.nan, None, 0
    for r, t in enumerate(ts):
        while k < len(samples) and samples[k] <= t + 1e-6:
            if prev is not None:
                sel = (ts > prev + 1e-6) & (ts <= samples[k] + 1e-6)
                last = float(np.nanmean(values[sel])) if sel.any() else np.nan
            prev = samples[k]
            k += 1
        out[r] = last
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cadences", default="1,2,5", help="seconds between GPM samples")
    ap.add_argument("--log", default=str(DEFAULT_LOG), help="a .wdrec with GPM columns")
    args = ap.parse_args(argv)
    try:
        cadences = [float(c) for c in args.cadences.split(",")]
    except ValueError:
        ap.error(f"--cadences {args.cadences!r}: expected seconds, e.g. 1,2,5")
    log = Path(args.log)
    phases = log.parent / "phases_a.jsonl"
    if not log.is_file() or not phases.is_file():
        print(f"gpm_cadence: {log} (and phases_a.jsonl beside it) not found", file=sys.stderr)
        return 2
    from watchdog.detect import Detector, load_rules
    from watchdog.sources.replay import open_log

    hang = next(e["t"] for e in map(json.loads, phases.read_text().splitlines())
                if e.get("event") == "phase_start" and e.get("phase") == "hang")
    rec = open_log(log)
    frame = rec.frame
    ts = frame["ts"].to_numpy()
    gpm = [c for c in frame.columns if c.startswith("gpm.")]
    if not gpm:
        print(f"gpm_cadence: {log} holds no GPM columns", file=sys.stderr)
        return 2
    print(f"{log.name}: {len(frame)} rows; comm_hang, seconds after the hang began")
    print(f"{'cadence':>8} {'phase':>6} {'starts':>7} {'fires':>6}")
    for cadence in cadences:
        for phase in range(max(1, int(cadence))):
            f = frame.copy()
            if cadence > 1:
                samples = [ts[0], ts[0] + 1.0,
                           *np.arange(ts[0] + phase + cadence, ts[-1] + 1.0, cadence)]
                for c in gpm:
                    f[c] = carried(ts, f[c].to_numpy(), samples)
            det = Detector(load_rules(), host="h", devices=rec.devices())
            det.feed_frame(f)
            hits = [i for i in det.finish() if i.kind == "comm_hang"]
            others = sorted({i.kind for i in det.incidents} - {"comm_hang"})
            if len(hits) != 1:
                print(f"{cadence:>7g}s {phase:>6} {len(hits)} comm_hang incidents")
                continue
            i = hits[0]
            print(f"{cadence:>7g}s {phase:>6} {i.started_at - hang:>7.1f} "
                  f"{(i.fired_at or np.nan) - hang:>6.1f}"
                  + (f"  (also {', '.join(others)})" if others else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
