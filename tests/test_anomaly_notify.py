"""An anomaly incident's explanation reaches people: through the alerting policy into a
Slack message (``render_blocks``), the explanation sentence is the summary and the top
features, observed against normal, are the evidence line."""

from __future__ import annotations

import json
import re
from pathlib import Path

from anomaly_helpers import healthy_model
from test_anomaly_runner import FAULT, _found

from watchdog.anomaly.explain import WORDS
from watchdog.notify.config import NotifyConfig, SinkSpec
from watchdog.notify.policy import Policy
from watchdog.notify.sinks.slack import render_blocks
from watchdog.store.store import Store


def test_an_anomaly_notification_carries_the_explanation(tmp_path: Path) -> None:
    found = _found(healthy_model(), FAULT)
    inc = found[0]
    top = inc.evidence["features"]
    sentence = inc.summary.split(" (anomaly score")[0]
    # the sag (to 80 %) shows in the window that pages: between 80 % and 89 % of max
    m = re.match(r"GPU 3: memory clock (8\d)% of max \(normal 100% of max\)", sentence)
    assert m, sentence
    assert inc.evidence[top[0]["feature"]] == f"{m.group(1)}% of max (normal 100% of max)"

    cfg = NotifyConfig(sinks=(SinkSpec("slack", "log", {}, "x"),), group_wait=0.0,
                       group_interval=60.0, resolve_hold=120.0)
    now = float(inc.fired_at or inc.started_at)
    policy = Policy(cfg, Store(tmp_path), inc.host,
                    lambda rule: ("gpu", None), now)
    policy.observe([("firing", inc)], now)
    notes = policy.tick(now + 1.0, {"slack": None})
    assert len(notes) == 1
    msg = render_blocks(notes[0])
    section = next(b["text"]["text"] for b in msg["blocks"] if b["type"] == "section")
    assert sentence in section  # the explanation, word for word
    evidence_line = [ln for ln in section.splitlines() if ln.startswith("_")]
    assert evidence_line, section
    for item in top:  # each top feature with its observed and normal values
        assert WORDS[item["feature"]][0] in evidence_line[0]
        assert inc.evidence[item["feature"]] in evidence_line[0]
    assert "WARNING anomaly on" in json.dumps(msg)
