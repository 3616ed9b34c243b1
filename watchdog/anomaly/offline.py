"""The model over recorded telemetry: ``watchdog replay --model`` and ``watchdog train``.

``--model auto`` fits on the first :data:`AUTO_FRACTION` of a log when that part holds at
least :data:`AUTO_BUSY_MIN` busy minutes on every GPU (a model fitted on an idle start
would flag the training that follows); otherwise it says so in one line and the replay
runs without a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly import runner, train
from watchdog.errors import InputError
from watchdog.incident import Incident
from watchdog.sources import is_sim

AUTO_FRACTION = 0.4
AUTO_BUSY_MIN = 10.0


def gpu_model_of(frame: Any, sim_key: str | None = None) -> str:
    """The GPU product name of a recording: the simulated type's name, the log's
    ``name`` column, or ``unknown``."""
    if sim_key is not None:
        from watchdog.sources.sim.models import get_model

        return get_model(sim_key).name
    if "name" in frame and len(frame):
        name = str(frame["name"].iloc[0]).strip()
        if name and name.lower() != "nan":
            return name
    return "unknown"


def exclusion(grid: F.Grid, incidents: list[Incident]) -> np.ndarray:
    """``(T, G)``: windows overlapping an incident (left out of training)."""
    pad = F.window_ticks(grid.step) * grid.step  # a window still holds the incident
    return runner.engaged_mask(grid.t, grid.uuids, incidents, pad)


def fit_grid(grid: F.Grid, incidents: list[Incident], gpu_model: str, *,
             until: float | None = None, seed: int = 0,
             feats: np.ndarray | None = None, min_windows: int = 200
             ) -> tuple[train.Model, dict[str, float]]:
    """Fit on a grid (ticks before ``until`` only), leaving out incident windows."""
    if feats is None:
        feats = F.compute(grid)
    excl = exclusion(grid, incidents)
    if until is not None:
        excl |= (grid.t >= until)[:, None]
    return train.fit(feats, step=grid.step, t=grid.t, gpu_model=gpu_model, exclude=excl,
                     seed=seed, min_windows=min_windows, uuids=grid.uuids)


def apply(results: list[Any], spec: str, sim_key: str | None,
          note: Callable[[str], None]) -> None:
    """Add anomaly incidents to each replayed result (``spec``: a model file or auto).
    ``note(line)``: what a person should know (the model declined, a coarse fit); the
    command prints it."""
    from watchdog.anomaly import persist

    for r in results:
        frame = r.frame
        if len(frame) == 0:
            continue
        grid = F.grid_from_frame(frame)
        feats = F.compute(grid)
        gm = gpu_model_of(frame, sim_key if is_sim(r.path) else None)
        start = None
        if spec == "auto":
            cut = grid.t[0] + AUTO_FRACTION * (grid.t[-1] - grid.t[0])
            busy = train.busy_minutes(feats[grid.t < cut], grid.step)
            if len(busy) == 0 or busy.min() < AUTO_BUSY_MIN:
                note(f"{r.path}: --model auto: the first 40 % holds "
                     f"{busy.min() if len(busy) else 0:.0f} busy minutes on its least busy "
                     f"GPU, {AUTO_BUSY_MIN:.0f} needed; replaying without the model")
                continue
            try:
                model, _ = fit_grid(grid, r.incidents, gm, until=cut, feats=feats)
            except train.NotEnoughData as e:
                note(f"{r.path}: --model auto: {e}; replaying without the model")
                continue
            start = cut
            if train.coarse(model):
                note(f"{r.path}: --model auto: {train.coarse_note(model)}")
        else:
            model = persist.load(spec, gm)
            if abs(model.step - grid.step) > 1e-6:
                raise InputError(f"{spec}: trained on a {model.step:g} s grid, {r.path} is "
                                 f"sampled every {grid.step:g} s")
        found = judge_recording(model, grid, r.host, r.engaged, start=start, feats=feats,
                                rules=r.incidents)
        r.incidents = sorted([*r.incidents, *found], key=lambda i: i.started_at)


class _Upto:
    """An engagement timeline seen only up to ``until`` (s): the stage judges the windows
    the agent would have judged before a rule's transition at that time."""

    def __init__(self, engaged: Any, until: float) -> None:
        self._engaged = engaged
        self.until = min(until, engaged.until)

    def at(self, t: float) -> set[str]:
        return self._engaged.at(t)


def judge_recording(model: Any, grid: F.Grid, host: str, engaged: Any = None, *,
                    start: float | None = None, feats: np.ndarray | None = None,
                    rules: list[Incident] | None = None) -> list[Incident]:
    """The anomaly incidents of a recording on its grid: the windows go through the one
    scoring stage (:class:`~watchdog.anomaly.stage.AnomalyStage`), judged as the agent
    would have judged them tick by tick, skipping GPUs where the detector had a rule
    pending or firing (``engaged``: its timeline; None: no rules ran). ``start``: ticks
    before it are not judged (the part ``--model auto`` fitted on).

    ``rules``: the recording's rule incidents. Then the anomalies meet them as the agent's
    do (:class:`~watchdog.anomaly.handover.Handover`, one page per problem): the windows
    are judged up to each rule transition, then the transition goes in; an anomaly a rule
    took over is left out of the list returned (it is in the rule's evidence)."""
    from watchdog.anomaly.handover import Handover
    from watchdog.anomaly.stage import NEVER, AnomalyStage

    stage = AnomalyStage(model, host, grid.step, start=start)
    stage.add_grid(grid, feats)
    timeline = engaged if engaged is not None else NEVER
    if not rules:
        stage.judge(timeline)
        return stage.incidents
    hand = Handover()
    events: list[tuple[float, int, str, Incident]] = []
    for k, inc in enumerate(rules):
        if inc.fired_at is None or inc.kind == "anomaly":
            continue
        events.append((inc.fired_at, k, "firing", inc))
        if inc.resolved_at is not None:
            events.append((inc.resolved_at, k, "resolved", inc))
    events.sort(key=lambda e: (e[0], e[2] == "firing", e[1]))
    for t, _k, what, inc in events:
        hand(stage.judge(_Upto(timeline, t - 1e-6)))  # a tick: the rules' changes first
        hand([(what, inc)])
    hand(stage.judge(timeline))
    gone = {id(a) for a in hand.superseded}
    return [a for a in stage.incidents if id(a) not in gone]
