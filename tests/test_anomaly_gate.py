"""The gate end to end (:mod:`watchdog.anomaly.gate`), through the one scoring stage
(:class:`~watchdog.anomaly.stage.AnomalyStage`): a workload change is not a fault, and a fault
after one pages. The job changes are the simulator's schedule of jobs
(``sources/sim/schedule.py``: a new model size, memory, precision after an idle spell or an
inference server); the faults are written into the simulated frame on one GPU (the readings a
failing GPU would give), so the same healthy node is judged with and without them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from anomaly_helpers import healthy_model
from gate_helpers import (
    CASES,
    FIT_H,
    job_change_node,
    judge_node,
)

from watchdog.anomaly import features as F
from watchdog.anomaly.offline import fit_grid
from watchdog.anomaly.stage import NEVER, AnomalyStage
from watchdog.sources.sim.schedule import Schedule


@pytest.mark.slow
@pytest.mark.parametrize(("gpus", "gm", "seed"), CASES)
def test_a_job_change_does_not_page_and_a_fault_after_it_does(gpus: int, gm: str,
                                                              seed: int) -> None:
    frame, change, t0 = job_change_node(gpus, gm, seed)
    assert change - t0 > FIT_H * 3600  # the model knows only the job before
    quiet, stage = judge_node(frame, t0)
    assert quiet == [], [i.summary for i in quiet]
    if gpus > 1:  # the new job left the old normal together: a workload change, said
        assert stage.gate.state.workload_changed_at is not None
    if stage.gate.state.workload_changed_at is not None:  # (a 1-GPU job may fit the old one)
        assert stage.gate.state.workload_changed_at >= change
    # the HBM of the last GPU slows to 80 % of its clock 12 min into the new job
    onset = change + 12 * 60
    bad = frame.copy()
    hit = (bad["index"] == gpus - 1) & (bad["ts"] >= onset)
    bad.loc[hit, "clocks.mem"] *= 0.8
    found, _ = judge_node(bad, t0)
    assert [i.gpus for i in found] == [[str(gpus - 1)]], [i.summary for i in found]
    assert onset <= found[0].fired_at <= onset + 300

@pytest.mark.slow
def test_a_power_drop_at_unchanged_work_after_a_job_change_pages_on_a_full_node() -> None:
    """Power at 65 % of its own at the same utilization and memory: the slowdown, never
    a job change."""
    frame, change, t0 = job_change_node(8, "h100-sxm", 3)
    onset = change + 12 * 60
    bad = frame.copy()
    hit = (bad["index"] == 7) & (bad["ts"] >= onset)
    bad.loc[hit, "power.draw"] *= 0.65
    found, _ = judge_node(bad, t0)
    assert [i.gpus for i in found] == [["7"]]
    assert found[0].fired_at - onset <= 180

@pytest.mark.slow
def test_a_power_drop_six_minutes_into_a_new_job_pages_once_the_node_settles() -> None:
    """The same slowdown while the node still settles (6 min into the new job), its
    temperature following its power down (the simulated part's C per W, tau 60 s): the
    re-learning must not take the fallen power as the job's normal (relearn.falls)."""
    from watchdog.testing.model_faults import slowdown_frame

    frame, change, t0 = job_change_node(8, "h100-sxm", 3)
    onset = change + 6 * 60
    bad = frame.copy()
    slowdown_frame(bad, 7, onset, "h100-sxm")
    found, _ = judge_node(bad, t0)
    assert [i.gpus for i in found] == [["7"]], [i.summary for i in found]
    assert found[0].fired_at - onset <= 300
    assert found[0].evidence["features"][0]["feature"] == "peer_power"

@pytest.mark.slow
def test_a_slowdown_six_minutes_into_a_new_job_pages_on_a_1_gpu_node() -> None:
    """The same slowdown on a GPU alone (no peers): its power at 65 % lies at a level the
    first job's lighter phase holds; what it drew at the same activity in the new job
    (alone.slowed) is what pages. The same node without it stays quiet (above)."""
    from watchdog.testing.model_faults import slowdown_frame

    frame, change, t0 = job_change_node(1, "a100-pcie", 6)
    onset = change + 6 * 60
    bad = frame.copy()
    slowdown_frame(bad, 0, onset, "a100-pcie")
    found, _ = judge_node(bad, t0)
    assert found and {tuple(i.gpus) for i in found} == {("0",)}, [i.summary for i in found]
    assert onset <= found[0].fired_at <= onset + 300
    assert found[0].evidence["features"][0]["feature"] == "own_power"

@pytest.mark.slow
@pytest.mark.parametrize(("gpus", "gm", "seed"), [(8, "h100-sxm", 3), (1, "a100-pcie", 6)])
def test_a_gpu_whose_work_comes_in_bursts_six_minutes_into_a_new_job_pages(
        gpus: int, gm: str, seed: int) -> None:
    """One tick in six at 30-60 % utilization on the last GPU, 6 min into a new job,
    while the node still settles: the re-learning takes the GPU's new levels as the
    job's, but never its rate of deep drops (``peer_util_drops`` is not shifted: a job
    moves its GPUs' drop rates together), and a GPU alone counts its own drops (no peers
    at work, whose rate is 0; before schema 5 a 1-GPU node read 0 and missed it)."""
    frame, change, t0 = job_change_node(gpus, gm, seed)
    onset = change + 6 * 60
    bad = frame.copy()
    hit = (bad["index"] == gpus - 1) & (bad["ts"] >= onset)
    tick = np.round(bad.loc[hit, "ts"].to_numpy() - onset).astype(int)
    util = bad.loc[hit, "utilization.gpu"].to_numpy()
    bad.loc[hit, "utilization.gpu"] = np.where(tick % 6 == 3, 30.0 + tick % 31, util)
    found, _ = judge_node(bad, t0)
    assert [i.gpus for i in found] == [[str(gpus - 1)]], [i.summary for i in found]
    assert onset <= found[0].fired_at <= onset + 300
    assert found[0].evidence["features"][0]["feature"] == "peer_util_drops"

def test_the_schedule_changes_jobs_every_few_hours() -> None:
    from watchdog.sources.sim.source import SimSource

    src = SimSource.from_spec("sim:healthy", gpus=8, model="h100-sxm", seed=1, start=0.0)
    sched = Schedule(src.job, 1, 168.0)
    jobs = [s for s in sched.segments if s.kind == "job"]
    lengths = [(s.end_s - s.start_s) / 3600 for s in jobs]
    assert 20 <= len(jobs) <= 90 and min(lengths) >= 2.0 and max(lengths) <= 8.0
    assert {len(s.gpus) for s in jobs} >= {8, 4}  # the whole node and half of it
    assert {s.kind for s in sched.segments} == {"job", "idle", "inference"}
    holds = {round(s.job.hold_frac[0], 2) for s in jobs}
    assert len(holds) > 10  # each job holds its own memory

@pytest.mark.slow
def test_a_fault_ten_seconds_after_a_one_minute_checkpoint_pages_within_two_minutes() -> None:
    """Every GPU pauses for 60 s (a checkpoint, as the simulator writes one: 0 %
    utilization, idle power and clocks, memory held); 10 s after it ends GPU 3's HBM
    slows to 80 % of its clock."""
    model = healthy_model()
    from watchdog.sources.sim.frames import simulate

    rec, _ = simulate("sim:healthy", duration=80 * 60.0, gpus=4, seed=1)
    frame = rec.frame.copy()
    t0 = float(frame["ts"].min())
    pause = (t0 + 65 * 60 + 5, t0 + 66 * 60 + 5)  # the simulated job's own: 54-56, 71-73 min
    onset = pause[1] + 10
    p = (frame["ts"] >= pause[0]) & (frame["ts"] < pause[1])
    frame.loc[p, "utilization.gpu"] = 0.0
    frame.loc[p, "power.draw"] = 90.0
    frame.loc[p, "clocks.sm"] = 345.0
    f = (frame["index"] == 3) & (frame["ts"] >= onset)
    frame.loc[f, "clocks.mem"] *= 0.8
    grid = F.grid_from_frame(frame)
    stage = AnomalyStage(model, "node", grid.step, start=t0 + 60 * 60)
    stage.add_grid(grid)
    stage.judge(NEVER)
    hits = [i for i in stage.incidents if i.gpus == ["3"] and i.fired_at >= onset]
    assert hits, [i.summary for i in stage.incidents]
    assert hits[0].fired_at - onset <= 120
    assert all(i.gpus == ["3"] for i in stage.incidents)

@pytest.mark.slow
def test_status_says_when_the_workload_changed(tmp_path: Any) -> None:
    """``watchdog status``'s model line names the last workload change the live hook's
    stage saw (the 8-GPU node's change of job), from the daemon's own status block."""
    from watchdog.anomaly import persist
    from watchdog.anomaly.auto import DaemonModel, ModelSettings
    from watchdog.records import Sample
    from watchdog.service.status import _model_line

    frame, change, t0 = job_change_node(8, "h100-sxm", 3)
    g = F.grid_from_frame(frame)
    model, _ = fit_grid(g, [], "NVIDIA H100 80GB HBM3", until=t0 + FIT_H * 3600)
    path = tmp_path / "m.wdm"
    persist.save(model, path)
    hook = DaemonModel(ModelSettings(str(path)), tmp_path / "state.wdm", "node", 1.0,
                       gpu_model=lambda: "NVIDIA H100 80GB HBM3")
    live = frame[frame["ts"] >= change - 15 * 60]
    metrics = [m for m in F.METRICS if m in live]
    for ts, rows in live.groupby("ts", sort=True):
        samples = [Sample(ts=float(ts), uuid=str(r["uuid"]), index=int(r["index"]),
                          values={m: float(r[m]) for m in metrics})
                   for _, r in rows.iterrows()]
        assert hook(float(ts), samples, NEVER) == []  # no page
    doc = hook.status()
    assert doc["workload_changed_at"] is not None and doc["workload_changed_at"] >= change
    line = _model_line(doc)
    assert "workload changed at " in line and doc["workload_change"] in line
