"""The shipped rules: every kind covered, every rule tested both ways, quiet on healthy
simulated nodes and on every real log, and finding the simulated faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.detect import load_rules
from watchdog.incident import KINDS
from watchdog.pipeline.replay import detect
from watchdog.pipeline.ruletest import load_cases
from watchdog.sources.sim.frames import simulate

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "rules"
RULE_TESTS = sorted((RULES / "tests").glob("*.yaml"))


def shipped() -> dict[str, tuple[str, Path]]:
    """rule name -> (kind, file) for every shipped rule."""
    out = {}
    for f in sorted(RULES.glob("*.yaml")):
        for r in load_rules([f]):
            out[r.name] = (r.kind, f.resolve())
    return out


def test_every_kind_but_anomaly_has_a_rule():
    kinds = {kind for kind, _ in shipped().values()}
    assert kinds == set(KINDS) - {"anomaly", "agent"}  # the model's, the agent's own


def test_the_packaged_defaults_are_the_rules_folder():
    assert sorted(r.name for r in load_rules()) == sorted(shipped())


def test_every_rule_has_a_test_where_it_fires_and_one_where_it_stays_quiet():
    fires: set[str] = set()
    quiet: set[str] = set()
    rules = shipped()
    for path in RULE_TESTS:
        for case in load_cases(path):
            files = set(case.rule_files or [f for _, f in rules.values()])
            loaded = [n for n, (_, f) in rules.items() if f in files]
            for exp in case.expect:
                fires.update(n for n in loaded
                             if exp.get("rule", n) == n and rules[n][0] == exp["kind"])
            if not case.expect and not case.allow_extra:
                quiet.update(loaded)  # every loaded rule had to stay silent
            quiet.update(n for n in loaded
                         if n in case.expect_absent or rules[n][0] in case.expect_absent)
    assert set(rules) - fires == set(), "rules never shown to fire"
    assert set(rules) - quiet == set(), "rules never shown to stay quiet on a trap"


@pytest.mark.parametrize("model, seed", [("h100-sxm", 1), ("a100-pcie", 2)])
def test_healthy_simulated_node_with_checkpoint_waits_gives_no_incident(model, seed):
    """Training with checkpoints where ranks wait in a collective (the hang trap); seed 2
    waits 38 s, then 86 s: the learned `for` must still sit out the longer second wait."""
    rec, src = simulate("sim:healthy", duration=3200, interval=5.0, model=model, seed=seed)
    waits = [b - a for a, b, v in src.legit_waits(3200) if "pause" not in v]
    assert len(waits) >= 2 and max(waits) > 80  # the trap is really there
    assert detect(rec, load_rules()) == []


@pytest.mark.parametrize("spec, kind, gpus, within, duration", [
    ("sim:comm_hang(dead=2)", "comm_hang", ["0", "1", "3"], 180, 720),
    ("sim:thermal_throttle", "thermal_throttle", ["3"], 15, 720),
    ("sim:hw_slowdown", "hw_slowdown", ["3"], 15, 720),
    # a 30 min leak: 15 min of steady growth, then for: 1m (and the job dies at 35 min)
    ("sim:memory_pressure", "memory_pressure", ["3"], 17 * 60, 2400),
    ("sim:gpu_lost", "gpu_lost", ["3"], 5, 720),
])
def test_simulated_faults_are_found_in_time_with_the_right_gpus(spec, kind, gpus, within,
                                                                 duration):
    rec, src = simulate(spec, duration=duration, interval=5.0, gpus=4, seed=0)
    (truth,) = src.ground_truth()
    (inc,) = detect(rec, load_rules())
    assert (inc.kind, inc.gpus) == (kind, gpus)
    assert truth.onset <= inc.fired_at <= truth.onset + within



@pytest.mark.real_telemetry
def test_no_false_alert_on_any_real_log(real_telemetry):
    """Two busy power levels, staggered stops, locked clocks, 94 % memory, idle lead-ins."""
    from watchdog.sources.replay import open_log
    from watchdog.testing.real_telemetry import data_files, readings

    rules = load_rules()
    assert len(data_files(real_telemetry)) >= 13
    for label, path, mapping, host in readings(real_telemetry):
        rec = open_log(path, mapping=mapping, host=host)
        assert detect(rec, rules) == [], label
