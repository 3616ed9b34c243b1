"""The node's job (:mod:`watchdog.anomaly.job`): its members' peers, and a job waiting in
a checkpoint."""

from __future__ import annotations

import numpy as np
from anomaly_helpers import sim_grid
from gate_helpers import (
    idle,
    skipped_for,
    steady,
    walk,
)

from watchdog.anomaly import features as F
from watchdog.anomaly import gate_limits as L
from watchdog.anomaly import grace, job
from watchdog.anomaly.gate import Gate


def test_a_job_that_waits_in_a_checkpoint_is_not_judged() -> None:
    """Rank 0 writes (holds memory, does not work): the others spin waiting for it."""
    model, uuids, row = steady()
    times = [1000.0 + 10 * k for k in range(60)]
    writes = (1300.0, 1400.0)
    windows = [(t, idle(row, [0]) if writes[0] <= t < writes[1] else row, set())
               for t in times]
    skips = walk(Gate(model), windows)
    assert set(uuids) <= skips[times.index(1350.0)]
    for u in uuids:  # the writer and the ranks that waited: the first minute after it
        assert skipped_for(skips, times, u, writes[1]) == L.CKPT_GRACE_S

def test_the_peers_of_a_job_on_part_of_the_node_are_its_working_members() -> None:
    """``job_peers``: two GPUs work (0.8 and 0.6 of the limit), one holds memory idle,
    one is unused. Each member is compared with the median of the members at work; the
    unused GPU has no peers; the drift and drop counts against the whole node read
    unknown. A node whose GPUs all belong to the job is left as it is."""
    pf, pp, ut, mr = (F.INDEX[k] for k in ("power_frac", "peer_power", "util_mean",
                                           "mem_ratio"))
    x = np.zeros((4, len(F.FEATURES)))
    x[:, pf] = [0.8, 0.6, 0.1, 0.1]
    x[:, ut] = [100.0, 100.0, 0.0, 0.0]
    x[:, mr] = [0.9, 0.9, 0.5, 0.01]
    x[:, pp] = 99.0
    got = job.job_peers(x[None])[0]
    assert np.allclose(got[:3, pp], [0.1, -0.1, 0.1 - 0.7]) and np.isnan(got[3, pp])
    assert np.isnan(got[:, F.INDEX["peer_temp_drift"]]).all()
    assert np.isnan(got[:, F.INDEX["peer_util_drops"]]).all()
    one = x.copy()
    one[1, ut], one[1, mr] = 0.0, 0.01  # one GPU at work alone: no peers, 0
    got = job.job_peers(one[None])[0]
    assert got[0, pp] == 0.0 and np.isnan(got[1, pp])
    full = x.copy()
    full[3, mr] = 0.5
    assert job.job_peers(full[None]) is not None and np.array_equal(
        job.job_peers(full[None])[0], full)

def test_the_fit_learns_the_peers_it_is_judged_on_where_some_gpus_idle() -> None:
    """On a node where 2 of 4 GPUs never work, the whole node's median falls between the
    working and the idle GPUs (peer_power +0.35); the gate judges the members' own
    median (0), so the model learns that: a range of +0.35 would hide a working GPU
    falling 0.35 of its limit from its peers."""
    from watchdog.anomaly import train

    g, feats = sim_grid("sim:healthy", 40.0, seed=1)
    x = feats.copy()
    for k in (2, 3):
        x[:, k, F.INDEX["util_mean"]] = 0.0
        x[:, k, F.INDEX["power_frac"]] = 0.1
        x[:, k, F.INDEX["mem_ratio"]] = 0.0
    busy = x[:, :2, F.INDEX["power_frac"]]
    x[:, :2, F.INDEX["peer_power"]] = busy - np.median(np.concatenate(
        [busy, np.full_like(busy, 0.1)], axis=1), axis=1)[:, None]
    assert np.nanmedian(x[:, :2, F.INDEX["peer_power"]]) > 0.2  # the whole node's peers
    model, _ = train.fit(x, step=g.step, t=g.t, gpu_model="x", uuids=g.uuids)
    assert model.hi[F.INDEX["peer_power"]] < 0.1

def test_a_member_at_work_under_the_busy_line_waits_for_nothing() -> None:
    """A job waits (no member judged) while one of its members holds memory without
    working: under IDLE_UTIL. Another job's GPU at 47-56 % (under the model's busy line
    of 50 %, real-wandb ghln1e4f) kept the node's job unjudged whenever it dipped."""
    model, uuids, row = steady()
    for util, waits in ((L.IDLE_UTIL - 0.5, True), (L.IDLE_UTIL + 0.5, False),
                        (47.0, False)):
        x = row.copy()
        x[3, F.INDEX["util_mean"]] = util
        gate = Gate(model)
        _raw, pausing, _grace = grace.transit(gate.state, 100.0, uuids, x, F.valid_rows(x[None])[0],
                                              set())
        assert (pausing == set(uuids)) is waits, util
