"""How large the model-only faults of ``model_wandb.py`` are against the healthy spread of
the real runs they are written into.

``bench/model_wandb.py`` writes two faults no rule names: a **drift** (one GPU warming
0.5 C/min at unchanged power: +2.5 C at the model's 5-minute deadline) and a **power
drop** (one GPU at 65 % of its power at unchanged work). A detector can only find them
where the healthy run never moves that far by itself; where it does, a warning for them
could not tell the fault from the job's own work, and by the product's rule it must not be
sent. This bench measures, per W&B run with a busy hour and per GPU that worked 30 min or
more, on the model's own features (:func:`watchdog.anomaly.features.compute`, the peers
taken within the job as the gate does, :func:`watchdog.anomaly.job.job_peers`):

* ``rise``: the 99th percentile and the largest healthy change of the 60 s mean
  temperature over :data:`model_wandb.MODEL_DEADLINE_S` while the GPU works throughout at
  steady power: its 60 s mean power, and the node's mean power (the heat of its
  neighbours), within 2 x :data:`STEADY_POWER` of the limit from the gate's thermal lag
  (:data:`~watchdog.anomaly.gate_limits.LAG_S`) before the start to the end ("-": the
  run never held that long);
* ``drop``: the drop written (0.35 of the GPU's median busy power, of its limit) against
  how far below its peers the healthy GPU goes (median ``peer_power`` less its 0.5th
  percentile; "no peers" where its job has fewer than 3 GPUs at work: then only its own
  past at the same activity can tell).

A drift is **inside** the healthy spread where the largest healthy rise against peers
reaches the drift's +2.5 C; a drop where the healthy excursion below the peers reaches it.

    .venv/bin/python bench/wandb_spread.py [--write]   # every W&B run: seconds

Skipped with a message when ``../shared/real-wandb`` is absent.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

if TYPE_CHECKING:
    from watchdog.sources.replay.frame import Recording

SHARED = REPO.parent / "shared"
STEADY_POWER = 0.03  # of the limit: a 60 s mean power this close at both ends is steady
DRIFT_C_PER_MIN = 0.5  # the drift model_wandb writes
DROP_FRAC = 0.35  # the power drop model_wandb writes: 65 % of the GPU's power
MIN_BUSY_MIN = 30.0  # a GPU judged by --model auto worked this long


def rises(temp: np.ndarray, powers: list[np.ndarray], busy: np.ndarray, lag: int,
          settle: int) -> np.ndarray:
    """Temperature changes over ``lag`` ticks while the GPU works throughout and each of
    ``powers`` stays within :data:`STEADY_POWER` of its level from ``settle`` ticks before
    to the end (a temperature still following an earlier power step is no drift: the gate
    reads that lag as normal). ``temp``, ``powers``, ``busy``: one GPU's ``(T,)`` series on
    the grid: its power, and against its peers their power too."""
    span = settle + lag + 1
    if len(temp) < span:
        return np.empty(0)
    ok = np.lib.stride_tricks.sliding_window_view(~busy, span).sum(axis=1) == 0
    for p in powers:
        w = np.lib.stride_tricks.sliding_window_view(p, span)
        with np.errstate(invalid="ignore"):
            ok &= (np.max(w, axis=1) - np.min(w, axis=1)) <= 2 * STEADY_POWER
    d_t = temp[settle + lag:] - temp[settle:len(temp) - lag]
    ok &= ~np.isnan(d_t)
    return d_t[ok]


def one_run(rec: Recording
            ) -> list[tuple[int, float | None, float | None, float, float | None]]:
    """Per GPU of the run ``rec`` that worked :data:`MIN_BUSY_MIN`: ``(gpu, rise p99,
    rise max, drop written, healthy excursion below the peers)`` (None: no steady span;
    no peers)."""
    from model_wandb import MODEL_DEADLINE_S

    from watchdog.anomaly import features as F
    from watchdog.anomaly.gate_limits import LAG_S
    from watchdog.anomaly.job import job_peers
    grid = F.grid_from_frame(rec.frame)
    feats = job_peers(F.compute(grid))
    busy = F.busy(feats)
    lag = max(1, round(MODEL_DEADLINE_S / grid.step))
    settle = max(1, round(LAG_S / grid.step))
    pf_all = feats[:, :, F.INDEX["power_frac"]]  # the node's heat: every GPU's, idle too
    read = (~np.isnan(pf_all)).sum(axis=1)
    node = np.where(read > 0, np.nansum(pf_all, axis=1) / np.maximum(read, 1), np.nan)
    out = []
    for g, index in enumerate(grid.index):
        if busy[:, g].sum() * grid.step / 60.0 < MIN_BUSY_MIN:
            continue
        x = feats[:, g]
        pp = x[busy[:, g], F.INDEX["peer_power"]]
        pp = pp[~np.isnan(pp)]
        peers = bool(len(pp)) and bool(np.any(pp != 0.0))
        r = rises(x[:, F.INDEX["temp_mean"]], [x[:, F.INDEX["power_frac"]], node],
                  busy[:, g], lag, settle)
        pf = x[busy[:, g], F.INDEX["power_frac"]]
        below = float(np.median(pp) - np.percentile(pp, 0.5)) if peers else None
        out.append((int(index), float(np.percentile(r, 99)) if len(r) else None,
                    float(r.max()) if len(r) else None,
                    DROP_FRAC * float(np.nanmedian(pf)), below))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    import model_results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true",
                    help="also write the output to docs/results/model.md (its own section)")
    args = ap.parse_args(argv)
    if not (SHARED / "real-wandb").is_dir():
        print(f"W&B spread: skipped ({SHARED / 'real-wandb'} not found)")
        return 0
    with model_results.captured("bench/wandb_spread.py", argv, args.write):
        spread()
    return 0


def spread() -> None:
    """The table and its summary (see the module docs)."""
    from model_wandb import BUSY_HOUR_MIN, MODEL_DEADLINE_S, busy_minutes
    from real_runs import load_runs

    from watchdog.pipeline.replay import ReplayOptions, open_input
    from watchdog.testing.framelog import FrameLog

    t0 = time.perf_counter()
    from watchdog.anomaly.features import WINDOW_S

    # the drift's rise in the same measure: the 60 s mean at the deadline (centred half a
    # window before it) less the one ending at the onset
    drift_c = DRIFT_C_PER_MIN * (MODEL_DEADLINE_S - WINDOW_S / 2.0) / 60.0
    print(f"healthy spread of the real W&B runs against the faults model_wandb writes: a "
          f"drift of +{drift_c:.2f} C in the 60 s mean at {MODEL_DEADLINE_S:.0f} s, a drop to "
          f"{100 * (1 - DROP_FRAC):.0f} % of the power\n")
    print(f"{'run':44s} {'GPU':>3s}  {'rise p99':>8s} {'rise max':>8s}  {'drop':>5s} "
          f"{'healthy below peers':>19s}")
    gpus = steady = drift_in = drop_in = drop_peers = 0
    for run in load_runs(SHARED):
        if not run.label.startswith("real-wandb/") or run.path.suffix != ".wandb":
            continue
        if not run.path.exists():
            continue
        rec = open_input(str(run.path), ReplayOptions(), in_parts=False)
        log = FrameLog(rec)
        if max(busy_minutes(log, g) for g in log.gpus()) < BUSY_HOUR_MIN:
            continue
        name = run.label.split("/")[1][:34] + ("*" if run.held_out else "")
        for gpu, p99, most, drop, below in one_run(rec):
            gpus += 1
            steady += most is not None
            drift_in += most is not None and most >= drift_c
            if below is not None:
                drop_peers += 1
                drop_in += below >= drop
            shown = "no peers" if below is None else f"{below:.2f}"
            r99 = "-" if p99 is None else f"{p99:+.1f}C"
            rmax = "-" if most is None else f"{most:+.1f}C"
            print(f"{name:44s} {gpu:>3d}  {r99:>8s} {rmax:>8s}  {drop:>5.2f} {shown:>19s}")
    print(f"\n* held out of all tuning. Rises: of the 60 s mean temperature over "
          f"{MODEL_DEADLINE_S:.0f} s at steady power; drops and excursions: fractions of the "
          "power limit.")
    print(f"drift inside the healthy spread on {drift_in} of {steady} GPUs with a steady span "
          f"({gpus - steady} without); power drop inside "
          f"the healthy spread below the peers on {drop_in} of {drop_peers} GPUs with peers "
          f"({gpus - drop_peers} without); {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
