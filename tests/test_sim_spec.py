"""The ``sim:…`` spec grammar, its errors, default fault placement and the import path."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.errors import InputError
from watchdog.sources import SourceOptions, open_live
from watchdog.sources.base import LiveSource
from watchdog.sources.sim import SCENARIOS, SimSource, scenarios_for
from watchdog.sources.sim.spec import parse_gpus, parse_spec

START = 1_750_000_000.0


def test_plain_sim_is_a_healthy_live_source_opened_through_the_factory():
    src = open_live("sim", SourceOptions(sim_gpus=4, sim_seed=3), start=START)
    assert isinstance(src, SimSource) and isinstance(src, LiveSource)
    assert len(src.devices()) == 4 and src.ground_truth() == []
    assert len(src.sample(START + 1.0)) == 4


def test_items_parameters_and_onsets_are_parsed():
    reqs = parse_spec("sim:comm_hang(gpus=0-3,dead=2)@10m, xid(code=48)@90s,healthy")
    assert [r.name for r in reqs] == ["comm_hang", "xid", "healthy"]
    assert reqs[0].params == {"gpus": "0-3", "dead": "2"} and reqs[0].onset == 600.0
    assert reqs[1].params == {"code": "48"} and reqs[1].onset == 90.0
    assert reqs[2].params == {} and reqs[2].onset is None
    assert parse_spec("sim") == []


def test_gpu_lists():
    assert parse_gpus("0-1+6", 8, "x") == (0, 1, 6)
    assert parse_gpus("all", 3, "x") == (0, 1, 2)
    assert parse_gpus("5", 8, "x") == (5,)


@pytest.mark.parametrize(("spec", "needle"), [
    ("sim:comm_hnag", "unknown scenario 'comm_hnag'"),
    ("sim:xid(colour=3)", "unknown parameter 'colour'"),
    ("sim:stall@soon", "not a duration"),
    ("sim:ecc(gpus=9)", "GPU 9 does not exist"),
    ("sim:ecc(gpus=3-1)", "runs backwards"),
    ("sim:comm_hang(gpus=0-3,dead=5)", "among the hung ones"),
    ("sim:stall(gpus=0-1", "unbalanced"),
    ("sim:xid(code=4x)", "expected"),
    ("sim:pcie_degraded(width=16)", "full link"),
    ("sim:thermal_throttle(cooling=50)", "2..5"),
    ("sim:", "no scenario"),
    ("sim:healthy(gpus=1)", "unknown parameter"),
    ("sim:stall(for=)", "empty key or value"),
    ("sim:stall@9999h", "longer than a year"),
    ("sim:stall@" + "9" * 400, "is not a duration"),
])
def test_bad_specs_are_one_line_input_errors_naming_the_problem(spec, needle):
    with pytest.raises(InputError) as e:
        SimSource.from_spec(spec, gpus=8, start=START)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and e.value.exit_code == 2


def test_unknown_scenario_error_lists_every_valid_one():
    with pytest.raises(InputError) as e:
        SimSource.from_spec("sim:nope", start=START)
    for name in SCENARIOS:
        assert name in str(e.value)


def test_unknown_model_lists_valid_models():
    with pytest.raises(InputError, match=r"a100-pcie.*h100-sxm"):
        SimSource.from_spec("sim", model="v100", start=START)


def test_combined_scenarios_get_separate_gpus_and_staggered_onsets():
    src = SimSource.from_spec("sim:comm_hang,thermal_throttle", gpus=8, start=START)
    by_kind = {gt.kind: gt for gt in src.ground_truth()}
    assert by_kind["thermal_throttle"].gpus == (7,)
    assert by_kind["comm_hang"].gpus == (0, 1, 2, 3, 4, 5, 6)
    assert by_kind["comm_hang"].onset == START + 300.0
    assert by_kind["thermal_throttle"].onset == START + 900.0


def test_two_node_scenarios_split_the_node_and_single_gpu_ones_count_down():
    src = SimSource.from_spec("sim:comm_hang,stall", gpus=8, start=START)
    assert [gt.gpus for gt in src.ground_truth()] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    src = SimSource.from_spec("sim:ecc,xid,straggler", gpus=8, start=START)
    assert sorted(gt.gpus for gt in src.ground_truth()) == [(5,), (6,), (7,)]


def test_explicit_parameters_reach_the_ground_truth():
    src = SimSource.from_spec("sim:xid(code=48,gpus=5)@60,hw_slowdown(for=2m)@100",
                              gpus=8, start=START)
    xid, hw = src.ground_truth()
    assert (xid.kind, xid.gpus, xid.onset, xid.params["code"]) == ("xid", (5,), START + 60, 48)
    assert (hw.kind, hw.gpus, hw.onset, hw.end) == ("hw_slowdown", (7,), START + 100,
                                                    START + 220)
    assert xid.uuids == (src.devices()[5].uuid,)


def test_too_many_single_gpu_scenarios_for_the_node_is_an_error():
    with pytest.raises(InputError, match="no GPU left"):
        SimSource.from_spec("sim:ecc,xid,straggler", gpus=2, start=START)


def test_the_sim_package_does_not_import_pandas_or_numpy():
    code = ("import sys; from watchdog.sources.sim import SimSource; "
            "s = SimSource.from_spec('sim:comm_hang', start=0.0); s.sample(400.0); "
            "print(sorted(m for m in ('pandas', 'numpy', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_a_default_onset_that_would_fall_in_a_checkpoint_moves_past_it():
    for seed in range(200):
        src = SimSource.from_spec("sim:ecc,thermal_throttle", gpus=8, seed=seed, start=START)
        waits = [(a - START, b - START) for a, b, _ in src.legit_waits(1200.0)]
        if any(a - 60 <= 900 < b for a, b in waits):
            break
    else:
        pytest.skip("no seed below 200 puts a checkpoint at 900 s")
    thermal = next(gt for gt in src.ground_truth() if gt.kind == "thermal_throttle")
    onset = thermal.onset - START
    assert onset > 900 and not any(a - 60 <= onset < b for a, b in waits)
    explicit = SimSource.from_spec("sim:thermal_throttle@900", seed=seed, start=START)
    assert explicit.ground_truth()[0].onset == START + 900


_JUNK = st.text(alphabet="abcdeghilmnorstx_()=,@+-0123456789.smh ", max_size=30)
_KEYS = st.sampled_from(["gpus", "for", "dead", "code", "width", "gen", "rate", "ramp",
                         "cooling", "factor", "x"])
_ITEM = st.builds(lambda name, kv, tail: f"{name}({','.join(kv)}){tail}",
                  st.sampled_from(sorted(SCENARIOS)),
                  st.lists(st.builds(lambda k, v: f"{k}={v}", _KEYS, _JUNK), max_size=3),
                  _JUNK)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_JUNK, st.lists(_ITEM, min_size=1, max_size=3).map(",".join)))
def test_any_spec_text_either_parses_or_is_one_input_error(body):
    try:
        src = SimSource.from_spec("sim:" + body, gpus=4, start=START)
    except InputError as e:
        assert "\n" not in str(e)
        return
    assert all(set(gt.gpus) <= set(range(4)) for gt in src.ground_truth())


def test_scenarios_for_a_model_leave_out_what_it_cannot_have():
    assert scenarios_for("h100-sxm") == list(SCENARIOS)
    assert "nvlink_errors" not in scenarios_for("a100-pcie")
    for name in scenarios_for("a100-pcie"):
        SimSource.from_spec(f"sim:{name}", model="a100-pcie", start=START)
