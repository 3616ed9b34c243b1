"""One page per problem: a rule firing on a GPU where an ``anomaly`` incident is open takes
it over (the anomaly resolves into the rule's incident and is its evidence), in the live
agent through the real alerting path (policy, outbox, a webhook sink to a loopback
server) and in ``watchdog replay --model --json``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from anomaly_helpers import healthy_model

from watchdog.anomaly import persist
from watchdog.anomaly.handover import Handover
from watchdog.anomaly.stage import AnomalyStage
from watchdog.clock import ManualClock
from watchdog.detect import load_rules
from watchdog.incident import Incident
from watchdog.notify.config import NotifyConfig, SinkSpec
from watchdog.notify.notifier import Notifier
from watchdog.notify.sinks import build_sink
from watchdog.pipeline.core import build_detector
from watchdog.pipeline.live import LivePipeline
from watchdog.sources.sim import SimSource
from watchdog.store.store import Store
from watchdog.testing.httpserver import Server

# GPU 3's memory slows (an unnamed fault: the model pages), then it overheats (the
# thermal_throttle rule fires on the same GPU while the anomaly is still open)
SPEC = "sim:hbm_sag(gpus=3)@4m,thermal_throttle(gpus=3)@8m"
START = 1_767_225_600.0


def _live(tmp_path: Path, minutes: float) -> tuple[list[dict], list[tuple[float, str, Incident]]]:
    """The agent on the simulated node with alerting to a loopback webhook; returns the
    alerts of every notification the server received and the pipeline's transitions."""
    rules = load_rules()
    clock = ManualClock(start=START)
    cfg = NotifyConfig(sinks=(SinkSpec("hook", "webhook", {}, "cfg:1"),),  # type: ignore[call-arg]
                       group_wait=0.0, group_interval=1.0, resolve_hold=0.0)
    seen: list[tuple[float, str, Incident]] = []
    with Server() as srv:
        sink = build_sink("hook", "webhook", {"url": srv.url + "/hook", "timeout": 2.0},
                          "cfg:1")
        notifier = Notifier(cfg, Store(tmp_path), clock.now, "sim",
                            lambda rule: ("gpu", None), sinks={"hook": sink})
        agent = LivePipeline(
            lambda now: SimSource.from_spec(SPEC, gpus=4, seed=7, start=now),
            lambda src: build_detector(rules, host=src.host, devices=src.devices(),
                                       mode="live"),
            clock, spec=SPEC, interval=1.0, anomaly=AnomalyStage(healthy_model(), "sim", 1.0),
            alerting=notifier)
        for _ in range(int(minutes * 60)):
            seen += [(clock.now() - START, w, inc) for w, inc in agent.tick()]
            clock.advance(1.0)
        assert notifier.drain(10.0) == 0
        notifier.close()
        bodies = [r.body for r in srv.requests]
    return bodies, seen


@pytest.mark.slow
def test_a_rule_on_a_gpu_with_an_open_anomaly_is_one_page(tmp_path: Path) -> None:
    bodies, seen = _live(tmp_path, 11.0)
    fired = [(t, inc.kind, inc.gpus) for t, w, inc in seen if w == "firing"]
    assert [k for _, k, _ in fired] == ["anomaly", "thermal_throttle"], fired
    rule = next(inc for _, w, inc in seen if w == "firing" and inc.kind == "thermal_throttle")
    anomaly = next(inc for _, w, inc in seen if w == "firing" and inc.kind == "anomaly")
    # the anomaly resolved into the rule at the rule's firing, and says so
    assert anomaly.resolved_at == rule.fired_at
    assert anomaly.evidence["superseded"] == "by thermal_throttle on GPU 3"
    assert rule.evidence["anomaly"].startswith("memory clock ")
    assert rule.evidence["anomaly_before"]["superseded"] is True
    # what reached the webhook: after the rule fired, one page is firing, not two
    assert bodies, "nothing reached the sink"
    last = bodies[-1]
    firing = [a["labels"]["alertname"] if "alertname" in a["labels"] else a["incident"]["kind"]
              for a in last["alerts"] if a["status"] == "firing"]
    assert [a["incident"]["kind"] for a in last["alerts"] if a["status"] == "firing"] == \
        ["thermal_throttle"], firing
    resolved = [a for b in bodies for a in b["alerts"]
                if a["status"] == "resolved" and a["incident"]["kind"] == "anomaly"]
    assert resolved, "the anomaly's resolve was never sent"
    assert "superseded by thermal_throttle on GPU 3" in bodies[-1]["text"] or any(
        "superseded by thermal_throttle on GPU 3" in b["text"] for b in bodies)
    assert all(sum(a["status"] == "firing" for a in b["alerts"]) <= 1 for b in bodies), \
        [[(a["incident"]["kind"], a["status"]) for a in b["alerts"]] for b in bodies]


def _inc(kind: str, t: float, gpu: str = "3") -> Incident:
    return Incident(kind=kind, severity="warning", host="n", gpus=[gpu], uuids=[f"U{gpu}"],
                    started_at=t - 30.0, fired_at=t, resolved_at=None,
                    rule="anomaly_model" if kind == "anomaly" else kind,
                    summary=f"GPU {gpu}: {kind}",
                    evidence={"features": [{"feature": "mem_slope", "observed": 0.02,
                                            "normal": 0.0, "z": 9.0, "outside": 3.0}]}
                    if kind == "anomaly" else {"used": 1.0})


def test_an_anomaly_judged_after_the_rule_fired_never_pages() -> None:
    hand = Handover()
    rule, late = _inc("thermal_throttle", 100.0), _inc("anomaly", 95.0)
    assert hand([("firing", rule)]) == [("firing", rule)]
    assert hand([("firing", late)]) == []  # straight into the rule's evidence
    assert late.resolved_at == 100.0 and hand.superseded == [late]
    assert rule.evidence["anomaly"] == ("memory trend +2.0% of total/min (normal +0.0% of "
                                        "total/min), from 35s before")
    other = _inc("anomaly", 101.0, gpu="2")  # another GPU: its own page
    assert hand([("firing", other)]) == [("firing", other)]
    hand([("resolved", rule)])
    after = _inc("anomaly", 400.0)  # after the rule's incident ended: pages again
    assert hand([("firing", after)]) == [("firing", after)]


def test_an_anomaly_that_cleared_before_the_rule_is_cited_not_taken_over() -> None:
    hand = Handover()
    before = _inc("anomaly", 100.0)
    hand([("firing", before)])
    before.resolved_at = 160.0
    hand([("resolved", before)])
    rule = _inc("thermal_throttle", 400.0)
    assert hand([("firing", rule)]) == [("firing", rule)]
    assert "superseded" not in before.evidence and hand.superseded == []
    assert rule.evidence["anomaly_before"]["superseded"] is False
    late = _inc("thermal_throttle", 2000.0, gpu="3")  # long after: not cited
    late.evidence = {}
    hand([("resolved", rule)])
    hand([("firing", late)])
    assert "anomaly" not in late.evidence


@pytest.mark.slow
def test_replay_json_shows_a_superseded_anomaly_only_in_the_rules_evidence(
        tmp_path: Path) -> None:
    model = tmp_path / "node.wdm"
    persist.save(healthy_model(), model)
    r = subprocess.run([sys.executable, "-m", "watchdog", "replay", SPEC, "--duration", "11m",
                        "--gpus", "4", "--seed", "7", "--model", str(model), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    incs = [i for f in (doc if isinstance(doc, list) else [doc]) for i in f["incidents"]]
    kinds = [(i["kind"], i["gpus"]) for i in incs]
    assert ("thermal_throttle", ["3"]) in kinds, kinds
    assert not [k for k in kinds if k[0] == "anomaly"], kinds
    rule = next(i for i in incs if i["kind"] == "thermal_throttle")
    before = rule["evidence"]["anomaly_before"]
    assert before["superseded"] is True and before["gpus"] == ["3"]
    assert before["resolved_at"] == rule["fired_at"]
    assert rule["evidence"]["anomaly"].startswith("memory clock ")
