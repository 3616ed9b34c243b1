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
