"""The node's job (:mod:`watchdog.anomaly.job`): its members' peers, and a job waiting in
a checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
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
from watchdog.detect.evaluate import JOB_MEMORY_PTS

JOB_MEM = JOB_MEMORY_PTS / 100.0  # of the memory: one job's ranks, apart


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

def test_another_jobs_idle_gpu_does_not_hold_this_job_waiting() -> None:
    """A GPU holding memory without working waits for its job only when it is the job's
    (its share of memory within JOB_MEM of the working GPUs'). Another process's GPU
    holding 17 % idle beside a 2-GPU job at 96 % (real-wandb LeonGuertler) held that job
    unjudged for the whole run."""
    model, uuids, row = steady()
    mem = F.INDEX["mem_ratio"]
    times = [1000.0 + 10 * k for k in range(40)]
    for apart, waits in ((JOB_MEM - 0.01, True), (JOB_MEM + 0.01, False)):
        x = idle(row, [0])
        x[0, mem] = float(np.min(row[1:, mem])) - apart
        assert x[0, mem] >= L.MEMBER_MEM and np.ptp(row[1:, mem]) < 0.01
        skips = walk(Gate(model), [(t, x, set()) for t in times])
        judged = [set(uuids[1:]).isdisjoint(skip) for skip in skips[-10:]]
        assert (not any(judged)) if waits else all(judged), apart


def test_the_peers_of_a_job_on_part_of_the_node_are_its_working_members() -> None:
    """``job_peers``: three GPUs work (0.8, 0.7 and 0.6 of the limit), one holds the job's
    memory idle (a rank writing), one is unused. Each member is compared with the median
    of the members at work; the unused GPU has no peers; the drift and drop counts against
    the whole node read unknown. A node whose GPUs all belong to the job is left as it is."""
    pf, pp, ut, mr = (F.INDEX[k] for k in ("power_frac", "peer_power", "util_mean",
                                           "mem_ratio"))
    x = np.zeros((5, len(F.FEATURES)))
    x[:, pf] = [0.8, 0.7, 0.6, 0.1, 0.1]
    x[:, ut] = [100.0, 100.0, 100.0, 0.0, 0.0]
    x[:, mr] = [0.9, 0.9, 0.9, 0.9, 0.01]
    x[:, pp] = 99.0
    got = job.job_peers(x[None])[0]
    assert np.allclose(got[:4, pp], [0.1, 0.0, -0.1, 0.1 - 0.7]) and np.isnan(got[4, pp])
    assert np.isnan(got[:, F.INDEX["peer_temp_drift"]]).all()
    assert np.isnan(got[:, F.INDEX["peer_util_drops"]]).all()
    one = x.copy()
    one[1:3, ut], one[1:3, mr] = 0.0, 0.01  # one GPU at work alone: no peers, 0
    got = job.job_peers(one[None])[0]
    assert got[0, pp] == 0.0 and np.isnan(got[1, pp])
    full = x.copy()
    full[4, mr] = 0.9
    assert np.array_equal(job.job_peers(full[None])[0], full)


def test_a_gpu_has_peers_when_its_job_has_peers_min_at_work() -> None:
    """With two GPUs at work their median is the midpoint, and each departs from it by
    half their difference: the healthy GPU as much as the faulty one. A job with fewer
    than PEERS_MIN GPUs at work has no peers (0), a whole node's included; with
    PEERS_MIN it has."""
    pf, pp, ut, mr = (F.INDEX[k] for k in ("power_frac", "peer_power", "util_mean",
                                           "mem_ratio"))
    n = L.PEERS_MIN
    x = np.zeros((n, len(F.FEATURES)))
    x[:, pf] = np.linspace(0.8, 0.5, n)
    x[:, ut], x[:, mr] = 100.0, 0.9
    x[:, pp] = x[:, pf] - np.median(x[:, pf])
    assert np.array_equal(job.job_peers(x[None])[0], x)  # PEERS_MIN at work: as it is
    fewer = x.copy()
    fewer[-1, ut], fewer[-1, pf] = 0.0, 0.1  # one fewer at work (still the job's)
    got = job.job_peers(fewer[None])[0]
    assert (got[:, pp] == 0.0).all()
    assert np.isnan(got[:, F.INDEX["peer_temp_drift"]]).all()


def test_two_jobs_on_one_node_are_each_their_own_peers() -> None:
    """Six GPUs at work in two jobs, told apart by the memory each holds (0.9 and 0.4 of
    it): each GPU is compared with its own job's median, not the node's. A job whose ranks
    hold memory JOB_MEM apart is one job; further apart, two."""
    pf, pp, ut, mr = (F.INDEX[k] for k in ("power_frac", "peer_power", "util_mean",
                                           "mem_ratio"))
    x = np.zeros((6, len(F.FEATURES)))
    x[:, pf] = [0.8, 0.7, 0.6, 0.4, 0.3, 0.2]
    x[:, ut] = 100.0
    x[:, mr] = [0.9, 0.9, 0.9, 0.4, 0.4, 0.4]
    got = job.job_peers(x[None])[0]
    assert np.allclose(got[:, pp], [0.1, 0.0, -0.1, 0.1, 0.0, -0.1])
    near = x.copy()
    near[:, mr] = [0.9, 0.9 - JOB_MEM + 1e-9, 0.9, 0.9, 0.9, 0.9]
    assert np.array_equal(job.job_peers(near[None])[0], near)  # one job: left as it is
    far = x.copy()
    far[:, mr] = [0.9, 0.9 - JOB_MEM - 1e-3, 0.9, 0.9, 0.9, 0.9]
    got = job.job_peers(far[None])[0]
    assert got[1, pp] == 0.0  # its own job, alone
    assert np.isclose(got[0, pp], 0.8 - 0.4)  # the median of 0.8, 0.6, 0.4, 0.3, 0.2
    unread = x.copy()
    # a GPU whose memory is not read takes every GPU for its job (as the rules do); the
    # others, whose memory is read, do not count it
    unread[:, mr] = [0.9, np.nan, 0.9, 0.4, 0.4, 0.4]
    got = job.job_peers(unread[None])[0]
    assert np.isclose(got[1, pp], 0.7 - 0.5)  # the median of all six
    assert got[0, pp] == 0.0  # its job: 0.8 and 0.6, fewer than PEERS_MIN
    assert np.isclose(got[3, pp], 0.4 - 0.3)  # its job: 0.4, 0.3, 0.2


def test_the_model_takes_jobs_as_the_rules_do() -> None:
    """One line between two jobs for the rules' peer functions and the model's peers: on
    random windows (members, shares of memory, some unread), the model's jobs are the
    rules' ``same_job`` for GPUs whose membership agrees."""
    from watchdog.detect.evaluate import JOB_MIN_MIB, same_job

    rng = np.random.default_rng(5)
    x = np.zeros((40, 6, len(F.FEATURES)))
    x[..., F.INDEX["util_mean"]] = rng.choice([0.0, 100.0], (40, 6))
    mem = rng.choice([0.01, 0.4, 0.42, 0.46, 0.9, np.nan], (40, 6))
    x[..., F.INDEX["mem_ratio"]] = mem
    member, jobs = job.jobs_of(x, F.busy(x))
    used = np.where(member, JOB_MIN_MIB, 0.0)
    used[np.isnan(mem)] = np.nan  # unread as the rules see it
    rules = same_job(100.0 * mem, used)
    both = member[:, :, None] & member[:, None, :]
    assert np.array_equal(jobs & both, rules & both)
    assert (jobs & both).sum() < both.sum()  # some members are in other jobs


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


def test_job_peers_in_chunks_is_job_peers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long fit is taken in chunks of CHUNK_CELLS: the same features as at once."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 1.0, (50, 4, len(F.FEATURES)))
    x[..., F.INDEX["util_mean"]] = rng.choice([0.0, 100.0], (50, 4))
    x[..., F.INDEX["mem_ratio"]] = rng.choice([0.01, 0.4, 0.9], (50, 4))
    whole = job.job_peers(x)
    monkeypatch.setattr(job, "CHUNK_CELLS", 3 * 16)
    np.testing.assert_array_equal(job.job_peers(x), whole)
    assert not np.array_equal(whole, x)  # something was taken again
