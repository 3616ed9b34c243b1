"""The gate: which GPUs the model judges in a window, and against which normal.

The model learns one node's normal work. A real node changes jobs several times a day,
restarts, sits in checkpoints and warms up after them; none of that is a fault, and the
scoring stage (:mod:`watchdog.anomaly.stage`) asks the gate, window by window, which GPUs to
judge and against which normal. It sees only what the stage judges (each window's
features, the model's scores, the GPUs a rule holds), in data-time order, so replay and
the live agent take the same decisions (``tests/test_anomaly_stage.py``).

:class:`Gate` runs the decisions in order, each a module of functions over the gate's state
(:mod:`.gate_state`; limits and their reasons in :mod:`.gate_limits`):

1. :mod:`.grace`: start-up, warm-up, checkpoints and the recovery after a rule are not
   judged; a GPU whose temperature follows a power step is judged without it;
2. :mod:`.job`: the peers are the job's GPUs; a job waiting in a checkpoint is not judged;
3. :mod:`.alone`: a GPU working alone drawing less than it drew at the same activity;
4. :mod:`.relearn`: while a workload change settles nobody of it is judged, then its new
   normal is learned as offsets;
5. :mod:`.consensus`: most of the node departing together is the workload, and a GPU
   whose own work changed started a job; and :mod:`.phases`: a known normal or a phase of
   the job seen before is taken at once;
6. the windows judged normal move each GPU's references.

``workload_changed_at`` and ``workload_change`` (the reason) go to ``watchdog status``;
each change and each re-learned normal is a log line (:attr:`Gate.events`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from watchdog.anomaly import alone, consensus, grace, phases, relearn
from watchdog.anomaly import features as F
from watchdog.anomaly.gate_limits import CONSENSUS_WINDOWS
from watchdog.anomaly.gate_state import GateState, GpuState
from watchdog.untyped import Array, JsonDoc

if TYPE_CHECKING:
    from watchdog.anomaly.model import Model


class Gate:
    """Decides, window by window, which GPUs are judged and with which feature offsets.

    :meth:`step` takes one judged window (completed features ``(G, F)``, the model's raw
    scores ``(G,)``, the GPUs a rule holds) and returns the features and scores to judge
    with and the GPUs not to judge."""

    def __init__(self, model: Model | None) -> None:
        self.state = GateState(model)

    @property
    def model(self) -> Model | None:
        return self.state.model

    @property
    def gpus(self) -> dict[str, GpuState]:
        return self.state.gpus

    @property
    def events(self) -> list[tuple[float, str]]:
        """``(t, line)``: workload changes and re-learned normals, for the log."""
        return self.state.events

    def set_model(self, model: Model | None) -> None:
        """A refit: learned normals were offsets against the old model, so they go."""
        gs = self.state
        gs.model = model
        gs.normals, gs.current = [{}], {}
        relearn.end(gs)
        for st in gs.gpus.values():  # a fall was judged against an offset that went
            st.fell = False

    def observe(self, t: float, uuids: Sequence[str], feats: Array,
                engaged: set[str] | frozenset[str]) -> None:
        """A window seen but not judged (before the model, or the part it was fitted on):
        only the GPUs' transitions follow it."""
        grace.transit(self.state, t, uuids, feats, F.valid_rows(feats[None])[0], engaged)

    def step(self, t: float, uuids: Sequence[str], feats: Array, scores: Array,
             engaged: set[str] | frozenset[str]
             ) -> tuple[Array, Array, set[str]]:
        """``(feats, scores, skip)``: the window to judge (offsets applied), its scores,
        and the GPUs not to judge at ``t`` (a rule holds them, a grace or a re-learning
        runs, or the node departs together)."""
        gs = self.state
        busy = F.valid_rows(feats[None])[0]
        raw, pausing, in_grace = grace.transit(gs, t, uuids, feats, busy, engaged)
        raw = alone.slowed(gs, uuids, raw, busy, engaged)
        real = raw  # the transitions and the re-learning see the real trends
        raw = grace.lag(gs, t, uuids, raw)
        skip: set[str] = set(engaged) | pausing | in_grace
        # a lag is no fault, but the departure it is part of may be a new job's; peers
        # re-taken among the job's GPUs (``real`` is not ``feats``): apply scores that
        feats, s_real = relearn.apply(gs, uuids, real, scores if real is feats else None,
                                      gs.current)
        scores = s_real
        if raw is not real:
            feats, scores = relearn.apply(gs, uuids, raw, None, gs.current)
        thr = gs.fitted.threshold
        judged = [g for g, u in enumerate(uuids) if busy[g] and u not in engaged]
        if gs.relearn is not None:
            steady = [g for g in judged if uuids[g] not in skip]  # no grace, no checkpoint
            settling = gs.settling()
            skip |= settling
            working = [g for g in judged if uuids[g] not in pausing]
            relearn.collect(gs, t, uuids, real, steady, working)
            judged = [g for g in judged if uuids[g] not in settling]
        above = [g for g in judged if scores[g] > thr]
        if len(judged) >= 2 and 2 * len(above) > len(judged):
            feats, scores, skip = consensus.node_departs(gs, t, uuids, raw, feats, scores,
                                                         judged, skip)
        elif len(above) >= 2 and 3 * len(above) >= len(judged):
            # a third of the node moves: unsettled, nobody judged; held, those GPUs'
            # workload changed (a job on part of the node, or part of it re-learned)
            gs.consensus += 1
            skip |= {uuids[g] for g in judged}
            skip |= consensus.moved(gs, t, uuids, raw, above)
            if gs.consensus >= CONSENSUS_WINDOWS and gs.relearn is None:
                phases.change(gs, t, {uuids[g] for g in above},
                              f"{len(above)} of {len(judged)} busy GPUs left their normal "
                              "together")
        else:
            gs.consensus = 0
            if len(judged) == 1 and above:  # alone: a phase of its job it learned before
                alt = phases.known(gs, uuids, raw, above)
                if alt is not None:
                    feats, scores = alt
                    above = [g for g in above if scores[g] > thr]
                skip |= phases.phase(gs, t, uuids, feats, above)
            moved = sorted(set(above) | {g for g in judged if s_real[g] > thr})
            skip |= consensus.moved(gs, t, uuids, raw, moved, solo=len(judged) == 1)
            skip |= consensus.not_alone(uuids, scores, judged, above)
            skip |= consensus.throttled(gs, uuids, feats, above)
            if len(judged) >= 2:
                skip |= consensus.with_peers(gs, uuids, feats, above)
        for g, u in enumerate(uuids):
            if g not in above:
                gs.gpus[u].moved = 0
        q = float(gs.fitted.calibration.get("in_sample_q", thr))
        for g in judged:  # a window like the training's (not one just under the threshold)
            if uuids[g] not in skip and scores[g] <= q and relearn.inside(gs.fitted, feats[g]):
                consensus.remember(gs, uuids[g], raw[g])
        return _for_runner(feats, raw), scores, skip

    def status(self) -> JsonDoc:
        """For ``watchdog status``: the last workload change (data time) and its reason."""
        gs = self.state
        return {"workload_changed_at": gs.workload_changed_at,
                "workload_change": gs.workload_change,
                "relearning": gs.relearn is not None}


def _for_runner(feats: Array, raw: Array) -> Array:
    """The features the runner explains: shifted, but with the GPU's own utilization (the
    runner judges only a GPU at work, by its real utilization)."""
    if feats is raw:
        return raw
    out = feats.copy()
    k = F.INDEX["util_mean"]
    out[:, k] = raw[:, k]
    return out
