"""Persistence, suppression by the rules, explanations, and what training teaches."""

from __future__ import annotations

import warnings

import numpy as np
from anomaly_helpers import healthy_model, sim_grid

from watchdog.anomaly import explain, runner, train
from watchdog.anomaly import features as F
from watchdog.anomaly.model import Model
from watchdog.anomaly.offline import judge_recording
from watchdog.detect.engaged import EngagedTimeline
from watchdog.incident import Incident

FAULT = "sim:hbm_sag(gpus=3)@5m"


def _found(model: Model, spec: str, incidents: list[Incident] = ()) -> list[Incident]:  # type: ignore[assignment]
    g, feats = sim_grid(spec, 20.0, seed=7)
    return judge_recording(model, g, "node", EngagedTimeline.of_incidents(incidents),
                           feats=feats)


def test_a_healthy_model_flags_an_unnamed_fault_and_explains_it() -> None:
    found = _found(healthy_model(), FAULT)
    assert found, "the HBM sag on GPU 3 was not flagged"
    first = found[0]
    assert first.kind == "anomaly" and first.gpus == ["3"]
    assert first.fired_at is not None and first.fired_at - 1_767_225_600.0 < 300 + 180
    top = first.evidence["features"]
    assert top[0]["feature"] in ("mem_clock_frac", "peer_mem_clock")
    assert top[0]["observed"] < top[0]["normal"]
    assert "memory clock" in first.summary and first.summary.startswith("GPU 3:")
    assert "(normal 100% of max)" in first.summary


def test_a_model_trained_on_the_fault_takes_it_for_normal() -> None:
    g, feats = sim_grid("sim:hbm_sag(gpus=3)@0", 60.0, seed=1)
    fault_model, _ = train.fit(feats, step=g.step, t=g.t, gpu_model="x")
    found = _found(fault_model, FAULT)
    assert not [i for i in found if i.gpus == ["3"] and "memory clock" in i.summary]


def test_no_anomaly_where_a_rule_is_pending_or_firing() -> None:
    g, _feats = sim_grid(FAULT, 20.0, seed=7)
    uuid = g.uuids[3]
    rule = Incident(kind="straggler", severity="warning", host="node", gpus=["3"],
                    uuids=[uuid], started_at=float(g.t[0]), fired_at=None, resolved_at=None,
                    rule="straggler", summary="")
    assert not [i for i in _found(healthy_model(), FAULT, [rule]) if i.gpus == ["3"]]


def test_persistence_needs_k_of_n_checks() -> None:
    model = healthy_model()
    r = runner.Runner(model, "node", k=3, n=4)
    _, feats = sim_grid(FAULT, 20.0, seed=7)
    bad = feats[-1]
    ok = feats[200]  # before the onset
    assert model.scores(bad[3:4])[0] > model.threshold > model.scores(ok[3:4])[0]
    uuids, idx = ["a", "b", "c", "d"], [0, 1, 2, 3]
    seq = [bad, ok, ok, bad, ok, bad]  # never 3 of the last 4
    assert not any(r.step(float(i), uuids, idx, f) for i, f in enumerate(seq))
    out = r.step(6.0, uuids, idx, bad)
    assert [(w, i.gpus) for w, i in out] == [("firing", ["3"])]
    assert r.step(7.0, uuids, idx, bad, engaged={"d"}) == []  # engaged: not judged


def test_explanation_names_observed_and_normal_in_units() -> None:
    model = healthy_model()
    row = np.array(model.center, dtype=float)
    row[F.INDEX["temp_mean"]] = model.center[F.INDEX["temp_mean"]] + 15.0
    row[F.INDEX["peer_temp"]] = 15.0
    top = explain.top_features(model, row)
    assert top[0]["feature"] in ("temp_mean", "peer_temp")
    peers = np.tile(model.center, (3, 1))
    text = explain.sentence(5, row, top, peers)
    assert text.startswith("GPU 5: temperature")
    assert "its peers sit at" in text and "airflow" in text
    # peers lagging a power step read their temperature as NaN: no peer context, and no
    # numpy warning on the agent's stderr (one log format)
    lagging = peers.copy()
    lagging[:, F.INDEX["temp_mean"]] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = explain.sentence(5, row, top, lagging)
    assert "its peers sit at" not in text and "airflow" in text


def test_a_coarse_fit_is_calibrated_on_what_the_held_out_part_held_as_the_runner_pages() -> None:
    """The level a GPU held in 4 of 6 consecutive 10 s checks, not its single highest
    window: a 20 s blip (two checks) does not count, a level held 40 s does, and the
    checks of two GPUs are never mixed."""
    tick = np.arange(0, 600, 5)  # every 5 s at a 1 s grid: checks are every other row
    calm = np.full(len(tick), 0.5)
    blip = calm.copy()
    blip[(tick >= 300) & (tick < 320)] = 1.5  # two checks
    assert train.persistent(blip, tick, np.zeros(len(tick), int), 1.0) == 0.5
    held = calm.copy()
    held[(tick >= 300) & (tick < 340)] = 1.5  # four checks
    assert train.persistent(held, tick, np.zeros(len(tick), int), 1.0) == 1.5
    # the same four checks split between two GPUs (two each): no GPU held it
    both = np.concatenate([blip, np.where((tick >= 320) & (tick < 340), 1.5, 0.5)])
    gpu = np.repeat([0, 1], len(tick))
    assert train.persistent(both, np.concatenate([tick, tick]), gpu, 1.0) == 0.5


def test_a_page_after_a_job_change_shows_what_the_gpu_reads_against_its_jobs_normal() -> None:
    """The gate judges a re-learned job's GPUs less the job's offsets; the page shows the
    level as the GPU reads it and the job's normal (the training's plus the offset), not
    "power 23% of its limit (normal 41%)" for a GPU reading 64 %. The context (its
    temperature and power, its peers') is the GPU's own reading too."""
    model = healthy_model()
    k = F.INDEX["power_frac"]
    judged = np.tile(np.array(model.center, dtype=float), (2, 1))
    judged[0, k] = float(model.lo[k]) - 0.03  # judged: under the range
    raw = judged.copy()
    raw[:, k] += 0.2  # the job runs 0.2 of its limit higher than the training
    raw[:, F.INDEX["temp_mean"]] += 12.0
    judged[0, F.INDEX["temp_mean"]] += 40.0  # a temperature fault, first in the ranking
    raw[0, F.INDEX["temp_mean"]] = judged[0, F.INDEX["temp_mean"]]
    r = runner.Runner(model, "node", k=1, n=1)
    out = r.step(0.0, ["a", "b"], [0, 1], judged, scores=np.array([2.0, 0.1]), raw=raw)
    inc = out[0][1]
    shown = {i["feature"]: i for i in inc.evidence["features"]}
    item = shown["power_frac"]
    assert item["job"] and np.isclose(item["observed"], raw[0, k])
    assert np.isclose(item["normal"], model.center[k] + 0.2)
    want = f"power {raw[0, k] * 100:.0f}% of its limit (this job's normal " \
           f"{(model.center[k] + 0.2) * 100:.0f}% of its limit)"
    assert want in inc.summary, inc.summary
    assert inc.evidence["power_frac"] == want.removeprefix("power ")
    t = shown["temp_mean"]  # not moved by an offset: as judged, the training's normal
    assert "job" not in t and "(normal " in inc.summary
    assert inc.summary.startswith("GPU 0: temperature")
    assert f"at {raw[0, F.INDEX['temp_mean']]:.0f} C and {raw[0, k] * 100:.0f}% of its power" \
        in inc.summary
    assert f"its peers sit at {raw[1, F.INDEX['temp_mean']]:.0f} C" in inc.summary
    # without the raw window (replay's runner-only use): as judged
    r = runner.Runner(model, "node", k=1, n=1)
    inc = r.step(0.0, ["a", "b"], [0, 1], judged, scores=np.array([2.0, 0.1]))[0][1]
    assert not any(i.get("job") for i in inc.evidence["features"])


def test_less_power_for_the_same_work_is_named_before_the_warmth_it_causes() -> None:
    """A GPU drawing less power than its peers for the same work also sits above its own
    thermal line at that power; with both out of range the power comes first (the cause),
    however far own_temp lies. Without the power departure own_temp leads as it is."""
    model = healthy_model()
    k, p = F.INDEX["own_temp"], F.INDEX["peer_power"]
    row = np.array(model.center, dtype=float)
    row[k] = float(model.hi[k]) + 40 * float(model.unit[k])
    row[p] = float(model.lo[p]) - 2 * float(model.unit[p])
    assert explain.exceedance(model, row)[k] > explain.exceedance(model, row)[p]
    assert [i["feature"] for i in explain.top_features(model, row)][:2] == [
        "peer_power", "own_temp"]
    row[p] = float(model.center[p])
    assert explain.top_features(model, row)[0]["feature"] == "own_temp"


def test_one_reading_never_pages_where_a_window_holds_few_readings() -> None:
    """Sampled every 10 s, a window holds 6 readings: one reading (a dip of
    utilization) moves its features by a sixth and stays in 6 windows, so 4 of 6 checks
    hold for 40 s. There 4 of 6 must also have held a window (60 s) earlier: one dip
    does not page, nor a dip followed 30 s later by another odd window (a job's end);
    a lasting fault pages 60 s after 4 of 6 first held. Sampled every second, the first
    4 of 6 checks page as before."""
    import dataclasses

    model = healthy_model()
    _, feats = sim_grid(FAULT, 20.0, seed=7)
    bad, ok = feats[-1], feats[200]
    uuids, idx = ["a", "b", "c", "d"], [0, 1, 2, 3]

    def coarse() -> runner.Runner:
        return runner.Runner(dataclasses.replace(model, step=10.0), "node")

    for seq in ([bad] * 6 + [ok] * 6, [bad] * 6 + [ok] * 2 + [bad] + [ok] * 6):
        r = coarse()
        assert not any(r.step(1000.0 + 10 * i, uuids, idx, f) for i, f in enumerate(seq))
    r = coarse()
    fired = [i for i in range(15) if r.step(2000.0 + 10 * i, uuids, idx, bad)]
    assert fired[0] == runner.K_OF - 1 + 6  # 4 of 6 at the 4th window, and a window later
    fine = runner.Runner(model, "node")  # 1 s: 60 readings a window
    fired = [i for i in range(12) if fine.step(3000.0 + 10 * i, uuids, idx, bad)]
    assert fired[0] == runner.K_OF - 1
