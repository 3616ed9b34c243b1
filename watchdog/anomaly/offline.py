"""The model over recorded telemetry: ``watchdog replay --model`` and ``watchdog train``.

``--model auto`` fits on the first :data:`AUTO_FRACTION` of a log when that part holds at
least :data:`AUTO_BUSY_MIN` busy minutes on every GPU (a model fitted on an idle start
would flag the training that follows); otherwise it says so in one line and the replay
runs without a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly import runner, train
from watchdog.errors import InputError
from watchdog.incident import Incident
from watchdog.sources import is_sim

AUTO_FRACTION = 0.4
AUTO_BUSY_MIN = 10.0


@dataclass(frozen=True)
class Decision:
    """What the model did with one GPU of one replayed log.

    ``decision``: ``fitted`` (``--model auto`` fitted on it), ``declined`` (it did not:
    the log is replayed without the model) or ``model file`` (a trained model scored it);
    ``reason``: the words a person reads, the same for every GPU the decision shares
    (``fitted on 13:00-14:22 UTC, the first 40 % of the log``, ``declined: …``);
    ``busy_min``: the GPU's busy minutes in the part a fit would use (None for a model
    file); ``fit_from``/``fit_until``: that part (POSIX s; None for a model file)."""

    gpu: str
    uuid: str
    decision: str
    reason: str
    busy_min: float | None = None
    fit_from: float | None = None
    fit_until: float | None = None

    def to_json(self) -> dict[str, Any]:
        from watchdog.incident import iso

        return {"gpu": self.gpu, "uuid": self.uuid, "decision": self.decision,
                "reason": self.reason,
                "busy_min": None if self.busy_min is None else round(self.busy_min, 1),
                "fit_from": iso(self.fit_from), "fit_until": iso(self.fit_until)}


def decision_lines(path: str, decisions: list[Decision], spec: str = "auto") -> list[str]:
    """The decisions of one log for stderr: one line per reason, naming its GPUs and
    their busy minutes (``run-x.wandb: --model auto: GPU 0-3: fitted on …``)."""
    from watchdog.incident import gpu_list

    groups: dict[str, list[Decision]] = {}
    for d in decisions:
        groups.setdefault(d.reason, []).append(d)
    out = []
    for reason, ds in groups.items():
        busy = [d.busy_min for d in ds if d.busy_min is not None]
        mins = ""
        if busy:
            lo, hi = min(busy), max(busy)
            mins = f" ({lo:.0f} busy minutes)" if round(lo) == round(hi) else \
                f" ({lo:.0f}-{hi:.0f} busy minutes)"
        gpus = gpu_list([d.gpu for d in ds])
        out.append(f"{path}: --model {spec}: GPU {gpus}: {reason}{mins}")
    return out


def _shown(path: str) -> str:
    """A log as the notes name it: its file name (the coverage lines do the same)."""
    from pathlib import Path

    return path if is_sim(path) else Path(path).name


def _span(t0: float, t1: float) -> str:
    from datetime import UTC, datetime

    a = datetime.fromtimestamp(t0, tz=UTC)
    b = datetime.fromtimestamp(t1, tz=UTC)
    fmt = "%H:%M" if a.date() == b.date() else "%Y-%m-%d %H:%M"
    return f"{a:{fmt}}-{b:{fmt}} UTC"


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
    """Add anomaly incidents to each replayed result (``spec``: a model file or auto) and
    what the model did with each of its GPUs (``result.model``: :class:`Decision`).
    ``note(line)``: what a person should know (the decisions, a coarse fit); the command
    prints it."""
    from watchdog.anomaly import persist

    for r in results:
        frame = r.frame
        if len(frame) == 0:
            continue
        grid = F.grid_from_frame(frame)
        feats = F.compute(grid)
        gm = gpu_model_of(frame, sim_key if is_sim(r.path) else None)
        gpus = [(str(i), u) for i, u in zip(grid.index, grid.uuids, strict=True)]
        start = None
        if spec == "auto":
            cut = grid.t[0] + AUTO_FRACTION * (grid.t[-1] - grid.t[0])
            busy = train.busy_minutes(feats[grid.t < cut], grid.step)
            span = f"{_span(float(grid.t[0]), float(cut))}, the first 40 % of the log"
            model, why = None, None
            if len(busy) == 0 or busy.min() < AUTO_BUSY_MIN:
                why = None
            else:
                try:
                    model, _ = fit_grid(grid, r.incidents, gm, until=cut, feats=feats)
                except train.NotEnoughData as e:
                    why = f"declined: {e}"
            r.model = [_auto_decision(g, u, float(b), model, why, span, grid.t[0], cut)
                       for (g, u), b in zip(gpus, busy, strict=True)]
            for line in decision_lines(_shown(r.path), r.model):
                note(line)
            if model is None:
                continue
            start = cut
            if train.coarse(model):
                note(f"{r.path}: --model auto: {train.coarse_note(model)}")
        else:
            model = persist.load(spec, gm)
            if abs(model.step - grid.step) > 1e-6:
                raise InputError(f"{spec}: trained on a {model.step:g} s grid, {r.path} is "
                                 f"sampled every {grid.step:g} s")
            r.model = [Decision(g, u, "model file", f"scored with the model file {spec} "
                                f"(trained on {model.gpu_model})") for g, u in gpus]
        found = judge_recording(model, grid, r.host, r.engaged, start=start, feats=feats,
                                rules=r.incidents)
        r.incidents = sorted([*r.incidents, *found], key=lambda i: i.started_at)


def _auto_decision(gpu: str, uuid: str, busy: float, model: Any, why: str | None,
                   span: str, t0: float, cut: float) -> Decision:
    """One GPU's ``--model auto`` decision (``why``: a decline of the whole log)."""
    if model is not None:
        return Decision(gpu, uuid, "fitted", f"fitted on {span}", busy, t0, cut)
    if why is None:  # a GPU (this one or another) was too idle in the part to fit on
        why = (f"declined: under {AUTO_BUSY_MIN:.0f} busy minutes in {span}"
               if busy < AUTO_BUSY_MIN else
               f"declined: another GPU of the log has under {AUTO_BUSY_MIN:.0f} busy "
               f"minutes in {span} (the model is fitted on a log's GPUs together)")
    return Decision(gpu, uuid, "declined", f"{why}; replayed without the model", busy,
                    t0, cut)


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
