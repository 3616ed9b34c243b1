"""Small simulated nodes and models shared by the anomaly tests (kept small: seconds)."""

from __future__ import annotations

import functools
from typing import Any

from watchdog.anomaly import features as F
from watchdog.anomaly import train
from watchdog.anomaly.model import Model
from watchdog.sources.sim.frames import simulate


@functools.cache
def sim_grid(spec: str, minutes: float, gpus: int = 4, seed: int = 0,
             model: str = "h100-sxm") -> tuple[F.Grid, Any]:
    rec, _ = simulate(spec, duration=minutes * 60.0, gpus=gpus, seed=seed, model=model)
    g = F.grid_from_frame(rec.frame)
    return g, F.compute(g)


@functools.cache
def healthy_model(minutes: float = 60.0, seed: int = 1) -> Model:
    g, feats = sim_grid("sim:healthy", minutes, seed=seed)
    model, _ = train.fit(feats, step=g.step, t=g.t, gpu_model="NVIDIA H100 80GB HBM3",
                         uuids=g.uuids)
    return model
