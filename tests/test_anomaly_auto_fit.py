"""``replay --model auto`` fits each GPU on the first 40 % of its own busy time
(:mod:`watchdog.anomaly.offline`): an idle GPU of a node does not stop its busy ones from
being judged, a GPU that starts work late is fitted on its own first part and not judged
before its end, and a GPU with too little work is declined with the reason. Faults are
for the bench are written into the real W&B runs by ``bench/model_wandb.py``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from watchdog.anomaly import features as F
from watchdog.anomaly import offline
from watchdog.detect import load_rules
from watchdog.pipeline.replay import ReplayOptions, replay_recording
from watchdog.sources.sim.frames import simulate


def _grid(busy: list[tuple[float, float]], minutes: float, step: float = 10.0) -> F.Grid:
    """GPUs working (100 %, 300 W of 400 W) from..to the minutes given, idle otherwise."""
    t = 1_750_000_000.0 + step * np.arange(int(minutes * 60 / step))
    m = (t - t[0])[:, None] / 60.0
    lo = np.array([b[0] for b in busy])[None, :]
    hi = np.array([b[1] for b in busy])[None, :]
    on = (m >= lo) & (m < hi)
    data = {"utilization.gpu": np.where(on, 100.0, 0.0),
            "power.draw": np.where(on, 300.0, 60.0),
            "enforced.power.limit": np.full(on.shape, 400.0)}
    return F.Grid(t, step, [f"g{k}" for k in range(len(busy))], list(range(len(busy))), data)


def test_each_gpu_is_fitted_on_the_first_40_percent_of_its_own_busy_time() -> None:
    never = (np.inf, np.inf)
    g = _grid([(0, 60), never, (40, 60), (20, 60), (0, 25), (0, 24)], 60.0)
    parts = offline.auto_parts(g, F.compute(g))
    t0 = g.t[0]
    # busy from the start: the first 40 % of its 60 busy minutes (the log's 40 %, as before)
    assert parts[0].until == pytest.approx(t0 + 24 * 60 + 10, abs=61)
    assert parts[0].busy_min == pytest.approx(24.0, abs=1.0)
    assert parts[1].until is None and parts[1].total_min == 0.0  # idle: declined
    assert parts[2].until is None and parts[2].busy_min < offline.AUTO_BUSY_MIN  # 20 min
    # busy from minute 20: its own first 16 busy minutes, to minute 36
    assert parts[3].until == pytest.approx(t0 + 36 * 60 + 10, abs=61)
    # AUTO_BUSY_MIN from both sides: 25 busy minutes give 10 to fit on, 24 give 9.6
    assert parts[4].until is not None and parts[4].busy_min >= offline.AUTO_BUSY_MIN
    assert parts[5].until is None and 9.0 < parts[5].busy_min < offline.AUTO_BUSY_MIN


def _one_gpu_idle(spec: str, minutes: float, idle: int) -> object:
    """A simulated 4-GPU node whose GPU ``idle`` does no work at all (a spare GPU)."""
    rec, _ = simulate(spec, duration=minutes * 60.0, gpus=4, seed=1)
    f = rec.frame.copy()
    mine = f["index"] == idle
    for col, v in (("utilization.gpu", 0.0), ("utilization.memory", 0.0),
                   ("power.draw", 70.0), ("memory.used", 500.0)):
        if col in f:
            f.loc[mine, col] = v
    return dataclasses.replace(rec, frame=f)


@pytest.mark.slow
def test_an_idle_gpu_does_not_stop_the_busy_ones_from_being_judged() -> None:
    rec = _one_gpu_idle("sim:hbm_sag@80m", 100.0, idle=0)
    r = replay_recording(rec, load_rules(), ReplayOptions())
    notes: list[str] = []
    offline.apply([r], "auto", "h100-sxm", note=notes.append)
    said = {d.gpu: d for d in r.model}
    assert said["0"].decision == "declined" and said["0"].reason.startswith(
        "declined: 0 busy minutes in the log")
    assert all(said[g].decision == "fitted" for g in "123")
    assert any(ln.endswith("UTC; 38 busy minutes)") and "GPU 1-3: fitted on the first 40 "
               "% of its busy time (to " in ln for ln in notes), notes
    # the fault on GPU 3 (HBM at 80 % of its clock from minute 80) is found; the spare
    # GPU is never judged
    found = [i for i in r.incidents if i.kind == "anomaly"]
    assert any(i.gpus == ["3"] and i.started_at >= rec.frame["ts"].iloc[0] + 80 * 60
               for i in found), [i.summary for i in found]
    assert not any("0" in i.gpus for i in found)


def test_a_gpu_is_held_until_the_end_of_its_own_fit() -> None:
    class Never:
        until = np.inf

        def at(self, t: float) -> set[str]:
            return {"r"} if t < 5 else set()

    held = offline._Held(Never(), {"a": 100.0, "b": np.inf, "c": 0.0})
    assert held.at(50.0) == {"a", "b"} and held.at(1.0) == {"a", "b", "r"}
    assert held.at(100.0) == {"b"} and held.until == np.inf
