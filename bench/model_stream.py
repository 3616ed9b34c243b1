"""Long healthy runs for the model bench: a node fitted on its own first hours, then
streamed for as long as the CPU allows (``model_bench.py --healthy-hours N``).

Why its own module: a run of tens of node-hours does not fit in memory as one frame.
The simulator streams chunks (replay's fast path, :func:`simulate_chunks`); each chunk is
put on the grid with the last :func:`~watchdog.anomaly.features.history_ticks` ticks of
the one before it (so every window and the 10-minute drift have their history), its
features computed and completed with the node's own baselines, and every evaluation's
scores kept (a few floats per GPU). The rules run over the same stream; when it ends,
the runner replays the scores in order with the rules' incidents suppressing their GPUs,
exactly as ``watchdog replay --model`` does over a whole log.

The model is the node's own, as the daemon's ``model: auto`` would fit it: the first
``fit_h`` hours simulated again as one recording (the simulator is a pure function of
seed and time, so that is the stream's own beginning) and fitted by the offline path
(rule incidents left out). Only the ticks after those hours are scored.

Caveat: the running maximum of the SM and memory clocks (the ceilings of their
fractions) restarts with each chunk's context instead of the run's start; on the
simulator both reach their maximum within seconds, so it makes no difference there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from watchdog.anomaly import features as F
from watchdog.anomaly import runner
from watchdog.anomaly.offline import fit_grid
from watchdog.anomaly.transitions import Gate
from watchdog.detect import Detector
from watchdog.pipeline.core import feed_blocks
from watchdog.pipeline.replay import detect
from watchdog.sources.sim.frames import simulate, simulate_chunks

CHUNK_TICKS = 3600


def healthy_node(gm: str, seed: int, hours: float, fit_h: float, rules: Any,
                 spec: str = "sim:healthy") -> dict[str, Any]:
    """One node: fit on its first ``fit_h`` h, score the rest of ``hours`` h. Returns
    ``false`` (anomaly incidents), ``gpu_h`` (GPU-hours scored), ``rules`` (rule
    incidents), ``summaries`` (the first anomaly summaries) and ``threshold``."""
    rec, src = simulate(spec, duration=fit_h * 3600, gpus=8, seed=seed, model=gm)
    g0 = F.grid_from_frame(rec.frame)
    model, _ = fit_grid(g0, detect(rec, rules), src.devices()[0].name or gm)
    cut = float(g0.t[-1]) + g0.step
    t_start = float(g0.t[0])
    src, chunks = simulate_chunks(spec, duration=hours * 3600, gpus=8, seed=seed, model=gm,
                                  chunk_ticks=CHUNK_TICKS)
    every = max(1, round(runner.EVERY_S / g0.step))
    keep = F.history_ticks(g0.step)
    det = None
    tail = None
    ev_t: list[np.ndarray] = []
    ev_f: list[np.ndarray] = []
    ev_s: list[np.ndarray] = []
    uuids: list[str] = []
    index: list[int] = []
    for frame, xids in chunks:
        if det is None:
            metrics = [c for c in frame.columns if c not in ("ts", "uuid", "index", "lost")]
            det = Detector(rules, host=src.host, devices=list(src.devices()),
                           metrics=[*metrics, "xid"])
        feed_blocks(det, frame, xids, block_rows=131_072)
        first = float(frame["ts"].iloc[0])
        both = frame if tail is None else pd.concat([tail, frame], ignore_index=True)
        ts = both["ts"].to_numpy()
        tail = both[ts >= ts[-1] - keep * g0.step]
        if float(frame["ts"].iloc[-1]) < cut:
            continue
        g = F.grid_from_frame(both, step=g0.step)
        uuids, index = g.uuids, g.index
        tick = np.round((g.t - t_start) / g.step).astype(np.int64)
        rows = (g.t >= first) & (g.t >= cut) & (tick % every == every - 1)
        if not rows.any():
            continue
        feats = model.complete(F.compute(g)[rows], g.uuids)
        flat = feats.reshape(-1, feats.shape[-1])
        ok = F.valid_rows(feats).reshape(-1)
        s = np.full(len(flat), np.nan)
        if ok.any():
            s[ok] = model.scores(flat[ok])
        ev_t.append(g.t[rows])
        ev_f.append(feats)
        ev_s.append(s.reshape(feats.shape[:2]))
    incidents = list(det.finish()) if det is not None else []
    run = runner.Runner(model, src.host)
    gpu_h = 0.0
    if ev_t:
        t = np.concatenate(ev_t)
        feats = np.concatenate(ev_f)
        scores = np.concatenate(ev_s)
        engaged = runner.engaged_mask(t, uuids, incidents)
        for e in range(len(t)):
            busy = {u for k, u in enumerate(uuids) if engaged[e, k]}
            run.step(float(t[e]), uuids, index, feats[e], busy, scores[e])
        gpu_h = (float(t[-1]) - cut + g0.step) / 3600 * len(uuids)
    return {"false": len(run.incidents), "gpu_h": gpu_h, "rules": len(incidents),
            "summaries": [i.summary for i in run.incidents[:2]],
            "threshold": model.threshold}


def schedule_node(gm: str, gpus: int, seed: int, hours: float, fit_h: float,
                  rules: Any) -> dict[str, Any]:
    """One node running its seeded schedule of jobs (:mod:`watchdog.sources.sim.schedule`:
    a new job every 2-8 h, long checkpoints, restarts, idle spells, an inference server),
    fitted on its first ``fit_h`` h (its first job) and scored for ``hours`` h through
    the scoring stage's gate and runner, exactly as :class:`AnomalyStage.judge` does
    (``engaged``: the rule incidents of the same stream). Returns ``false``, ``gpu_h``,
    ``rules``, ``summaries``, ``threshold``, ``changes`` (workload changes the gate saw)
    and ``jobs`` (job changes in the schedule)."""
    from watchdog.sources.sim.schedule import simulate_schedule

    src0, _, frames0 = simulate_schedule(gpus, gm, seed, fit_h)
    f0 = pd.concat(list(frames0), ignore_index=True)
    g0 = F.grid_from_frame(f0)
    from watchdog.pipeline.replay import detect
    from watchdog.sources.replay import Recording

    rec0 = Recording(path="sim:schedule", host=src0.host, format="sim", frame=f0,
                     inventory=src0.devices(), xids=[])
    model, _ = fit_grid(g0, detect(rec0, rules), src0.devices()[0].name or gm)
    cut = float(g0.t[-1]) + g0.step
    t_start = float(g0.t[0])
    src, sched, frames = simulate_schedule(gpus, gm, seed, hours, chunk_ticks=CHUNK_TICKS)
    every = max(1, round(runner.EVERY_S / g0.step))
    keep = F.history_ticks(g0.step)
    det = None
    tail = None
    ev_t: list[np.ndarray] = []
    ev_f: list[np.ndarray] = []
    ev_s: list[np.ndarray] = []
    uuids: list[str] = []
    index: list[int] = []
    for frame in frames:
        if det is None:
            metrics = [c for c in frame.columns if c not in ("ts", "uuid", "index", "lost")]
            det = Detector(rules, host=src.host, devices=list(src.devices()),
                           metrics=[*metrics, "xid"])
        feed_blocks(det, frame, [], block_rows=131_072)
        first = float(frame["ts"].iloc[0])
        both = frame if tail is None else pd.concat([tail, frame], ignore_index=True)
        ts = both["ts"].to_numpy()
        tail = both[ts >= ts[-1] - keep * g0.step]
        if float(frame["ts"].iloc[-1]) < cut:
            continue
        g = F.grid_from_frame(both, step=g0.step)
        uuids, index = g.uuids, g.index
        tick = np.round((g.t - t_start) / g.step).astype(np.int64)
        rows = (g.t >= first) & (g.t >= cut) & (tick % every == 0)
        if not rows.any():
            continue
        feats = model.complete(F.compute(g)[rows], g.uuids)
        flat = feats.reshape(-1, feats.shape[-1])
        ok = F.valid_rows(feats).reshape(-1)
        s = np.full(len(flat), np.nan)
        if ok.any():
            s[ok] = model.scores(flat[ok])
        ev_t.append(g.t[rows])
        ev_f.append(feats)
        ev_s.append(s.reshape(feats.shape[:2]))
    incidents = list(det.finish()) if det is not None else []
    run = runner.Runner(model, src.host)
    gate = Gate(model)
    gpu_h = 0.0
    changes = 0
    if ev_t:
        t = np.concatenate(ev_t)
        feats = np.concatenate(ev_f)
        scores = np.concatenate(ev_s)
        engaged = runner.engaged_mask(t, uuids, incidents)
        for e in range(len(t)):
            busy = {u for k, u in enumerate(uuids) if engaged[e, k]}
            f, sc, skip = gate.step(float(t[e]), uuids, feats[e], scores[e], busy)
            run.step(float(t[e]), uuids, index, f, skip, sc)
            changes += sum("workload changed" in line for _, line in gate.events)
            gate.events.clear()
        gpu_h = (float(t[-1]) - cut + g0.step) / 3600 * len(uuids)
    jobs = sum(1 for c in sched.changes() if c * 1.0 >= fit_h * 3600)
    return {"false": len(run.incidents), "gpu_h": gpu_h, "rules": len(incidents),
            "summaries": [f"{(i.started_at - t_start) / 3600:.2f} h: {i.summary}"
                          for i in run.incidents[:3]],
            "threshold": model.threshold, "changes": changes, "jobs": jobs}
