"""Long healthy runs for the model bench: a node fitted on its own first hours, then
streamed for as long as the CPU allows (``model_bench.py --healthy-hours N``).

Why its own module: a run of tens of node-hours does not fit in memory as one frame.
The simulator streams chunks (replay's fast path, :func:`simulate_chunks`); each chunk is
put on the grid with the last :func:`~watchdog.anomaly.features.history_ticks` ticks of
the one before it (so every window and the 10-minute drift have their history), its
features computed and completed with the node's own baselines, and every evaluation's
scores kept (a few floats per GPU). The rules run over the same stream; when it ends,
the scoring stage's gate and runner replay the scores in order with the rules' incidents
suppressing their GPUs, exactly as ``watchdog replay --model`` does over a whole log.
Both streams (one job for ever, :func:`healthy_node`; a schedule of jobs,
:func:`schedule_node`) go through the same :func:`_scores` and :func:`_judge`.

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
from watchdog.anomaly.gate import Gate
from watchdog.anomaly.offline import fit_grid
from watchdog.pipeline.core import build_detector, feed_blocks
from watchdog.pipeline.replay import detect
from watchdog.sources.sim.frames import simulate, simulate_chunks

CHUNK_TICKS = 3600


def _scores(frames: Any, rules: Any, src: Any, model: Any, g0: Any) -> dict[str, Any]:
    """Stream ``frames`` (``(frame, xids)`` chunks) through the rules (the pipeline core's
    block detector) and score every window after the fit's last tick (``g0``'s end) at
    the first tick of every :data:`~watchdog.anomaly.runner.EVERY_S` of data time, as the
    scoring stage judges. Returns the evaluation times ``t``, ``feats``, ``scores``,
    ``uuids``, ``index`` and the rule ``incidents``."""
    cut = float(g0.t[-1]) + g0.step
    t_start = float(g0.t[0])
    every = max(1, round(runner.EVERY_S / g0.step))
    keep = F.history_ticks(g0.step)
    det = None
    tail = None
    ev_t: list[np.ndarray] = []
    ev_f: list[np.ndarray] = []
    ev_s: list[np.ndarray] = []
    uuids: list[str] = []
    index: list[int] = []
    for frame, xids in frames:
        if det is None:
            metrics = [c for c in frame.columns if c not in ("ts", "uuid", "index", "lost")]
            det = build_detector(rules, host=src.host, devices=list(src.devices()),
                                 mode="block", metrics=[*metrics, "xid"])
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
    return {"t": np.concatenate(ev_t) if ev_t else np.empty(0),
            "feats": np.concatenate(ev_f) if ev_f else None,
            "scores": np.concatenate(ev_s) if ev_s else None,
            "uuids": uuids, "index": index,
            "incidents": list(det.finish()) if det is not None else []}


def _judge(model: Any, host: str, sc: dict[str, Any]) -> tuple[Any, int]:
    """The scoring stage's gate and runner over the scored evaluations ``sc``
    (:func:`_scores`), exactly as :class:`AnomalyStage.judge` does, a GPU engaged by a
    rule incident not judged. Returns the runner and the workload changes the gate saw."""
    run = runner.Runner(model, host)
    gate = Gate(model)
    changes = 0
    t, uuids, index = sc["t"], sc["uuids"], sc["index"]
    if len(t):
        engaged = runner.engaged_mask(t, uuids, sc["incidents"])
        for e in range(len(t)):
            busy = {u for k, u in enumerate(uuids) if engaged[e, k]}
            f, s, skip = gate.step(float(t[e]), uuids, sc["feats"][e], sc["scores"][e], busy)
            run.step(float(t[e]), uuids, index, f, skip, s, raw=sc["feats"][e])
            changes += sum("workload changed" in line for _, line in gate.events)
            gate.events.clear()
    return run, changes


def _gpu_hours(sc: dict[str, Any], g0: Any) -> float:
    """GPU-hours scored: from the end of the fit to the last evaluation."""
    if not len(sc["t"]):
        return 0.0
    cut = float(g0.t[-1]) + g0.step
    return (float(sc["t"][-1]) - cut + g0.step) / 3600 * len(sc["uuids"])


def healthy_node(gm: str, seed: int, hours: float, fit_h: float, rules: Any,
                 spec: str = "sim:healthy") -> dict[str, Any]:
    """One node: fit on its first ``fit_h`` h, score the rest of ``hours`` h. Returns
    ``false`` (anomaly incidents), ``gpu_h`` (GPU-hours scored), ``rules`` (rule
    incidents), ``summaries`` (the first anomaly summaries) and ``threshold``."""
    rec, src = simulate(spec, duration=fit_h * 3600, gpus=8, seed=seed, model=gm)
    g0 = F.grid_from_frame(rec.frame)
    model, _ = fit_grid(g0, detect(rec, rules), src.devices()[0].name or gm)
    src, chunks = simulate_chunks(spec, duration=hours * 3600, gpus=8, seed=seed, model=gm,
                                  chunk_ticks=CHUNK_TICKS)
    sc = _scores(chunks, rules, src, model, g0)
    run, _ = _judge(model, src.host, sc)
    return {"false": len(run.incidents), "gpu_h": _gpu_hours(sc, g0),
            "rules": len(sc["incidents"]),
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
    from watchdog.sources.replay import Recording
    from watchdog.sources.sim.schedule import simulate_schedule

    src0, _, frames0 = simulate_schedule(gpus, gm, seed, fit_h)
    f0 = pd.concat(list(frames0), ignore_index=True)
    g0 = F.grid_from_frame(f0)
    rec0 = Recording(path="sim:schedule", host=src0.host, format="sim", frame=f0,
                     inventory=src0.devices(), xids=[])
    model, _ = fit_grid(g0, detect(rec0, rules), src0.devices()[0].name or gm)
    t_start = float(g0.t[0])
    src, sched, frames = simulate_schedule(gpus, gm, seed, hours, chunk_ticks=CHUNK_TICKS)
    sc = _scores(((f, []) for f in frames), rules, src, model, g0)
    run, changes = _judge(model, src.host, sc)
    jobs = sum(1 for c in sched.changes() if c * 1.0 >= fit_h * 3600)
    return {"false": len(run.incidents), "gpu_h": _gpu_hours(sc, g0),
            "rules": len(sc["incidents"]),
            "summaries": [f"{(i.started_at - t_start) / 3600:.2f} h: {i.summary}"
                          for i in run.incidents[:3]],
            "threshold": model.threshold, "changes": changes, "jobs": jobs}
