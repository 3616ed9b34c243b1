"""The node's job in a window: its member GPUs, their peers, and whether it waits.

* **Peers among the job's GPUs** (:func:`job_peers`). :mod:`.features` compares a GPU
  with the median of every GPU of the node: right while one job holds them all, wrong for
  a job on 4 of 8 GPUs, whose median falls between the working and the unused ones. A GPU
  belongs to the job when it works or holds memory (:data:`~.gate_limits.MEMBER_MEM`);
  when some GPUs do not, the peer features are taken again against the median of the
  members at work (0 with fewer than two, as on a 1-GPU node), and ``peer_util_drops`` and
  ``peer_temp_drift`` (against the whole node's median) read as unknown. The fit takes
  its windows through the same function (:func:`watchdog.anomaly.train.fit`): the model
  learns the peers it is judged on.
* **A job in a checkpoint** (:func:`adjust`). A member that holds its memory without
  working (under :data:`~.gate_limits.IDLE_UTIL`: rank 0 writing, every rank paused)
  while others work, or most working members under :data:`~.gate_limits.SPIN_POWER`
  (spinning in a collective while a writer on another node finishes): the job waits, and
  no member is judged until it is back (then the checkpoint's grace). A hang is the
  rules' to name; on a 1-GPU node there is no collective to wait in, and a power drop
  there is judged.
* **Drift with a history.** ``peer_temp_drift`` looks back 10 min: it reads as unknown for
  that long after the job's GPUs changed or a GPU's grace began (a warm-up, a new job).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly.gate_limits import IDLE_UTIL, MEMBER_MEM, SPIN_POWER
from watchdog.anomaly.gate_state import GateState
from watchdog.untyped import Array


def job_peers(feats: Array) -> Array:
    """``(..., G, F)`` features with the peer features taken among the job's GPUs (see the
    module docs): where some GPUs of a window neither work nor hold memory, each member's
    peer features against the median of the members at work (0 with fewer than two), a
    non-member's unknown (NaN), and ``peer_util_drops`` and ``peer_temp_drift`` unknown on
    every GPU. The rest is ``feats`` itself (a copy only where something is taken again)."""
    busy = F.busy(feats.reshape(-1, *feats.shape[-2:])).reshape(feats.shape[:-1])
    mem = feats[..., F.INDEX["mem_ratio"]]
    with np.errstate(invalid="ignore"):
        member = busy | (mem >= MEMBER_MEM)
    part = member.any(axis=-1) & ~member.all(axis=-1)  # (...): windows to take again
    if not part.any():
        return feats
    out = feats.copy()
    sub = out[part]  # (N, G, F)
    mem_k, busy_k = member[part], busy[part]
    ref = mem_k & busy_k
    n_ref = ref.sum(axis=-1, keepdims=True)
    for name, base in F.PEERS.items():
        x = sub[..., F.INDEX[base]]
        med = F.row_median(np.where(ref, x, np.nan))
        peer = np.where(n_ref < 2, np.where(np.isnan(x), np.nan, 0.0), x - med)
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
    mem = feats[:, F.INDEX["mem_ratio"]]
    with np.errstate(invalid="ignore"):
        member = busy | (mem >= MEMBER_MEM)
    members = frozenset(u for u, m in zip(uuids, member, strict=True) if m)
    if members != gs.members:
        gs.members = members
        gs.drift_from = t
    out = job_peers(feats)
    pausing: set[str] = set()
    pf = feats[:, F.INDEX["power_frac"]]
    util = feats[:, F.INDEX["util_mean"]]
    with np.errstate(invalid="ignore"):
        spin = busy & (pf < SPIN_POWER)
        idle = np.where(np.isnan(util), ~busy, util < IDLE_UTIL)
    if len(uuids) > 1 and (((member & idle).any() and (member & busy).any())
                           or 2 * spin.sum() > max(1, (member & busy).sum())):
        pausing = set(members)
        for u in members:
            gs.gpus[u].idle_since = gs.gpus[u].idle_since or t
    lookback = F.LOOKBACK_S + F.WINDOW_S
    stale = [g for g, u in enumerate(uuids)
             if t - max(gs.drift_from, gs.gpus[u].drift_from) < lookback]
    if stale:
        out = out.copy() if out is feats else out
        out[stale, F.INDEX["peer_temp_drift"]] = np.nan
    return out, pausing
