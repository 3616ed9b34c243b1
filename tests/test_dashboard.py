"""The Grafana dashboard shipped with the package (``watchdog rules export --grafana``):
printed as installed, checked against Grafana's schema, and over metrics the agent and
the fleet rules export. Every query returning data is ``test_fleet_e2e.py``'s, against a
real Prometheus scraping a simulated fleet.

Grafana's schema: ``grafana-foundation-sdk`` (Grafana's own types, generated from its
schemas) decodes the dashboard and encodes it back; nothing may be lost but the
Prometheus annotation's own fields (``step``, ``titleFormat``, ``textFormat``,
``tagKeys``, ``useValueForTime``), which Grafana's core schema leaves to the data source
and its Prometheus data source reads from the annotation itself.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from grafana_foundation_sdk.models import dashboard as schema

REPO = Path(__file__).resolve().parent.parent
WATCHDOG = Path(sys.executable).parent / "watchdog"
PROMETHEUS_ANNOTATION = {"step", "titleFormat", "textFormat", "tagKeys", "useValueForTime"}
#: what a dashboard variable becomes when "All" is picked
ALL = {"$node": ".*", "$job_id": ".+"}


def exported() -> dict:
    out = subprocess.run([str(WATCHDOG), "rules", "export", "--grafana"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return json.loads(out)


def queries(dash: dict) -> list[tuple[str, str]]:
    """``(panel or annotation, PromQL with every variable at All)``."""
    out = [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]
    out += [(f"annotation {a['name']}", a["expr"]) for a in dash["annotations"]["list"]]
    subst = []
    for name, expr in out:
        for var, value in ALL.items():
            expr = expr.replace(var, value)
        subst.append((name, expr))
    return subst


def _lost(a, b, path=""):
    if isinstance(a, dict):
        for k, v in a.items():
            if not isinstance(b, dict) or k not in b:
                yield f"{path}/{k}"
            else:
                yield from _lost(v, b[k], f"{path}/{k}")
    elif isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            yield path
        else:
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                yield from _lost(x, y, f"{path}[{i}]")
    elif a != b:
        yield f"{path} ({a!r} -> {b!r})"


def _plain(o):
    return o.to_json() if hasattr(o, "to_json") else str(o)


def test_the_dashboard_round_trips_through_grafanas_schema():
    dash = exported()
    back = json.loads(json.dumps(schema.Dashboard.from_json(dash).to_json(), default=_plain))
    lost = [p for p in _lost(dash, back)
            if not re.fullmatch(r"/annotations/list\[\d+\]/(\w+)", p)
            or p.rsplit("/", 1)[1] not in PROMETHEUS_ANNOTATION]
    assert lost == []


def test_a_key_grafana_does_not_know_is_caught():
    dash = exported()
    dash["panels"][0]["gridpos"] = dash["panels"][0].pop("gridPos")
    back = json.loads(json.dumps(schema.Dashboard.from_json(dash).to_json(), default=_plain))
    assert "/panels[0]/gridpos" in list(_lost(dash, back))


def test_the_dashboard_shows_nodes_jobs_incidents_and_the_culprit():
    dash = exported()
    assert dash == json.loads((REPO / "watchdog" / "dashboards" / "nvml-watchdog.json")
                              .read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    text = json.dumps(dash)
    for metric in ("utilization_ratio", "power_watts", "temperature_celsius",
                   "memory_used_bytes"):
        by = {by for _, e in queries(dash) if metric in e
              for by in re.findall(r"by \((\w+)\)", e)}
        assert {"node", "job_id"} <= by, metric
    assert any('alertname="JobHangCulprit"' in e for _, e in queries(dash))
    [annotation] = dash["annotations"]["list"]
    assert "watchdog_incident_active" in annotation["expr"]
    assert {"kind", "gpu"} <= set(annotation["tagKeys"].split(","))
    # every series it reads is one the agent exports or a fleet rule records
    exported_names = (REPO / "watchdog" / "service" / "metrics.py").read_text()
    for name in set(re.findall(r"\bwatchdog_[a-z_]+", text)):
        assert f'"{name}"' in exported_names, name
