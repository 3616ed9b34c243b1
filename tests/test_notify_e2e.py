"""`watchdog run` with alerting, end to end, as real subprocesses: a simulated hung job
becomes one PagerDuty incident (trigger, then resolve, one dedup_key), one Slack message
(posted, then updated, with the resolve in its thread) and one webhook page; a kill -9
while the sink is down loses and doubles nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from watchdog.testing.httpserver import Reply, Request, Server, self_signed_cert

SIM = "sim:comm_hang(for=4m)@2m"
#: The scenario's timeline (simulated time): the hang starts 2 min in, fires at ~4.5 min,
#: clears at ~6.5 min; with ``resolve_hold: 10s`` the resolve goes out before ~7 min, so an
#: 8-minute run at 60x (8 s of wall time) holds the whole incident.
SPEED = "60"
RUN = "8m"
#: A run whose final status must count the resolve as sent: the agent refreshes its
#: alerting counters every 5 s of wall time, so it runs on > 5 s (here ~7 s) after the
#: resolve (at ~7 min: 7 s at 60x).
RUN_PAST_STATUS = "14m"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the test server's certificate)")
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def run_agent(tmp: Path, cfg: Path, duration: str, env: dict[str, str] | None = None,
              ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "watchdog", "run", "--config", str(cfg), "--speed", SPEED,
         "--duration", duration], cwd=tmp, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(tmp), **(env or {})})


def slack_api(calls: list[tuple[str, dict]]):  # type: ignore[no-untyped-def,type-arg]
    def handle(req: Request) -> Reply:
        calls.append((req.path.rsplit("/", 1)[-1], req.body if isinstance(req.body, dict)
                      else {}))
        return Reply(200, {"ok": True, "channel": "C0GPU", "ts": f"1700000000.{len(calls):06d}"})
    return handle


def test_a_hung_job_is_one_pagerduty_incident_one_slack_thread_one_webhook_page(
        tmp_path: Path, tls: tuple[str, str]) -> None:
    (tmp_path / "pd.key").write_text("abcdef0123456789abcdef0123456789\n")
    (tmp_path / "pd.key").chmod(0o600)
    calls: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    with Server(Reply(202, {"status": "success", "dedup_key": "x"}), tls=tls) as pd, \
            Server(handler=slack_api(calls)) as slack, Server() as hook:
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f"""source: {SIM}
state_dir: {tmp_path / 'state'}
notify:
  resolve_hold: 10s
  sinks:
    pagerduty: {{type: pagerduty, routing_key_file: {tmp_path / 'pd.key'}, url: "{pd.url}",
                 ca_file: {tls[0]}}}
    slack: {{type: slack, token_env: T_SLACK, channel: "#gpu", api_url: "{slack.url}/api/"}}
    hook: {{type: webhook, url: "{hook.url}/page"}}
  routes:
    - {{severity: critical, sinks: [pagerduty, slack, hook]}}
    - {{sinks: [slack]}}
""")
        p = run_agent(tmp_path, cfg, RUN_PAST_STATUS, {"T_SLACK": "xoxb-test"})
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
        assert "Traceback" not in out
    events = [(r.body["event_action"], r.body["dedup_key"]) for r in pd.requests]
    assert [a for a, _ in events] == ["trigger", "resolve"], events
    assert events[0][1] == events[1][1]
    assert pd.requests[0].body["payload"]["summary"].startswith("CRITICAL comm_hang on sim-node")
    methods = [m for m, _ in calls]
    assert methods == ["chat.postMessage", "chat.update", "chat.postMessage"], methods
    assert calls[2][1]["thread_ts"] == "1700000000.000001"
    assert "RESOLVED comm_hang" in calls[2][1]["text"]
    assert [r.body["reason"] for r in hook.requests] == ["new", "resolved"]
    status = subprocess.run([sys.executable, "-m", "watchdog", "status", "--config", str(cfg)],
                            capture_output=True, text=True, timeout=60)
    assert "pagerduty (pagerduty): ok · sent 2 · pending 0" in status.stdout, status.stdout
    listed = subprocess.run([sys.executable, "-m", "watchdog", "alerts", "--all", "--json",
                             "--config", str(cfg)], capture_output=True, text=True, timeout=60)
    doc = json.loads(listed.stdout)
    [hang] = [a for a in doc["alerts"] if a["fingerprint"] == events[0][1]]
    assert [(n["sink"], n["reason"], n["state"]) for n in hang["notifications"]
            if n["sink"] == "pagerduty"] == [("pagerduty", "new", "sent"),
                                             ("pagerduty", "resolved", "sent")]
    assert doc["outbox"]["pagerduty"]["sent"]["count"] == 2


def test_kill_9_while_the_sink_is_down_then_restart_pages_exactly_once(tmp_path: Path) -> None:
    """The receiver refuses (503) until the agent has been killed with SIGKILL holding a
    queued page; after the restart the page goes out once, and the resolve once."""
    with Server(Reply(503, {"error": "down"})) as hook:
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f"source: {SIM}\nstate_dir: {tmp_path / 'state'}\nnotify:\n"
                       f"  resolve_hold: 10s\n"
                       f"  sinks:\n    hook: {{type: webhook, url: \"{hook.url}/page\"}}\n")
        p = run_agent(tmp_path, cfg, "30m")
        end = time.monotonic() + 60
        while not hook.refused and time.monotonic() < end:
            time.sleep(0.1)
        assert hook.refused, "the agent never tried to deliver"
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
        assert hook.requests == []
        hook.default = Reply(200)
        p = run_agent(tmp_path, cfg, RUN)
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
    pages = [(r.body["reason"], r.body["status"], tuple(r.body["changed"])) for r in hook.requests]
    assert [x[:2] for x in pages] == [("new", "firing"), ("resolved", "resolved")], pages
    assert pages[0][2] == pages[1][2]
    assert len({r.body["id"] for r in hook.requests}) == 2


def test_secrets_never_reach_logs_state_status_or_json(tmp_path: Path,
                                                       tls: tuple[str, str]) -> None:
    """Every sink with a secret, one of them refusing (so error paths log too): the
    secrets appear nowhere the agent writes or prints."""
    secrets = {"slack": "xoxb-SECRET-SLACK-0451", "pd": "SECRETPDKEY0000000000000000000451",
               "hook": "SECRET-HOOK-TOKEN-0451", "hookurl": "SECRETPATH0451"}
    (tmp_path / "pd.key").write_text(secrets["pd"])
    (tmp_path / "hook.token").write_text(secrets["hook"])
    (tmp_path / "url").write_text("")
    for f in ("pd.key", "hook.token"):
        (tmp_path / f).chmod(0o600)
    with Server(Reply(202, {"status": "success", "dedup_key": "x"}), tls=tls) as pd, \
            Server(Reply(200, {"ok": False, "error": "invalid_auth"})) as slack, \
            Server(Reply(503)) as hook:
        (tmp_path / "url").write_text(f"{hook.url}/{secrets['hookurl']}?k={secrets['hookurl']}")
        (tmp_path / "url").chmod(0o600)
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f"""source: {SIM}
state_dir: {tmp_path / 'state'}
notify:
  resolve_hold: 10s
  sinks:
    - {{name: pagerduty, type: pagerduty, routing_key_file: {tmp_path / 'pd.key'},
       url: "{pd.url}/v2/enqueue", ca_file: {tls[0]}}}
    - {{name: slack, type: slack, token_env: T_SLACK, channel: "#gpu",
       api_url: "{slack.url}/api/"}}
    - {{name: hook, type: webhook, url_file: {tmp_path / 'url'},
       token_file: {tmp_path / 'hook.token'}}}
""")
        p = run_agent(tmp_path, cfg, RUN, {"T_SLACK": secrets["slack"]})
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
        assert pd.requests and hook.refused  # the secrets were used...
        assert hook.refused[0].headers["Authorization"] == f"Bearer {secrets['hook']}"
        seen = [out]
        for args in (["status", "--json"], ["status"], ["alerts", "--json", "--all"],
                     ["alerts", "--all"]):
            r = subprocess.run([sys.executable, "-m", "watchdog", *args, "--config", str(cfg)],
                               capture_output=True, text=True, timeout=60)
            seen += [r.stdout, r.stderr]
    assert "undeliverable" in seen[1] or "invalid_auth" in "".join(seen)
    for f in (tmp_path / "state").rglob("*"):
        seen.append(f.read_bytes().decode("latin-1"))
    blob = "\n".join(seen)
    for name, value in secrets.items():
        assert value not in blob, f"the {name} secret leaked"
