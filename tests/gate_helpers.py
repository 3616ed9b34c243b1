"""Nodes, windows and walks shared by the gate's tests (tests/test_anomaly_*.py)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd
from anomaly_helpers import healthy_model, sim_grid

from watchdog.anomaly import features as F
from watchdog.anomaly import phases
from watchdog.anomaly.gate import Gate
from watchdog.anomaly.offline import fit_grid
from watchdog.anomaly.stage import NEVER, AnomalyStage
from watchdog.sources.sim.schedule import simulate_schedule

FIT_H = 2.0


@functools.cache
def job_change_node(gpus: int, gm: str, seed: int) -> tuple[pd.DataFrame, float, float]:
    """A scheduled node's frame up to 35 min after its first job change that uses every
    GPU, the change's time (epoch s) and the frame's start."""
    _src, sched, _ = simulate_schedule(gpus, gm, seed, 30.0)  # frames not drawn
    change = next(c for c in sched.changes() if sched.at(c).job.k == gpus)
    _, _, frames = simulate_schedule(gpus, gm, seed, change / 3600 + 35 / 60)
    frame = pd.concat(list(frames), ignore_index=True)
    t0 = float(frame["ts"].min())
    return frame, t0 + change, t0

def judge_node(frame: pd.DataFrame, t0: float) -> tuple[list[Any], AnomalyStage]:
    g = F.grid_from_frame(frame)
    feats = F.compute(g)
    cut = t0 + FIT_H * 3600
    model, _ = fit_grid(g, [], "sim", until=cut, feats=feats)
    stage = AnomalyStage(model, "node", g.step, start=cut)
    stage.add_grid(g, feats)
    stage.judge(NEVER)
    return stage.incidents, stage

CASES = [(8, "h100-sxm", 3), (4, "a100-pcie", 3), (1, "a100-pcie", 6)]

@functools.cache
def steady() -> tuple[Any, list[str], np.ndarray]:
    """The 4-GPU healthy model and one steady training window's features ``(G, F)``."""
    model = healthy_model()
    g, feats = sim_grid("sim:healthy", 60.0, seed=1)
    k = int(np.argmin(np.abs(g.t - (g.t[0] + 40 * 60))))
    row = model.complete(feats[k], g.uuids)
    return model, list(g.uuids), row

def walk(gate: Gate, windows: list[tuple[float, np.ndarray, set[str]]]
          ) -> list[set[str]]:
    """Each window through the gate; the GPUs it does not judge at each."""
    out = []
    for t, row, engaged in windows:
        s = gate.model.scores(np.where(np.isnan(row), gate.model.fill, row))
        s[~F.valid_rows(row[None])[0]] = np.nan
        _f, _s, skip = gate.step(t, steady()[1], row, s, engaged)
        out.append(skip)
    return out

def idle(row: np.ndarray, gpus: list[int]) -> np.ndarray:
    out = row.copy()
    out[gpus, F.INDEX["util_mean"]] = 0.0
    return out

def skipped_for(skips: list[set[str]], times: list[float], uuid: str, since: float
                 ) -> float:
    """Seconds from ``since`` to the first window at which ``uuid`` is judged again."""
    for t, skip in zip(times, skips, strict=True):
        if t >= since and uuid not in skip:
            return t - since
    return float("inf")

def fall_through_settle(model: Any, uuids: list[str], row: np.ndarray, fall: list[int],
                         by: float, peers_too: bool = False
                         ) -> tuple[Gate, list[np.ndarray], list[np.ndarray]]:
    """A workload change on ``uuids`` (``row``: their steady window) and, 60 s into its
    settling, the power of the GPUs ``fall`` (row indices) falling by ``by`` of their
    limit at unchanged utilization and memory (with ``peers_too``: every GPU's). Returns
    the gate once it has re-learned and, for the 2 min after, the features it judged and
    their scores at each window."""
    pf, pp = F.INDEX["power_frac"], F.INDEX["peer_power"]
    fell = row.copy()
    for g in range(len(uuids)) if peers_too else fall:
        fell[g, pf] -= by
    if not peers_too and len(uuids) > 1:
        for g in fall:
            fell[g, pp] -= by  # its peers held
    gate = Gate(model)
    for i in range(40):  # past start-up
        s = model.scores(np.where(np.isnan(row), model.fill, row))
        gate.step(10.0 * i, uuids, row, s, set())
    t0 = 400.0
    phases.change(gate.state, t0, set(uuids), "a test")
    judged, scores = [], []
    for i in range(60):
        x = row if i < 6 else fell
        s = model.scores(np.where(np.isnan(x), model.fill, x))
        learned = gate.state.relearn is None
        f2, s2, _skip = gate.step(t0 + 10 * i, uuids, x, s, set())
        if learned:
            judged.append(f2)
            scores.append(s2)
        if len(judged) == 12:
            break
    assert gate.state.relearn is None
    return gate, judged, scores

def alone_then(model: Any, u: list[str], before: np.ndarray, after: np.ndarray,
                secs: float = 800.0) -> tuple[Gate, np.ndarray, float, bool]:
    """One GPU at work: ``before`` for ``secs`` (past start-up, judged normal), then one
    window of ``after``. Returns the gate, the features it judged that window with, its
    score and whether it was judged."""
    gate, t = Gate(model), 0.0
    while t < secs:
        gate.step(t, u, before, model.scores(np.where(np.isnan(before), model.fill, before)),
                  set())
        t += 10.0
    f2, s2, skip = gate.step(t, u, after, model.scores(np.where(np.isnan(after), model.fill,
                                                                after)), set())
    return gate, f2, float(s2[0]), u[0] not in skip
