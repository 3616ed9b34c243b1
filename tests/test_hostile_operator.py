"""Hostile conditions, round 2 (issue 32, cases 11-15): no operator mistake mutes a page in
silence. Each case is what a new operator does following the README and docs/install.md:
a `silence add` without `--config`, relative paths in the config, a wrong Slack token, a
typo in the config during an incident, a second `watchdog run` beside the service, the
shipped Alertmanager route and fleet rules. Each test's first docstring line names the
case as an operator would (``bench/hostile.py`` prints it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_helpers import env

# end to end: every case runs the real command as a subprocess (the whole suite and
# bench/hostile.py run them; `pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def watchdog(*args: str, cwd: Path | str | None = None, timeout: float = 60.0,
             **extra: str) -> subprocess.CompletedProcess[str]:
    """``python -m watchdog ARGS`` as an operator runs it (HOME kept apart)."""
    return subprocess.run([sys.executable, "-m", "watchdog", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env=env(**extra))


def lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


# --- the two small ones --------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--json", "--bogus"], ["--bogus", "--json"],
                                  ["--json", "--duration", "soon"]])
def test_check_json_with_a_bad_option_prints_json(argv: list[str]) -> None:
    """operator: `check --json --bogus` prints the UNKNOWN verdict as JSON (exit 3), not
    plain text a script cannot parse"""
    r = watchdog("check", *argv)
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "UNKNOWN" and doc["exit_code"] == 3
    assert "bad command line" in doc["problems"][0]["message"], doc
    assert "error:" in r.stderr and "Traceback" not in r.stderr


def test_the_permission_error_names_each_who_once(tmp_path: Path) -> None:
    """operator: the permission error never reads "run it as root, as root, or as a member
    of group root" """
    from watchdog.store.db import _who_may

    d = tmp_path / "state"
    d.mkdir()
    import grp
    import pwd

    st = d.stat()
    owner, group = pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name
    text = _who_may(d)
    for word in {"root", owner, group}:
        assert text.count(f" {word}") == 1, text
    if os.geteuid() == 0:
        assert text == "run it as root"  # root's own directory: nobody else
        os.chown(d, 65534, 65534)
        other = pwd.getpwuid(65534).pw_name
        assert _who_may(d) == (f"run it as root, as {other}, or as a member of group "
                               f"{grp.getgrgid(65534).gr_name}")


# --- 11. a silence the service never reads ----------------------------------------------------

SIM_LATE = "sim:comm_hang(for=4m)@6m"  # the hang begins 6 s into a run at 60x


def relocated(root: Path, *args: str) -> list[str]:
    """``watchdog ARGS`` with the service's places (/var/lib/nvml-watchdog,
    /etc/nvml-watchdog/watchdog.yaml) moved under ``root``, as tests/test_install_docs.py
    moves the install: the command itself is the real one."""
    code = ("import sys, pathlib; import watchdog.store.locate as l; "
            "l.SERVICE_STATE = pathlib.Path(sys.argv[1]) / 'var/lib/nvml-watchdog'; "
            "l.SERVICE_CONFIG = pathlib.Path(sys.argv[1]) / 'etc/nvml-watchdog/watchdog.yaml'; "
            "from watchdog.cli import main; sys.exit(main(sys.argv[2:]))")
    return [sys.executable, "-c", code, str(root), *args]


def root_shell(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """A command run from root's shell: its own HOME, no $STATE_DIRECTORY."""
    e = env(HOME=str(root / "root"), **extra)
    e.pop("STATE_DIRECTORY", None)
    e.pop("XDG_STATE_HOME", None)
    return subprocess.run(relocated(root, *args), capture_output=True, text=True, timeout=60,
                          env=e, cwd=root)


def test_silence_add_without_state_anywhere_refuses_and_creates_nothing(tmp_path: Path) -> None:
    """operator: `silence add` without --config where no agent keeps state refuses in one
    line naming where it looked (exit 2) and creates no state directory"""
    (tmp_path / "root").mkdir()
    r = root_shell(tmp_path, "silence", "add", "--gpu", "3", "--kind", "thermal_throttle",
                   "--for", "2h", "--comment", "fan swap")
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = lines(r.stderr)
    assert "no agent state found" in line and "var/lib/nvml-watchdog" in line, line
    assert ".local/state/nvml-watchdog" in line and "--config" in line, line
    assert "muted" not in r.stdout
    assert [p for p in tmp_path.rglob("*") if p.name == "state.db"] == []
    assert not (tmp_path / "root" / ".local").exists()
    for cmd in (("silence", "list"), ("alerts",), ("status",)):  # the same search, read-only
        r = root_shell(tmp_path, *cmd)
        assert r.returncode == 2 and "no agent state found" in r.stderr, (cmd, r.stderr)
        assert len(lines(r.stderr)) == 1


def test_silence_add_to_a_state_dir_no_agent_ever_used_is_refused(tmp_path: Path) -> None:
    """operator: `silence add --state-dir` naming a folder no agent ever ran on (a typo)
    refuses rather than create a state nobody reads"""
    typo = tmp_path / "nvml-watchdgo"
    r = watchdog("silence", "add", "--all", "--for", "1h", "--comment", "x", "--state-dir",
                 str(typo))
    assert r.returncode == 2 and "no agent state here" in r.stderr, r.stderr
    assert not typo.exists()


@pytest.mark.slow
def test_silence_add_without_config_mutes_the_running_services_page(tmp_path: Path) -> None:
    """operator: `silence add --all` from root's shell without --config reaches the
    running service's state (not ~/.local/state): the service's hang page is muted"""
    from test_hostile_agent import Agent, pages, write_config

    from watchdog.testing.httpserver import Server

    service_state = tmp_path / "var/lib/nvml-watchdog"
    (tmp_path / "root").mkdir()
    with Server() as hook:
        cfg = write_config(tmp_path, service_state, hook, source=SIM_LATE)
        agent = Agent(cfg, speed=60, duration="12m")
        agent.wait_log("watching 8 GPUs")
        r = root_shell(tmp_path, "silence", "add", "--all", "--for", "2h", "--comment",
                       "maintenance")
        assert r.returncode == 0, r.stderr
        assert f"agent pid {agent.p.pid} on {service_state}" in r.stdout, r.stdout
        assert agent.wait(60) == 0, agent.log()
        assert "FIRING   CRITICAL comm_hang" in agent.log()  # detected…
        assert [p for p in pages(hook) if "comm_hang" in p[1]] == []  # …and muted
    assert not (tmp_path / "root" / ".local").exists()  # nothing written for root's own


def test_relative_paths_in_a_config_are_the_config_folders(tmp_path: Path) -> None:
    """operator: `state_dir: ./state`, `rules:` and `token_file:` in a config are taken
    from the config's folder, not the current directory: the service (cwd /) and a
    command run from anywhere else mean the same files"""
    from watchdog.testing.httpserver import Server

    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "rules").mkdir()
    shipped = REPO / "rules" / "xid.yaml"
    (conf / "rules" / "xid.yaml").write_text(shipped.read_text())
    token = conf / "hook.token"
    token.write_text("relative-token-1234\n")
    token.chmod(0o600)
    with Server() as hook:
        cfg = conf / "w.yaml"
        cfg.write_text(f"source: sim:healthy\nstate_dir: ./state\nrules: [rules]\n"
                       f"notify:\n  sinks:\n    hook: {{type: webhook, url: \"{hook.url}/p\", "
                       f"token_file: hook.token}}\n")
        ran = watchdog("run", "--config", str(cfg), "--speed", "60", "--duration", "30s",
                       cwd="/")
        assert ran.returncode == 0, ran.stderr
        n = (REPO / "rules" / "xid.yaml").read_text().count("\n  - name:")
        assert f", {n} rules, state in {conf / 'state'})" in ran.stderr, ran.stderr
        assert (conf / "state" / "state.db").is_file()
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        r = watchdog("silence", "add", "--all", "--for", "1h", "--comment", "x", "--config",
                     str(cfg), cwd=elsewhere)
        assert r.returncode == 0 and str(conf / "state") in r.stdout, r.stdout + r.stderr
        assert list(elsewhere.iterdir()) == []  # no new, unread state directory here
        t = watchdog("alerts", "test", "--config", str(cfg), cwd="/")
        assert t.returncode == 0, t.stdout + t.stderr
        assert hook.requests[-1].headers["Authorization"] == "Bearer relative-token-1234"
    from watchdog import config

    c = config.load(cfg)
    assert c.rules == (str(conf / "rules"),) and c.state_dir == str(conf / "state")


# --- 13. a typo in the config during an incident --------------------------------------------

@pytest.mark.slow
def test_a_broken_config_still_shows_the_state_and_silences_work(tmp_path: Path) -> None:
    """operator: after a config typo and a reload (the agent keeps its running config),
    `status`, `alerts` and `silence add/list/expire` with --config still work and say the
    config is broken"""
    import signal

    from test_hostile_agent import Agent, write_config

    from watchdog.testing.httpserver import Server

    state = tmp_path / "state"
    with Server() as hook:
        cfg = write_config(tmp_path, state, hook, source="sim:healthy")
        agent = Agent(cfg, speed=1, duration="90s")
        agent.wait_log("watching 8 GPUs")
        cfg.write_text(cfg.read_text().replace("group_wait: 10s", "group_wiat: 10s"))
        agent.p.send_signal(signal.SIGHUP)
        agent.wait_log("reload failed")
        c = ["--config", str(cfg)]
        st = watchdog("status", *c)
        assert st.returncode == 0, st.stdout + st.stderr  # the agent runs: its state is fine
        (warning,) = lines(st.stderr)
        assert "config is broken" in warning and "group_wiat" in warning, warning
        assert "config: BROKEN" in st.stdout and "agent RUNNING" in st.stdout, st.stdout
        doc = json.loads(watchdog("status", "--json", *c).stdout)
        assert "group_wiat" in doc["config_error"] and doc["state_dir"] == str(state)
        al = watchdog("alerts", "--json", *c)
        assert al.returncode == 0 and "group_wiat" in json.loads(al.stdout)["config_error"]
        add = watchdog("silence", "add", "--gpu", "0", "--for", "1h", "--comment", "oncall", *c)
        assert add.returncode == 0 and f"agent pid {agent.p.pid}" in add.stdout, add.stderr
        assert "oncall" in watchdog("silence", "list", *c).stdout
        assert watchdog("silence", "expire", "1", *c).returncode == 0
        assert agent.stop() == 0
    assert "Traceback" not in agent.log()


def test_a_config_path_that_does_not_exist_is_still_an_error(tmp_path: Path) -> None:
    """operator: `status --config` with a wrong path is one line and exit 2 (a file that
    is not there names no agent; only a broken one is read leniently)"""
    r = watchdog("silence", "add", "--all", "--for", "1h", "--comment", "x", "--config",
                 str(tmp_path / "watchdgo.yaml"))
    assert r.returncode == 2 and len(lines(r.stderr)) == 1 and "watchdgo.yaml" in r.stderr


# --- 12. a sink that refuses everything -------------------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_incident_about_a_down_sink_goes_to_the_other_sinks() -> None:
    """sink: the agent's incident about a sink that is down never waits in that sink's
    queue, and reaches the working sinks even where the routes send its severity only to
    the down one"""
    from watchdog.notify.config import NotifyConfig, Route, SinkSpec

    cfg = NotifyConfig(
        sinks=tuple(SinkSpec(n, "log", {}, "x") for n in ("pagerduty", "slack")),
        routes=(Route(("pagerduty", "slack"), severity=frozenset({"critical"})),
                Route(("slack",))))
    assert cfg.sinks_for("critical", "agent", down="slack") == ("pagerduty",)
    assert cfg.sinks_for("warning", "agent", down="slack") == ("pagerduty",)  # fallback
    assert cfg.sinks_for("warning", "agent", down="pagerduty") == ("slack",)
    assert cfg.sinks_for("warning", "xid", down="slack") == ("slack",)  # only `agent`


def test_status_exits_1_and_says_down_while_a_sink_refuses_everything(tmp_path: Path) -> None:
    """sink: `watchdog status` of a running agent whose Slack sink refuses everything
    exits 1 and says ALERTING DOWN, not "slack: ok" with exit 0"""
    import time

    from watchdog.store.agent import AgentStore
    from watchdog.store.store import Store

    now = time.time()
    sink = {"type": "slack", "pending": 0, "sent": 0, "oldest_pending_s": None,
            "failing_since": None, "last_error": "slack: invalid_auth", "undeliverable": 4,
            "refused": 4, "refused_since": now - 60, "down": "alerting sink slack (slack) "
            "refuses every notification", "down_severity": "critical"}
    doc = {"host": "node7", "source": "nvml", "now": now, "started_at": now - 600,
           "interval_s": 1.0, "ticks": 600, "missed_ticks": 0, "gpus": [],
           "alerting": {"alerts_firing": 1, "silences": 0, "dropped": 0,
                        "sinks": {"slack": sink}, "problems": []}}
    store = AgentStore(Store(tmp_path), "nvml")
    store.write_status(doc, now)
    store.db.close()
    r = watchdog("status", "--state-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "agent RUNNING but ALERTING DOWN (slack)" in r.stdout, r.stdout
    assert "slack (slack): DOWN: refuses every notification" in r.stdout, r.stdout
    assert "slack (slack): ok" not in r.stdout
    sink.update(refused=0, refused_since=None, down=None, undeliverable=0)
    store = AgentStore(Store(tmp_path), "nvml")
    store.write_status(doc, now)
    store.db.close()
    r = watchdog("status", "--state-dir", str(tmp_path))
    assert r.returncode == 0 and "slack (slack): ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_a_wrong_slack_token_is_down_in_status_metrics_and_an_agent_page(tmp_path: Path) -> None:
    """sink: a wrong Slack token (every page refused with invalid_auth, not retried) is
    DOWN: status exits 1, watchdog_notify_sink_up{sink="slack"} is 0, and an `agent`
    incident is paged to the sink that works, never to Slack"""
    import time
    import urllib.request

    from test_hostile_agent import Agent

    from watchdog.testing.httpserver import Reply, Server

    port = _free_port()
    with Server(Reply(200, {"ok": False, "error": "invalid_auth"})) as slack, \
            Server() as hook:
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f"""source: sim:comm_hang(for=4m)@2m
state_dir: {tmp_path / 'state'}
metrics: {{listen: 127.0.0.1:{port}}}
notify:
  group_wait: 10s
  resolve_hold: 10s
  routes:
    - {{match: {{severity: critical}}, sinks: [hook, slack]}}
    - {{sinks: [slack]}}
  sinks:
    - {{name: slack, type: slack, token_env: T_SLACK, channel: "#gpu",
       api_url: "{slack.url}/api/"}}
    - {{name: hook, type: webhook, url: "{hook.url}/page"}}
""")
        agent = Agent(cfg, speed=60, duration="12m", extra_env={"T_SLACK": "xoxb-wrong-1"})
        agent.wait_log("sink slack refused a notification", timeout=40)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            st = watchdog("status", "--config", str(cfg))
            if "ALERTING DOWN" in st.stdout:
                break
            time.sleep(0.2)
        assert st.returncode == 1, st.stdout + st.stderr
        assert "agent RUNNING but ALERTING DOWN (slack)" in st.stdout, st.stdout
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        up = {line.split("} ")[0]: line.rsplit(" ", 1)[1] for line in body.decode().splitlines()
              if line.startswith("watchdog_notify_sink_up{")}
        assert [v for k, v in up.items() if 'sink="slack"' in k] == ["0.0"], up
        assert [v for k, v in up.items() if 'sink="hook"' in k] == ["1.0"], up
        assert agent.wait(60) == 0, agent.log()
    agent_pages = [a for r in hook.requests if isinstance(r.body, dict)
                   for a in r.body["alerts"] if a["labels"]["alertname"] == "agent"]
    assert agent_pages and agent_pages[0]["labels"]["rule"] == "sink_down", hook.requests
    assert agent_pages[0]["labels"]["severity"] == "critical"  # Slack carries critical pages
    summary = agent_pages[0]["annotations"]["summary"]
    assert "alerting sink slack (slack) refuses every notification" in summary, summary
    assert "invalid_auth" in summary and "xoxb-wrong-1" not in summary
    sent_to_slack = json.dumps([r.body for r in slack.requests])
    assert "refuses every notification" not in sent_to_slack  # never queued behind itself
    assert "comm_hang" in json.dumps([r.body for r in hook.requests])  # the hang still paged


# --- 14. one agent per node ------------------------------------------------------------------

class FakeNodeAgent:
    """`watchdog run` on the fake NVML (``xid``: two XIDs at once, one critical), real
    speed; stderr to a file."""

    def __init__(self, cfg: Path, *args: str, prefix: tuple[str, ...] = (),
                 duration: str = "60s") -> None:
        import time

        self.logfile = cfg.parent / f"agent-{time.monotonic_ns()}.log"
        self._err = open(self.logfile, "w")  # noqa: SIM115 - closed in wait()
        self.p = subprocess.Popen(
            [*prefix, sys.executable, "-m", "watchdog.testing.fakenvml", "xid", "--",
             "watchdog", "run", "--config", str(cfg), "--duration", duration, *args],
            stdout=self._err, stderr=self._err, env=env(HOME=str(cfg.parent)))

    def log(self) -> str:
        return self.logfile.read_text()

    def wait_log(self, text: str, timeout: float = 60.0) -> None:
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end and self.p.poll() is None:
            if text in self.log():
                return
            time.sleep(0.05)
        assert text in self.log(), self.log()

    def wait(self, timeout: float = 60.0) -> int:
        rc = self.p.wait(timeout)
        self._err.close()
        return rc


def node_config(folder: Path, name: str, url: str) -> Path:
    d = folder / name
    d.mkdir()
    cfg = d / "w.yaml"
    cfg.write_text(f"state_dir: {d / 'state'}\nnotify:\n  group_wait: 0s\n  sinks:\n"
                   f"    hook: {{type: webhook, url: \"{url}/page\"}}\n")
    return cfg


@pytest.mark.slow
def test_a_second_agent_on_the_same_gpus_is_refused_and_a_shadow_never_notifies(
        tmp_path: Path) -> None:
    """agent: a second `watchdog run` with its own state directory on the same GPUs exits 2
    naming the first (pid, state); with --shadow it runs, detects, and never notifies"""
    import signal

    from watchdog.testing.httpserver import Server

    with Server() as hook, Server() as other:
        service = FakeNodeAgent(node_config(tmp_path, "service", hook.url))
        service.wait_log("watching 8 GPUs")
        mine = node_config(tmp_path, "mine", other.url)
        second = FakeNodeAgent(mine, duration="5s")
        assert second.wait() == 2, second.log()
        (line,) = lines(second.log())
        assert "is watched by another nvml-watchdog agent" in line, line
        assert f"pid {service.p.pid}" in line and str(tmp_path / "service" / "state") in line
        assert "--shadow" in line
        assert not (mine.parent / "state" / "state.db").exists()  # it changed nothing
        shadow = FakeNodeAgent(mine, "--shadow", duration="4s")
        assert shadow.wait() == 0, shadow.log()
        assert "SHADOW" in shadow.log() and "FIRING   CRITICAL xid" in shadow.log()
        st = watchdog("status", "--config", str(mine))
        assert "SHADOW" in st.stdout, st.stdout
        service.p.send_signal(signal.SIGTERM)
        assert service.wait() == 0, service.log()
        assert other.requests == [] and other.connections == 0  # the shadow never notified
        assert [r.body["reason"] for r in hook.requests][:1] == ["new"]  # the service did
        # the claims go with the agent: a new one starts at once
        again = FakeNodeAgent(mine, duration="2s")
        assert again.wait() == 0, again.log()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a mount and pid namespace)")
def test_an_agent_in_a_container_sharing_the_claims_is_refused(tmp_path: Path) -> None:
    """agent: a second agent in its own mount and pid namespace (a container) that mounts
    the host's claims directory at another path is refused: the claim is the GPU's UUID,
    not a path or a pid"""
    import shutil
    import signal

    from watchdog.testing.httpserver import Server

    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    with Server() as hook:
        service = FakeNodeAgent(node_config(tmp_path, "host", hook.url))
        service.wait_log("watching 8 GPUs")
        inside = tmp_path / "container-run"
        inside.mkdir()
        shared = os.environ["RUNTIME_DIRECTORY"]
        script = ('mount --bind "$1" "$2" && export RUNTIME_DIRECTORY="$2" && shift 2 && '
                  'exec "$@"')
        boxed = FakeNodeAgent(node_config(tmp_path, "container", hook.url), duration="5s",
                              prefix=("unshare", "--mount", "--pid", "--fork", "--mount-proc",
                                      "sh", "-c", script, "sh", shared, str(inside)))
        assert boxed.wait() == 2, boxed.log()
        assert "is watched by another nvml-watchdog agent" in boxed.log()
        assert str(tmp_path / "host" / "state") in boxed.log()
        service.p.send_signal(signal.SIGTERM)
        assert service.wait() == 0, service.log()


def test_claims_are_per_gpu_uuid_and_go_with_their_holder(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """agent: a claim overlapping on one GPU is refused whole (nothing left held), and
    released claims can be taken again at once"""
    from watchdog.store import claims

    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "run"))
    first = claims.claim(["GPU-a", "GPU-b"], {"pid": 11, "state_dir": "/s1"})
    assert first is not None
    with pytest.raises(claims.SecondAgent, match=r"GPU GPU-b .*pid 11, state /s1"):
        claims.claim(["GPU-b", "GPU-0"], {"pid": 12})  # GPU-0 is taken first, then GPU-b
    other = claims.claim(["GPU-0"], {"pid": 13})  # GPU-0 was not left held by the refusal
    assert other is not None
    first.release()
    again = claims.claim(["GPU-a", "GPU-b"], {"pid": 14})
    assert again is not None
    again.release()
    other.release()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []


# --- 15. the shipped Alertmanager route and the fleet rules ------------------------------------

AMTOOL = __import__("shutil").which("amtool")
PROMTOOL = __import__("shutil").which("promtool")
AM_CONFIG = REPO / "config" / "alertmanager-fleet.yml"


@pytest.mark.skipif(AMTOOL is None, reason="amtool is not installed (Debian's "
                    "prometheus-alertmanager; .ci/run installs it)")
@pytest.mark.parametrize(("labels", "receiver"), [
    # the fleet rules' alerts
    ("alertname=JobHangCulprit severity=critical job_id=4242 node=a064", "pager"),
    ("alertname=JobHang severity=critical job_id=4242", "pager"),
    ("alertname=JobStall severity=warning job_id=4242", "slack"),
    ("alertname=JobStragglerNode severity=warning job_id=4242 node=a3", "slack"),
    ("alertname=WatchdogAgentDown severity=warning node=a1 instance=a1:9849", "slack"),
    ("alertname=WatchdogSinkFailing severity=warning node=a1 sink=slack", "slack"),
    # the nodes' own alerts (their alertmanager sink)
    ("source=nvml-watchdog alertname=comm_hang severity=critical job_id=4242 node=a1", "pager"),
    ("source=nvml-watchdog alertname=stall severity=warning job_id=4242 node=a1", "slack"),
    ("source=nvml-watchdog alertname=xid severity=critical node=a1 gpu=3", "pager"),
    ("source=nvml-watchdog alertname=xid severity=warning node=a1 gpu=3", "slack"),
    ("source=nvml-watchdog alertname=thermal_throttle severity=warning node=a1", "slack"),
    ("source=nvml-watchdog alertname=agent severity=critical node=a1", "pager"),
    ("source=nvml-watchdog alertname=memory_pressure severity=info node=a1", "slack"),
])
def test_the_shipped_alertmanager_route_pages_critical_and_slacks_warnings(
        labels: str, receiver: str) -> None:
    """fleet: config/alertmanager-fleet.yml sends critical alerts to PagerDuty (and Slack)
    and warnings to Slack only, as the docs say (amtool, Alertmanager's own routing)"""
    r = subprocess.run([AMTOOL, "config", "routes", "test", f"--config.file={AM_CONFIG}",
                        *labels.split()], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == receiver, (labels, r.stdout)
    receivers = {x["name"]: x for x in __import__("yaml").safe_load(AM_CONFIG.read_text())[
        "receivers"]}
    assert set(receivers) == {"pager", "slack"}
    assert "pagerduty_configs" not in receivers["slack"]  # a warning never pages


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian's "
                    "prometheus; .ci/run installs it)")
def test_the_exported_fleet_rules_watch_the_agents_themselves(tmp_path: Path) -> None:
    """fleet: the exported fleet rules alert on an agent that is down, a sink that keeps
    failing and a node nobody watches (promtool check and unit tests on the export)"""
    import yaml

    exported = tmp_path / "fleet.yml"
    r = watchdog("rules", "export", "--prometheus")
    assert r.returncode == 0, r.stderr
    exported.write_text(r.stdout)
    check = subprocess.run([PROMTOOL, "check", "rules", str(exported)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS" in check.stdout, check.stdout + check.stderr
    sys.path.insert(0, str(REPO / "tests" / "prometheus"))
    try:
        import make_fleet_test
    finally:
        sys.path.pop(0)
    health = ("WatchdogAgentDown", "WatchdogSinkFailing", "WatchdogNodeUnwatched")
    cases = [c for c in make_fleet_test.cases()
             if {a["alertname"] for a in c["alert_rule_test"]} <= set(health)]
    tested = {a["alertname"] for c in cases for a in c["alert_rule_test"] if a["exp_alerts"]}
    assert tested == set(health)
    unit = tmp_path / "health_test.yml"
    unit.write_text(yaml.safe_dump({"rule_files": [str(exported)], "evaluation_interval": "10s",
                                    "tests": cases}, sort_keys=False, width=200))
    out = subprocess.run([PROMTOOL, "test", "rules", str(unit)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_claim_refused_after_the_start_mutes_and_stops_the_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """agent: where NVML answered only after both agents started, the one that finds the
    GPUs claimed when they open is muted and stopped (exit 2), never left paging"""
    from watchdog.errors import SourceUnavailable
    from watchdog.service.claim import GpuClaim
    from watchdog.sources import SourceOptions
    from watchdog.store import claims
    from watchdog.testing import fakenvml

    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "run"))
    fakenvml.install("healthy")
    try:
        from watchdog.sources.nvml import NvmlSource

        src = NvmlSource()
        uuids = [d.uuid for d in src.devices()]
        src.close()
        first = claims.claim(uuids, {"pid": 4242, "state_dir": "/var/lib/nvml-watchdog"})
        refused: list[Exception] = []
        gpus = GpuClaim({"pid": 1}, wanted=True)
        # NVML did not answer at start
        opener = gpus.opener("nvml", SourceOptions(), None, on_refused=refused.append)
        with pytest.raises(SourceUnavailable, match="pid 4242, state /var/lib/nvml-watchdog"):
            opener(0.0)
        assert len(refused) == 1 and gpus.claims is None
        first.release()
        source = opener(1.0)  # once free, the next open claims them
        assert gpus.claims is not None and not gpus.pending
        source.close()
        gpus.release()
    finally:
        fakenvml.uninstall()
