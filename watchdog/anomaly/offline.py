"""The model over recorded telemetry: ``watchdog replay --model`` and ``watchdog train``.

``--model auto`` fits each GPU on the first :data:`AUTO_FRACTION` of its own busy time
(windows where it works) when that part holds at least :data:`AUTO_BUSY_MIN` busy
minutes, and judges it from there on; a GPU with less (an idle GPU of the node, a GPU
that worked a few minutes) is declined, with the reason, and never judged. One model is
fitted on the fitted GPUs' parts together (the node's normal); an idle GPU of a node does
not stop its busy ones from being judged, and a GPU that starts work late (another job
on part of the node) is fitted on its own first part.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly import runner, train
from watchdog.anomaly.model import Model
from watchdog.errors import InputError
from watchdog.incident import Incident
from watchdog.sources import is_sim
from watchdog.untyped import Array, JsonDoc

if TYPE_CHECKING:
    import pandas as pd

    from watchdog.anomaly.stage import Engagement

AUTO_FRACTION = 0.4
AUTO_BUSY_MIN = 10.0


@dataclass(frozen=True)
class Decision:
    """What the model did with one GPU of one replayed log.

    ``decision``: ``fitted`` (``--model auto`` fitted on it), ``declined`` (it did not:
    the model does not judge this GPU) or ``model file`` (a trained model scored it);
    ``reason``: the words a person reads, the same for every GPU the decision shares
    (``fitted on the first 40 % of its busy time``, ``declined: …``); ``busy_min``: the
    GPU's busy minutes in the part a fit uses (None for a model file);
    ``fit_from``/``fit_until``: that part (POSIX s; ``fit_until`` None where the GPU has
    too little work for one; both None for a model file)."""

    gpu: str
    uuid: str
    decision: str
    reason: str
    busy_min: float | None = None
    fit_from: float | None = None
    fit_until: float | None = None

    def to_json(self) -> JsonDoc:
        from watchdog.incident import iso

        return {"gpu": self.gpu, "uuid": self.uuid, "decision": self.decision,
                "reason": self.reason,
                "busy_min": None if self.busy_min is None else round(self.busy_min, 1),
                "fit_from": iso(self.fit_from), "fit_until": iso(self.fit_until)}


def decision_lines(path: str, decisions: list[Decision], spec: str = "auto") -> list[str]:
    """The decisions of one log for stderr: one line per reason, naming its GPUs, their
    busy minutes and, for a fit, the times its parts end (``run-x.wandb: --model auto:
    GPU 0-3: fitted on the first 40 % of its busy time (to 13:22-13:25 UTC; 46-54 busy
    minutes)``)."""
    from watchdog.incident import gpu_list

    groups: dict[str, list[Decision]] = {}
    for d in decisions:
        groups.setdefault(d.reason, []).append(d)
    out = []
    for reason, ds in groups.items():
        said = []
        ends = [d.fit_until for d in ds if d.decision == "fitted" and d.fit_until is not None]
        if ends:
            a, b = _clock(min(ends)), _clock(max(ends))
            said.append(f"to {a} UTC" if a == b else f"to {a}-{b} UTC")
        busy = [d.busy_min for d in ds if d.busy_min is not None]
        if busy:
            lo, hi = min(busy), max(busy)
            said.append(f"{lo:.0f} busy minutes" if round(lo) == round(hi) else
                        f"{lo:.0f}-{hi:.0f} busy minutes")
        gpus = gpu_list([d.gpu for d in ds])
        tail = f" ({'; '.join(said)})" if said else ""
        out.append(f"{path}: --model {spec}: GPU {gpus}: {reason}{tail}")
    return out


def _clock(t: float) -> str:
    from datetime import UTC, datetime

    return f"{datetime.fromtimestamp(t, tz=UTC):%H:%M}"


def _shown(path: str) -> str:
    """A log as the notes name it: its file name (the coverage lines do the same)."""
    from pathlib import Path

    return path if is_sim(path) else Path(path).name


def gpu_model_of(frame: pd.DataFrame, sim_key: str | None = None) -> str:
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


def exclusion(grid: F.Grid, incidents: list[Incident]) -> Array:
    """``(T, G)``: windows overlapping an incident (left out of training)."""
    pad = F.window_ticks(grid.step) * grid.step  # a window still holds the incident
    return runner.engaged_mask(grid.t, grid.uuids, incidents, pad)


def fit_grid(grid: F.Grid, incidents: list[Incident], gpu_model: str, *,
             until: float | Array | None = None, seed: int = 0,
             feats: Array | None = None, min_windows: int = 200
             ) -> tuple[Model, dict[str, float]]:
    """Fit on a grid (ticks before ``until`` only: one time for every GPU, or ``(G,)``
    times, one per GPU column, ``inf`` for all of it and ``-inf`` for none), leaving out
    incident windows."""
    if feats is None:
        feats = F.compute(grid)
    excl = exclusion(grid, incidents)
    if until is not None:
        excl |= grid.t[:, None] >= np.broadcast_to(np.asarray(until, dtype=float),
                                                   (len(grid.uuids),))[None, :]
    return train.fit(feats, step=grid.step, t=grid.t, gpu_model=gpu_model, exclude=excl,
                     seed=seed, min_windows=min_windows, uuids=grid.uuids)


@dataclass(frozen=True)
class Part:
    """The part of one GPU's log ``--model auto`` fits on: ``until`` (POSIX s: its windows
    before it; None: declined), its busy minutes there, and in the whole log."""

    until: float | None
    busy_min: float
    total_min: float


def auto_parts(grid: F.Grid, feats: Array) -> list[Part]:
    """Per GPU column of ``grid``: the first :data:`AUTO_FRACTION` of its busy windows,
    fitted when they hold :data:`AUTO_BUSY_MIN` busy minutes or more."""
    busy = F.busy(feats)
    out = []
    for g in range(busy.shape[1]):
        at = np.flatnonzero(busy[:, g])
        total = len(at) * grid.step / 60.0
        need = math.ceil(AUTO_FRACTION * len(at))
        fit_min = need * grid.step / 60.0
        if need == 0 or fit_min < AUTO_BUSY_MIN:
            out.append(Part(None, fit_min, total))
            continue
        out.append(Part(float(grid.t[at[need - 1]]) + grid.step, fit_min, total))
    return out


class Replay(Protocol):
    """What :func:`apply` reads and writes of a replayed log
    (:class:`~watchdog.pipeline.replay.Replayed`)."""

    @property
    def frame(self) -> pd.DataFrame: ...
    @property
    def path(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def engaged(self) -> Engagement | None: ...

    incidents: list[Incident]
    model: list[Decision]


def auto_min_windows(step: float) -> int:
    """The windows one GPU's :data:`AUTO_BUSY_MIN` busy minutes give a fit (one every
    :data:`train.STRIDE_S`, or every tick of a log sampled less often)."""
    return max(1, int(AUTO_BUSY_MIN * 60.0 / max(step, train.STRIDE_S)))


def apply(results: Sequence[Replay], spec: str, sim_key: str | None,
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
        start, held = None, None
        if spec == "auto":
            parts = auto_parts(grid, feats)
            until = np.array([np.inf if p.until is None else p.until for p in parts])
            model, why = None, None
            if any(p.until is not None for p in parts):
                try:
                    model, _ = fit_grid(grid, r.incidents, gm, feats=feats,
                                        until=np.where(np.isinf(until), -np.inf, until),
                                        min_windows=auto_min_windows(grid.step))
                except train.NotEnoughData as e:
                    why = f"declined: {e}"
            r.model = [_auto_decision(g, u, p, model, why, float(grid.t[0]))
                       for (g, u), p in zip(gpus, parts, strict=True)]
            for line in decision_lines(_shown(r.path), r.model):
                note(line)
            if model is None:
                continue
            start = float(until.min())
            held = {u: float(x) for u, x in zip(grid.uuids, until, strict=True)}
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
                                rules=r.incidents, judge_from=held)
        r.incidents = sorted([*r.incidents, *found], key=lambda i: i.started_at)


def _auto_decision(gpu: str, uuid: str, part: Part, model: Model | None, why: str | None,
                   t0: float) -> Decision:
    """One GPU's ``--model auto`` decision (``why``: the fit of the log failed)."""
    share = f"{AUTO_FRACTION * 100:.0f} %"
    if part.until is not None and model is not None:
        return Decision(gpu, uuid, "fitted", f"fitted on the first {share} of its busy time",
                        part.busy_min, t0, part.until)
    if why is None or part.until is None:
        why = (f"declined: {part.total_min:.0f} busy minutes in the log; a fit needs "
               f"{AUTO_BUSY_MIN:.0f} in the first {share} of a GPU's busy time "
               f"({AUTO_BUSY_MIN / AUTO_FRACTION:.0f} in all)")
    return Decision(gpu, uuid, "declined", f"{why}; not judged by the model",
                    part.busy_min, t0, part.until)


class _Upto:
    """An engagement timeline seen only up to ``until`` (s): the stage judges the windows
    the agent would have judged before a rule's transition at that time."""

    def __init__(self, engaged: Engagement, until: float) -> None:
        self._engaged = engaged
        self.until = min(until, engaged.until)

    def at(self, t: float) -> set[str]:
        return self._engaged.at(t)


class _Held:
    """An engagement timeline on which each GPU is also held (not judged) before its own
    time in ``judge_from`` (the part ``--model auto`` fitted it on; ``inf``: declined)."""

    def __init__(self, engaged: Engagement, judge_from: dict[str, float]) -> None:
        self._engaged = engaged
        self.until = engaged.until
        self._from = judge_from

    def at(self, t: float) -> set[str]:
        return self._engaged.at(t) | {u for u, x in self._from.items() if t < x}


def judge_recording(model: Model, grid: F.Grid, host: str,
                    engaged: Engagement | None = None, *,
                    start: float | None = None, feats: Array | None = None,
                    rules: list[Incident] | None = None,
                    judge_from: dict[str, float] | None = None) -> list[Incident]:
    """The anomaly incidents of a recording on its grid: the windows go through the one
    scoring stage (:class:`~watchdog.anomaly.stage.AnomalyStage`), judged as the agent
    would have judged them tick by tick, skipping GPUs where the detector had a rule
    pending or firing (``engaged``: its timeline; None: no rules ran). ``start``: ticks
    before it are not judged (the part ``--model auto`` fitted on).

    ``rules``: the recording's rule incidents. Then the anomalies meet them as the agent's
    do (:class:`~watchdog.anomaly.handover.Handover`, one page per problem): the windows
    are judged up to each rule transition, then the transition goes in; an anomaly a rule
    took over is left out of the list returned (it is in the rule's evidence).

    ``judge_from``: per GPU uuid, the time it is judged from (``inf``: never); before
    it the GPU is held as if a rule were engaged on it (its own fit part, a declined GPU)."""
    from watchdog.anomaly.handover import Handover
    from watchdog.anomaly.stage import NEVER, AnomalyStage

    stage = AnomalyStage(model, host, grid.step, start=start)
    stage.add_grid(grid, feats)
    timeline = engaged if engaged is not None else NEVER
    if judge_from:
        timeline = _Held(timeline, judge_from)
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
