"""The node's job in a window: its member GPUs, their peers, and whether it waits.

* **Peers among the job's GPUs** (:func:`job_peers`). :mod:`.features` compares a GPU
  with the median of every GPU of the node: right while one job holds them all, wrong for
  a job on 4 of 8 GPUs, whose median falls between the working and the unused ones, or
  for two jobs side by side. A GPU belongs to a job when it works or holds memory
  (:data:`~.gate_limits.MEMBER_MEM`), and to the job of the GPUs whose share of memory
  lies within 5 points of its own (:func:`jobs_of`: the line the rules' peer functions
  draw, :func:`~watchdog.detect.evaluate.jobs_by_memory`; a data-parallel job's ranks hold
  nearly the same memory, while two jobs compared as one put a 13 % power drop inside the
  peers' normal on real-wandb stanford_alpaca).
  Where the node is not one job, or fewer than :data:`~.gate_limits.PEERS_MIN` of its
  GPUs work, the peer features are taken again against the median of the GPU's job's
  members at work (0 with fewer than :data:`~.gate_limits.PEERS_MIN`: two GPUs' median is
  their midpoint, from which the healthy one departs as far as the faulty one), and
  ``peer_util_drops`` and ``peer_temp_drift`` (against the whole node's median) read as
  unknown. The fit takes its windows through the same function
  (:func:`watchdog.anomaly.train.fit`): the model learns the peers it is judged on.
* **A job in a checkpoint** (:func:`adjust`). A member that holds its job's memory
  without working (under :data:`~.gate_limits.IDLE_UTIL`: rank 0 writing, every rank
  paused) while others of its job (:func:`jobs_of`) work: that job waits, and none of its
  GPUs is judged until it is back (then the checkpoint's grace). Another process's GPU
  idle at another share of memory does not hold the job (real-wandb LeonGuertler: 17 %
  held idle beside a 2-GPU job at 96 %, which went unjudged for the whole run). Most
  working members under :data:`~.gate_limits.SPIN_POWER` (spinning in a collective while
  a writer on another node finishes): every member waits. A hang is the
  rules' to name; on a 1-GPU node there is no collective to wait in, and a power drop
  there is judged.
* **Drift with a history.** ``peer_temp_drift`` looks back 10 min: it reads as unknown for
  that long after the job's GPUs changed or a GPU's grace began (a warm-up, a new job).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly.gate_limits import IDLE_UTIL, MEMBER_MEM, PEERS_MIN, SPIN_POWER
from watchdog.anomaly.gate_state import GateState
from watchdog.detect.evaluate import jobs_by_memory
from watchdog.untyped import Array


def jobs_of(feats: Array, busy: Array) -> tuple[Array, Array]:
    """``(member, jobs)`` of ``(..., G, F)`` windows whose GPUs at work are ``busy``
    (``(..., G)``): each GPU in a job (at work, or holding :data:`~.gate_limits.MEMBER_MEM`
    of its memory), and ``(..., G, G)`` which GPUs are in each member's job
    (:func:`~watchdog.detect.evaluate.jobs_by_memory`, the rules' line)."""
    mem = feats[..., F.INDEX["mem_ratio"]]
    with np.errstate(invalid="ignore"):
        member = busy | (mem >= MEMBER_MEM)
    return member, jobs_by_memory(100.0 * mem, member)


#: ``windows × GPUs × GPUs`` cells :func:`job_peers` takes at once: a fit's 100,000 windows
#: of a 64-GPU node would need 3.3 GB for one peer feature's cube
CHUNK_CELLS = 1 << 21


def job_peers(feats: Array) -> Array:
    """``(..., G, F)`` features with the peer features taken within each GPU's job (see
    the module docs): where the node is not one job of at least
    :data:`~.gate_limits.PEERS_MIN` GPUs at work (some GPUs neither work nor hold memory,
    the members hold memory in groups: :func:`jobs_of`, or fewer work), each member's
    peer features against the median of its job's members at work (0 with fewer than
    :data:`~.gate_limits.PEERS_MIN`), a non-member's unknown (NaN), and
    ``peer_util_drops`` and ``peer_temp_drift`` unknown on every GPU. The rest is
    ``feats`` itself (a copy only where something is taken again)."""
    g = feats.shape[-2]
    flat = feats.reshape(-1, g, feats.shape[-1])
    out: Array | None = None
    every = max(1, CHUNK_CELLS // (g * g))
    for lo in range(0, len(flat), every):
        chunk = flat[lo:lo + every]
        busy = F.busy(chunk)
        got = _job_peers(chunk, busy, *jobs_of(chunk, busy))
        if got is not None:
            if out is None:
                out = flat.copy()
            out[lo:lo + every] = got
    return feats if out is None else out.reshape(feats.shape)


def _job_peers(feats: Array, busy: Array, member: Array, jobs: Array) -> Array | None:
    """:func:`job_peers` of ``(W, G, F)`` features whose GPUs at work, members and jobs
    (:func:`jobs_of`) are given; None where nothing is taken again."""
    whole = (member.all(axis=-1) & jobs.all(axis=(-2, -1))
             & ((busy.sum(axis=-1) >= PEERS_MIN) | (feats.shape[-2] == 1)))
    part = member.any(axis=-1) & ~whole  # (W,): windows to take again
    if not part.any():
        return None
    out = feats.copy()
    sub = out[part]  # (N, G, F)
    mem_k, busy_k, jobs_k = member[part], busy[part], jobs[part]
    ref = jobs_k & busy_k[:, None, :]  # (N, j, k): k is a working member of j's job
    n_ref = ref.sum(axis=-1)
    n, g = ref.shape[:2]
    for name, base in F.PEERS.items():
        x = sub[..., F.INDEX[base]]  # (N, G)
        cube = np.where(ref, x[:, None, :], np.nan).reshape(n * g, g)
        med = F.row_median(cube).reshape(n, g)
        peer = np.where(n_ref < PEERS_MIN, np.where(np.isnan(x), np.nan, 0.0), x - med)
        sub[..., F.INDEX[name]] = np.where(mem_k, peer, np.nan)
    sub[..., F.INDEX["peer_util_drops"]] = np.nan
    sub[..., F.INDEX["peer_temp_drift"]] = np.nan
    out[part] = sub
    return out


def adjust(gs: GateState, t: float, uuids: Sequence[str], feats: Array,
           busy: Array) -> tuple[Array, set[str]]:
    """The window as the model should see it (:func:`job_peers`, a drift without its
    history unknown) and the GPUs of a job waiting in a checkpoint (whose idle spell then
    begins: their grace follows it)."""
    member, jobs = jobs_of(feats, busy)
    members = frozenset(u for u, m in zip(uuids, member, strict=True) if m)
    if members != gs.members:
        gs.members = members
        gs.drift_from = t
    got = _job_peers(feats[None], busy[None], member[None], jobs[None])
    out = feats if got is None else got[0]
    pausing: set[str] = set()
    pf = feats[:, F.INDEX["power_frac"]]
    util = feats[:, F.INDEX["util_mean"]]
    with np.errstate(invalid="ignore"):
        spin = busy & (pf < SPIN_POWER)
        idle = np.where(np.isnan(util), ~busy, util < IDLE_UTIL)
    if len(uuids) > 1:
        # an idle member whose job has a member at work: that job waits (its GPUs)
        waits = (member & idle) & (jobs & (member & busy)[None, :]).any(axis=1)
        waiting: Array = (member if 2 * spin.sum() > max(1, (member & busy).sum())
                          else np.asarray(jobs[waits].any(axis=0)))
        pausing = {u for u, w in zip(uuids, waiting, strict=True) if w}
        for u in pausing:
            gs.gpus[u].idle_since = gs.gpus[u].idle_since or t
    lookback = F.LOOKBACK_S + F.WINDOW_S
    stale = [g for g, u in enumerate(uuids)
             if t - max(gs.drift_from, gs.gpus[u].drift_from) < lookback]
    if stale:
        out = out.copy() if out is feats else out
        out[stale, F.INDEX["peer_temp_drift"]] = np.nan
    return out, pausing
