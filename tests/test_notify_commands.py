"""The alerting commands and config, as a user meets them: `watchdog silence`, `watchdog
alerts`, `watchdog alerts test` as real subprocesses; `notify:` errors as file:line; the
example config's commented notify block is valid once uncommented."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog import config
from watchdog.errors import InputError
from watchdog.notify.notifier import build_sinks
from watchdog.testing.httpserver import Reply, Server

REPO = Path(__file__).resolve().parent.parent


def wd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def agent_state(d: Path) -> Path:
    """A state directory an agent has run on (its database exists): silences go only
    where an agent keeps its state."""
    from watchdog.store import connect

    connect(d).close()
    return d


def test_silence_add_list_expire(tmp_path: Path) -> None:
    sd = ["--state-dir", str(agent_state(tmp_path))]
    r = wd("silence", "add", "--gpu", "3", "--kind", "thermal_throttle", "--for", "2h",
           "--comment", "fan swap", *sd)
    assert r.returncode == 0 and r.stdout.startswith("silence 1: GPU 3 thermal_throttle muted"), r
    assert wd("silence", "add", "--all", "--for", "30m", "--comment", "maint", *sd).returncode == 0
    out = wd("silence", "list", *sd).stdout
    assert "fan swap" in out and "everything" in out
    assert wd("silence", "expire", "2", *sd).stdout.strip() == "silence 2 expired"
    assert "maint" not in wd("silence", "list", *sd).stdout
    assert "expired" in wd("silence", "list", "--all", *sd).stdout
    assert wd("silence", "expire", "2", *sd).returncode == 1
    alerts = json.loads(wd("alerts", "--json", *sd).stdout)
    assert [s["comment"] for s in alerts["silences"]] == ["fan swap"]


@pytest.mark.parametrize(("args", "message"), [
    (["--for", "2h", "--comment", "x"], "say what to mute"),
    (["--all", "--gpu", "1", "--for", "2h", "--comment", "x"], "--all mutes everything"),
    (["--kind", "hang", "--for", "2h", "--comment", "x"], "--kind hang: not an incident kind"),
    (["--gpu", "1", "--for", "soon", "--comment", "x"], "--for: 'soon' is not a duration"),
])
def test_silence_mistakes_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    r = wd("silence", "add", *args, "--state-dir", str(tmp_path))
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_notify_test_reports_each_sink(tmp_path: Path) -> None:
    with Server(Reply(200)) as ok, Server(Reply(404, {"error": "no such hook"})) as bad:
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f"notify:\n  sinks:\n    good: {{type: webhook, url: \"{ok.url}\"}}\n"
                       f"    bad: {{type: webhook, url: \"{bad.url}\"}}\n")
        r = wd("alerts", "test", "--config", str(cfg))
        assert r.returncode == 1, r
        assert "good (webhook): delivered" in r.stdout
        assert "bad (webhook): failed: HTTP 404" in r.stdout
        assert ok.requests[0].body["reason"] == "test"
        assert wd("alerts", "test", "--config", str(cfg), "--sink", "good").returncode == 0


@pytest.mark.parametrize(("text", "message"), [
    ("notify:\n  sinks:\n    s: {type: smoke}\n", r"w.yaml:3: notify.sinks.s.type: unknown sink "
                                                  r"type 'smoke'"),
    ("notify:\n  group_wait: soon\n", r"w.yaml:2: notify.group_wait: 'soon' is not a duration"),
    ("notify:\n  sinks:\n    a: {type: log}\n  routes:\n    - {sinks: [b]}\n",
     r"w.yaml:5: notify.routes.0: sink 'b' is not defined"),
    ("notify:\n  sinks:\n    a: {type: log}\n  routes:\n    - {severity: urgent, sinks: [a]}\n",
     r"w.yaml:5: notify.routes.0: 'urgent' is not a severity"),
    ("notify:\n  grup_wait: 1m\n", r"w.yaml:2: notify.grup_wait: unknown setting"),
])
def test_notify_config_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "w.yaml"
    p.write_text(text)
    with pytest.raises(InputError, match=message):
        config.load(p)


def test_run_refuses_a_sink_whose_secret_is_missing(tmp_path: Path) -> None:
    cfg = tmp_path / "w.yaml"
    cfg.write_text("source: sim:healthy\nnotify:\n  sinks:\n    slack: {type: slack, "
                   "token_env: NO_SUCH_TOKEN_VAR, channel: '#a'}\n")
    r = wd("run", "--config", str(cfg), "--duration", "1m", "--speed", "60",
           env={"HOME": str(tmp_path)})
    assert r.returncode == 2
    assert ("w.yaml:4: notify.sinks.slack.token_env: environment variable NO_SUCH_TOKEN_VAR "
            "is not set") in r.stderr
    assert "Traceback" not in r.stderr


def test_the_example_configs_notify_block_is_valid(tmp_path: Path) -> None:
    text = (REPO / "config" / "watchdog.yaml").read_text()
    block = text[text.index("# notify:"):]
    lines = [re.sub(r"^# ?", "", x) for x in block.splitlines() if x.startswith("#")]
    text = "\n".join(lines) + "\n"
    for name in ("pd-key", "slack-token"):
        f = tmp_path / name
        f.write_text("k" * 32)
        f.chmod(0o600)
        text = text.replace(f"/etc/nvml-watchdog/{name}", str(f))
    cfg = tmp_path / "w.yaml"
    cfg.write_text(text)
    c = config.load(cfg)
    sinks = build_sinks(c.notify)
    assert sorted(sinks) == ["alertmanager", "pagerduty", "slack"]
    assert c.notify.sinks_for("critical", "comm_hang") == ("pagerduty", "slack")
    assert c.notify.sinks_for("warning", "thermal_throttle") == ("slack",)
