"""Operator clarity (issue 16): what a tired on-call engineer reads at 3 a.m. says each thing
once, in words and units, with the same numbers everywhere, and only advice that works on
a production node. Each test's first docstring line names the defect as an operator would.
"""

from __future__ import annotations

import io
import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from watchdog.cli import main
from watchdog.incident import Incident
from watchdog.notify import render
from watchdog.notify import store as st
from watchdog.notify.base import Alert, Notification
from watchdog.notify.console import ConsoleNotifier
from watchdog.store import connect

REPO = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000.0
#: comm_hang's evidence as the detector produced it for `replay sim:comm_hang`
HANG_EVIDENCE = {"util": 100.0, "power": 105.081905, "power_rel": -2.585637,
                 "busy_w": 689.911333, "idle_w": 119.911143, "sm_clock_pct": 100.0,
                 "sm_activity": 1.362857, "for_s": 150.0, "learned_longest_s": None,
                 "learned_episodes": 0}


def alert(status: str = "firing", *, started: float = T0 - 13, fired: float | None = T0,
          resolved: float | None = None, runbook: str | None = None,
          evidence: dict | None = None) -> Alert:
    return Alert(fingerprint="fp1", status=status, kind="comm_hang",  # type: ignore[arg-type]
                 severity="critical", host="node7", gpus=("0", "1"), uuids=("GPU-0", "GPU-1"),
                 started_at=started, fired_at=fired, resolved_at=resolved, rule="comm_hang",
                 summary="job looks hung: 100% util but only 105 W (busy is 690 W)",
                 evidence=dict(HANG_EVIDENCE if evidence is None else evidence),
                 runbook_url=runbook)


def note(*alerts: Alert, created: float = T0, reason: str = "new") -> Notification:
    return Notification(id="n1", sink="s", group_key="node7#a", reason=reason,  # type: ignore[arg-type]
                        created_at=created, alerts=alerts,
                        changed=tuple(a.fingerprint for a in alerts))


def incident(**kw) -> Incident:
    base = dict(kind="comm_hang", severity="critical", host="node7", gpus=["0", "1"],
                uuids=["GPU-0", "GPU-1"], started_at=T0 - 13, fired_at=T0, resolved_at=None,
                rule="comm_hang", summary="job looks hung")
    return Incident(**{**base, **kw})


def console(state: str, inc: Incident, now: float = T0) -> str:
    out = io.StringIO()
    ConsoleNotifier(out, color=False, clock=lambda: now)(state, inc)
    return out.getvalue()


# --- 1. the status word, once ---------------------------------------------------------------
def _state_dir(tmp_path: Path, rows: list[tuple[str, Alert, float | None]],
               status: dict | None = None) -> Path:
    conn = st.open_store(connect(tmp_path))
    for state, a, hold in rows:
        conn.execute("INSERT INTO notify_alerts (fp, group_key, doc, state, hold_until, "
                     "fires, updated_at) VALUES (?, 'g', ?, ?, ?, '[]', ?)",
                     (a.fingerprint, st.alert_to_json(a), state, hold, a.started_at))
    if status is not None:
        conn.execute("CREATE TABLE IF NOT EXISTS agent_status (id INTEGER PRIMARY KEY, "
                     "doc TEXT NOT NULL, updated_at REAL NOT NULL)")
        conn.execute("INSERT INTO agent_status VALUES (1, ?, ?)",
                     (json.dumps(status), status.get("now", 0.0)))
    conn.close()
    return tmp_path


def test_a_resolved_alert_is_not_labelled_resolved_twice(tmp_path: Path, capsys) -> None:
    """clarity: a resolved alert is not labelled RESOLVED twice (`RESOLVED  RESOLVED
    comm_hang`), and a firing one says FIRING and its severity once."""
    wall = time.time()
    done = replace(alert("resolved", started=wall - 2400, fired=wall - 2250,
                         resolved=wall - 60), fingerprint="done")
    live = replace(alert(started=wall - 720, fired=wall - 570), fingerprint="live")
    clear = replace(alert(started=wall - 900, fired=wall - 800, resolved=wall - 30),
                    fingerprint="clear")
    sd = _state_dir(tmp_path, [("resolved", done, None), ("firing", live, None),
                               ("resolving", clear, wall + 90)])
    assert main(["alerts", "--all", "--state-dir", str(sd)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "[" in ln]
    assert len(lines) == 3, lines
    for ln in lines:
        words = re.findall(r"\b(RESOLVED|FIRING|CLEARED|CRITICAL)\b", ln)
        assert len(words) == len(set(words)), ln  # no word said twice
        assert "RESOLVED" not in ln or "FIRING" not in ln, ln
    by_fp = {re.search(r"\[(\w+)\]$", ln).group(1): ln for ln in lines}  # type: ignore[union-attr]
    assert by_fp["done"].startswith("RESOLVED  comm_hang on node7, GPUs 0-1, after 39 min")
    assert by_fp["live"].startswith("FIRING    CRITICAL comm_hang on node7, GPUs 0-1, for 12 min")
    assert by_fp["clear"].startswith("CLEARED   CRITICAL comm_hang on node7, GPUs 0-1, after 14 "
                                     "min; the resolve goes out at ")


def test_the_console_says_resolved_once_and_a_gpu_joining_is_not_a_resolve() -> None:
    """clarity: the console prints a GPU joining a firing incident as UPDATED, not as
    RESOLVED, and a resolve says RESOLVED once."""
    joined = console("updated", incident(gpus=["0", "1", "2"]), now=T0 + 60)
    assert "UPDATED" in joined and "RESOLVED" not in joined and "GPUs 0-2" in joined
    assert "(GPUs changed; for 1 min 13 s)" in joined
    gone = console("resolved", incident(resolved_at=T0 + 587))
    assert gone.count("RESOLVED") == 1 and "(lasted 10 min)" in gone


# --- 2. how long: one definition, one format --------------------------------------------------
def test_every_page_and_the_console_give_the_same_how_long() -> None:
    """clarity: `for 0 s` in one place while Slack said 13 s for the same incident: every
    rendering of "how long" is the condition's age from started_at, in one format."""
    from watchdog.notify.sinks.alertmanager import am_alert
    from watchdog.notify.sinks.pagerduty import payload
    from watchdog.notify.sinks.slack import render_blocks

    a = alert()  # condition began 13 s before it fired; the notification is made at firing
    n = note(a)
    said = {
        "slack": render_blocks(n)["blocks"][0]["text"]["text"],
        "pagerduty": payload(a, n.created_at)["summary"],
        "alertmanager": am_alert(a, n.created_at)["annotations"]["title"],
        "text": render.as_text(n),
        "console": console("firing", incident()),
    }
    for where, text in said.items():
        assert "for 13 s" in text, (where, text)
        assert not re.search(r"\bfor 0 ?s\b|\b0s earlier|for s \d", text), (where, text)
    # resolved: the same age to resolved_at, whoever renders it
    r = alert("resolved", resolved=T0 + 587)
    assert "after 10 min" in render.headline(r, T0 + 9999)
    assert "(lasted 10 min)" in console("resolved", incident(resolved_at=T0 + 587))


def test_a_page_says_nothing_about_how_long_when_it_fired_at_once() -> None:
    """clarity: `(condition since 0s earlier)` on the console: an alert that fired the
    moment its condition began says nothing about how long before."""
    line = console("firing", incident(started_at=T0, fired_at=T0))
    assert "earlier" not in line and "0 s" not in line and "(for" not in line
    assert line.rstrip().endswith("job looks hung")


def test_watchdog_alerts_on_a_simulated_node_uses_the_nodes_clock(tmp_path: Path,
                                                                   capsys) -> None:
    """clarity: `watchdog alerts` on the demo node said `for 0 s` (wall clock behind the
    simulated clock); it says how long on the node's own clock, as the pages did."""
    sim_now = time.time() + 86_400  # a 30x simulated node runs far ahead of the wall
    a = alert(started=sim_now - 600, fired=sim_now - 450)
    sd = _state_dir(tmp_path, [("firing", a, None)],
                    status={"source": "sim:comm_hang", "now": sim_now})
    assert main(["alerts", "--state-dir", str(sd)]) == 0
    out = capsys.readouterr().out
    assert "for 10 min" in out and "for 0 s" not in out, out
    assert main(["alerts", "--json", "--state-dir", str(sd)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["alerts"][0]["headline"].endswith("for 10 min")


@pytest.mark.parametrize(("seconds", "words"), [
    (0, "0 s"), (13, "13 s"), (150, "2 min 30 s"), (720, "12 min"), (5400, "1 h 30 min"),
    (90_000, "1 d 1 h"), (-5, "0 s")])
def test_how_long_is_one_readable_format(seconds: float, words: str) -> None:
    """clarity: `for s 0` and `2m30s` vs `2 min`: one format for every duration a person
    reads."""
    assert render.how_long(seconds) == words


# --- evidence: units and meaning, never a raw internal number ---------------------------------
def test_evidence_shows_power_against_its_levels_not_a_raw_relative_number() -> None:
    """clarity: `power rel -2.4` and `for s 0` in a page: evidence is in words with units
    (`power 105 W (idle 120 W, busy 690 W)`), internal signals translated or left out."""
    text = render.evidence(alert())
    assert text == ("utilization 100% · power 105 W (idle 120 W, busy 690 W) · "
                    "SM clock 100% of max · SM activity 1.4%")
    alone = render.evidence(alert(evidence={"power_rel": -2.4}))
    assert alone == "power at or below its idle level"
    for shown in (text, alone):
        assert "rel" not in shown and "for s" not in shown and "-2" not in shown


def test_every_shipped_rules_evidence_has_words() -> None:
    """clarity: a new evidence key must not reach a page as its raw name (`crc_flit 3`):
    every key of every shipped rule is one the renderer says in words."""
    from watchdog.detect.loader import load_rules

    missing = {(r.name, k) for r in load_rules() for k in (r.evidence or {})
               if k not in render.KNOWN_EVIDENCE}
    assert not missing, f"evidence without words in watchdog/notify/render.py: {missing}"
    engine = {"for_s", "learned_longest_s", "learned_episodes"}  # added by the detector
    assert engine <= render.KNOWN_EVIDENCE
    every = {k: 3.0 for r in load_rules() for k in (r.evidence or {})}
    for k in every:
        shown = render.evidence(alert(evidence={k: 3.0}))
        assert "_" not in shown, (k, shown)


# --- runbooks: a link, or clearly a file on the node -----------------------------------------
def test_a_page_never_shows_a_path_on_the_node_as_a_link() -> None:
    """clarity: runbook links in pages were local paths (/opt/…/comm_hang.md) that nobody
    on a phone can open: without runbook_url a page names the runbook and says it is a file
    on the node; with it, Slack and PagerDuty carry the link."""
    from watchdog.notify.sinks.pagerduty import payload
    from watchdog.notify.sinks.slack import context_block

    path = "/opt/nvml-watchdog/lib/python3.11/site-packages/watchdog/docs/runbooks/comm_hang.md"
    local = alert(runbook=path)
    small = context_block(local)["elements"][0]["text"]
    assert f"runbook: comm_hang (a file on node7: {path})" in small
    assert "<" not in small and "|runbook>" not in small
    assert render.runbook_link(local) is None
    assert payload(local)["custom_details"]["runbook"].startswith("runbook: comm_hang (a file")
    assert f"runbook: comm_hang (a file on node7: {path})" in render.as_text(note(local))
    url = alert(runbook="https://wiki.example.org/gpu-runbooks/comm_hang")
    assert "<https://wiki.example.org/gpu-runbooks/comm_hang|runbook>" in (
        context_block(url)["elements"][0]["text"])
    assert render.runbook_link(url) == "https://wiki.example.org/gpu-runbooks/comm_hang"


def test_the_example_config_documents_runbook_url(tmp_path: Path) -> None:
    """clarity: runbook_url was missing from the example config, so PagerDuty links were
    empty: it is documented there (a URL template with {kind}, where the runbooks live),
    and uncommented it gives every page a link."""
    from watchdog import config

    text = (REPO / "config" / "watchdog.yaml").read_text()
    m = re.search(r"^# runbook_url: (https://\S+)$", text, re.M)
    assert m and "{kind}" in m.group(1), "config/watchdog.yaml: no commented runbook_url"
    block = text[:m.start()].rsplit("\n\n", 1)[-1]
    assert "docs/runbooks/" in block and "{kind}" in block
    cfg = tmp_path / "w.yaml"
    cfg.write_text(f"runbook_url: {m.group(1)}\nnotify:\n  sinks:\n    l: {{type: log}}\n")
    c = config.load(cfg)
    assert c.notify.runbook_url == m.group(1)


# --- nvml_error: advice that works on a production node --------------------------------------
@pytest.mark.parametrize("scenario", ["no_library", "init_failure"])
def test_an_nvml_error_page_never_says_try_the_simulator(scenario: str, capsys) -> None:
    """clarity: a production nvml_error page advised "Use --source sim to try without a
    GPU": what a check, a page or an incident says about a broken driver is what to check
    on the node; the simulator hint is only the exception's hint for an interactive line."""
    from watchdog.errors import SourceUnavailable
    from watchdog.sources.nvml import NvmlSource
    from watchdog.testing import fakenvml

    fakenvml.install(scenario)
    try:
        with pytest.raises(SourceUnavailable) as e:
            NvmlSource()
        rc = main(["check", "--json"])
    finally:
        fakenvml.uninstall()
    doc = json.loads(capsys.readouterr().out)
    assert rc == 3
    for text in (str(e.value), doc["problems"][0]["message"]):
        assert "--source sim" not in text and "without a GPU" not in text, text
        assert "nvidia-smi" in text, text
    assert "--source sim" in e.value.hint  # type: ignore[attr-defined]


# --- silence list --json ----------------------------------------------------------------------
def test_silence_list_json_has_iso_times_with_zone_and_epoch_seconds(tmp_path: Path,
                                                                      capsys) -> None:
    """clarity: `watchdog silence list --json` did not exist; it prints one object with
    ISO 8601 times (with zone) and the raw epoch seconds, as `alerts --json` does."""
    connect(tmp_path).close()  # an agent's state: silences go only where one keeps it
    sd = ["--state-dir", str(tmp_path)]
    assert main(["silence", "add", "--gpu", "3", "--kind", "thermal_throttle", "--for", "2h",
                 "--comment", "fan swap", *sd]) == 0
    capsys.readouterr()
    assert main(["silence", "list", "--json", *sd]) == 0
    doc = json.loads(capsys.readouterr().out)
    (s,) = doc["silences"]
    assert (s["what"], s["state"], s["comment"]) == ("GPU 3 thermal_throttle", "active",
                                                     "fan swap")
    iso_zone = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$")
    assert iso_zone.match(s["starts_at"]) and iso_zone.match(s["ends_at"])
    assert s["ends_at_epoch"] - s["starts_at_epoch"] == pytest.approx(7200)
    assert s["expired_at"] is None and s["expired_at_epoch"] is None
    assert main(["alerts", "--json", *sd]) == 0
    alerts = json.loads(capsys.readouterr().out)
    assert alerts["silences"] == doc["silences"]

