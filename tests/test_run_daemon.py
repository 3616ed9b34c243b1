"""`watchdog run` end to end, as the service runs it: a real subprocess on the fake NVML.

The shipped example config and the unit's ExecStart, `--source nvml`, a config without
`source:` on a node without a driver (never the demo), SIGTERM, SIGHUP with a good and a
bad config, sd_notify messages on a datagram socket the test creates, `watchdog status`
on a running and on a stopped agent, and the README's demo.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FAKE = [sys.executable, "-m", "watchdog.testing.fakenvml"]


class Agent:
    """A `watchdog run` subprocess whose output goes to files the test can poll."""

    def __init__(self, tmp: Path, scenario: str, args: list[str],
                 env: dict[str, str] | None = None) -> None:
        self.out = tmp / "stdout.txt"
        self.err = tmp / "stderr.txt"
        full_env = {**os.environ, "STATE_DIRECTORY": str(tmp / "state"), "HOME": str(tmp),
                    **(env or {})}
        full_env.pop("JOURNAL_STREAM", None)
        self.proc = subprocess.Popen(
            [*FAKE, scenario, "--", "watchdog", *args], cwd=tmp,
            stdout=self.out.open("w"), stderr=self.err.open("w"), env=full_env)

    def text(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_for(self, needle: str, timeout: float = 60.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            t = self.text()
            if needle in t:
                return t
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"{needle!r} not seen in {timeout:g} s; output:\n{self.text()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _status(tmp: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    env = {**os.environ, "STATE_DIRECTORY": str(tmp / "state")}
    r = subprocess.run([sys.executable, "-m", "watchdog", "status", "--json", *extra],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def _config(tmp: Path, text: str | None = None) -> Path:
    cfg = tmp / "watchdog.yaml"
    cfg.write_text(text if text is not None else (REPO / "config" / "watchdog.yaml").read_text())
    return cfg


@pytest.mark.slow
def test_the_shipped_config_runs_the_real_gpus_and_stops_cleanly(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    a = Agent(tmp_path, "healthy", ["run", "--config", str(cfg), "--duration", "3s"])
    try:
        assert a.proc.wait(90) == 0, a.text()
    finally:
        a.kill()
    assert "watching 8 GPUs" in a.text() and "source nvml" in a.text()
    assert "Traceback" not in a.text() and "internal error" not in a.text()
    rc, doc = _status(tmp_path)
    assert rc == 1 and doc["stopped_at"] and doc["source"] == "nvml"  # stopped: exit 1
    assert doc["source_state"] == "ok" and len(doc["gpus"]) == 8 and doc["ticks"] >= 3


@pytest.mark.slow
def test_source_nvml_on_the_command_line(tmp_path: Path) -> None:
    a = Agent(tmp_path, "healthy", ["run", "--source", "nvml", "--duration", "2s"])
    try:
        assert a.proc.wait(90) == 0, a.text()
    finally:
        a.kill()
    assert "watching 8 GPUs" in a.text()


@pytest.mark.slow
def test_a_config_without_source_on_a_node_without_driver_never_runs_the_demo(
        tmp_path: Path) -> None:
    """Production: stays up, one node-level nvml_error incident, no simulated alerts."""
    cfg = _config(tmp_path, "interval: 1s\n")
    a = Agent(tmp_path, "no_library", ["run", "--config", str(cfg)])
    try:
        text = a.wait_for("FIRING")
        assert "nvml_error" in text and "node" in text
        time.sleep(2)
        assert a.proc.poll() is None  # still up, retrying
        _rc, doc = _status(tmp_path, "--config", str(cfg))
        assert doc["source"] == "nvml" and doc["source_state"] == "unavailable"
        assert [i["kind"] for i in doc["active_incidents"]] == ["nvml_error"]
        assert a.stop() == 0
    finally:
        a.kill()
    text = a.text()
    assert "simulated demo" not in text and "comm_hang" not in text and "sim-node" not in text


def _notify_socket(tmp: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(tmp / "notify.sock"))
    s.settimeout(1.0)
    return s


def _messages(sock: socket.socket, want: str, timeout: float = 60.0) -> list[str]:
    got: list[str] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
        if any(want in m for m in got):
            return got
    raise AssertionError(f"no {want!r} from the agent; got {got}")


@pytest.mark.slow
def test_sd_notify_status_sighup_and_sigterm(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    sock = _notify_socket(tmp_path)
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "2000000"}
    a = Agent(tmp_path, "healthy", ["run", "--config", str(cfg)], env=env)
    try:
        got = _messages(sock, "READY=1")
        ready = next(m for m in got if "READY=1" in m)
        assert "STATUS=watching 8 GPUs" in ready and f"MAINPID={a.proc.pid}" in ready
        _messages(sock, "WATCHDOG=1", timeout=10)
        rc, doc = _status(tmp_path, "--config", str(cfg))
        assert rc == 0 and not doc["stale"] and doc["ticks"] >= 1 and "stopped_at" not in doc
        human = subprocess.run([sys.executable, "-m", "watchdog", "status", "--config", str(cfg)],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ, "STATE_DIRECTORY": str(tmp_path / "state")})
        assert human.returncode == 0 and "agent RUNNING" in human.stdout
        assert "GPUs: 8" in human.stdout

        # a bad edit: logged with file:line, the running config stays
        cfg.write_text("source: nvml\ninterval: soon\n")
        a.proc.send_signal(signal.SIGHUP)
        text = a.wait_for("reload failed")
        assert f"{cfg}:2" in text and "keeping the running config" in text
        assert a.proc.poll() is None
        # a good edit: applied
        cfg.write_text("source: nvml\ninterval: 2s\n")
        a.proc.send_signal(signal.SIGHUP)
        text = a.wait_for("reloaded:")
        assert "interval now 2s" in text
        _messages(sock, "RELOADING=1", timeout=5)

        assert a.stop() == 0
        _messages(sock, "STOPPING=1", timeout=5)
    finally:
        a.kill()
        sock.close()
    rc, doc = _status(tmp_path, "--config", str(cfg))
    assert rc == 1 and doc["stopped_at"] is not None
    assert "Traceback" not in a.text()


def test_the_units_execstart_runs_on_the_fake_nvml(tmp_path: Path) -> None:
    """The exact command line of config/nvml-watchdog.service, with the install paths
    pointed at this checkout (the binary and the config are the only substitutions)."""
    unit = (REPO / "config" / "nvml-watchdog.service").read_text()
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    argv = shlex.split(line.removeprefix("ExecStart="))
    assert argv[0] == "/opt/nvml-watchdog/bin/watchdog"
    cfg = _config(tmp_path)
    args = [str(cfg) if x == "/etc/nvml-watchdog/watchdog.yaml" else x for x in argv[1:]]
    sock = _notify_socket(tmp_path)
    a = Agent(tmp_path, "healthy", args, env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    try:
        _messages(sock, "READY=1")
        assert a.stop() == 0
    finally:
        a.kill()
        sock.close()


@pytest.mark.slow
def test_the_readme_demo_shows_a_hang_within_seconds(tmp_path: Path) -> None:
    """README's first command ends in `watchdog run`: with no driver and no config it runs
    the simulated node and a hung collective is alerted within seconds; Ctrl-C stops it."""
    readme = (REPO / "README.md").read_text()
    first = next(x for x in readme.splitlines() if "pip install" in x)
    assert first.rstrip().endswith(".venv/bin/watchdog run")
    a = Agent(tmp_path, "no_library", ["run"])
    try:
        # "within seconds" is the demo's own timing (the hang fires ~5 simulated minutes
        # in, at 30x); the wait is only a guard against a broken agent
        text = a.wait_for("FIRING", timeout=120)
        assert "comm_hang" in text and "demo" in text and "30x speed" in text
        assert a.stop(signal.SIGINT) == 0
    finally:
        a.kill()


@pytest.mark.parametrize("bad,message", [
    ("interval: 0s\n", "interval must be positive"),
    ("intreval: 1s\n", "unknown setting 'intreval'"),
    ("source: gpu.csv\n", "the daemon reads nvml or sim"),
    ("metrics: {listen: nowhere}\n", "metrics.listen"),
])
def test_a_bad_config_is_one_line_naming_file_and_line(tmp_path: Path, bad: str,
                                                       message: str) -> None:
    cfg = _config(tmp_path, "# comment\n" + bad)
    r = subprocess.run([sys.executable, "-m", "watchdog", "run", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "STATE_DIRECTORY": str(tmp_path / "state")})
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and f"{cfg}:2" in r.stderr and message in r.stderr


def _since_s(text: str) -> float:
    """Seconds between a comm_hang's condition start and its FIRING line."""
    import re

    m = re.search(r"FIRING +CRITICAL comm_hang .*\(for (?:(\d+) min)? ?(?:(\d+) s)?\)", text)
    assert m and (m.group(1) or m.group(2)), text
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


def _sim_run(tmp: Path, state: Path, scenario: str, duration: str) -> str:
    r = subprocess.run([sys.executable, "-m", "watchdog", "run", "--source", scenario,
                        "--speed", "240", "--duration", duration, "--state-dir", str(state)],
                       capture_output=True, text=True, timeout=120, cwd=tmp,
                       env={**os.environ, "HOME": str(tmp)})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    return r.stdout + r.stderr


@pytest.mark.slow
def test_a_restart_keeps_the_learned_wait_so_a_hang_pages_as_early(tmp_path: Path) -> None:
    """Run 1 trains for a simulated hour (checkpoints teach the hang rule the node's longest
    legitimate wait) and stops; run 2 on the same state pages a hang earlier than an agent
    with no state, because it does not fall back to the default wait."""
    state = tmp_path / "state"
    _sim_run(tmp_path, state, "sim:healthy", "1h")
    r = subprocess.run([sys.executable, "-m", "watchdog", "status", "--json", "--state-dir",
                        str(state)], capture_output=True, text=True, timeout=60)
    stored = json.loads(r.stdout)["learned_waits_stored"]
    assert [w["rule"] for w in stored] == ["comm_hang"] and stored[0]["longest_s"] > 0
    after = _sim_run(tmp_path, state, "sim:comm_hang@5m", "15m")
    assert "learned waits restored: comm_hang" in after
    fresh = _sim_run(tmp_path, tmp_path / "fresh", "sim:comm_hang@5m", "15m")
    assert _since_s(after) < _since_s(fresh)


@pytest.mark.slow
def test_a_wedged_nvml_call_pages_nvml_error_while_the_other_gpus_go_on(tmp_path: Path) -> None:
    """Fake scenario blocking_call: GPU 2's power reading never returns. Within 60 s of the
    first timed-out call the agent raises nvml_error on GPU 2 only, and keeps sampling the
    other seven."""
    cfg = _config(tmp_path, "source: nvml\ninterval: 1s\ncall_timeout: 0.5s\n")
    a = Agent(tmp_path, "blocking_call", ["run", "--config", str(cfg)])
    try:
        a.wait_for("watching 8 GPUs", timeout=60)
        text = a.wait_for("nvml_error", timeout=180)  # a guard: the rule waits 60 s
        line = next(x for x in text.splitlines() if "FIRING" in x and "nvml_error" in x)
        assert "GPU 2" in line or "GPUs 2" in line, line
        rc, doc = _status(tmp_path, "--config", str(cfg))
        assert rc == 0 and doc["nvml_errors"]["total"] > 0
        gpu2 = next(g["uuid"] for g in doc["gpus"] if str(g["index"]) == "2")
        assert set(doc["nvml_errors"]["by_gpu"]) == {gpu2}
        assert len(doc["gpus"]) == 8
        ticks = doc["ticks"]
        time.sleep(6)  # the status is written every 5 s
        assert _status(tmp_path, "--config", str(cfg))[1]["ticks"] > ticks
        assert a.stop() == 0
    finally:
        a.kill()
    assert "Traceback" not in a.text()


@pytest.mark.slow
def test_duration_ends_the_run_between_ticks(tmp_path: Path) -> None:
    # --duration is a promise about wall time, not "after the next tick": with one tick
    # an hour, a 3 s run still ends after about 3 s (it used to wait for the next tick)
    a = Agent(tmp_path, "healthy", ["run", "--source", "nvml", "--interval", "1h",
                                    "--duration", "3s"])
    try:  # the next tick is an hour away: ending at all is ending between ticks
        assert a.proc.wait(120) == 0, a.text()
    finally:
        a.kill()
    assert "watching 8 GPUs" in a.text() and "Traceback" not in a.text()
    rc, doc = _status(tmp_path)
    assert rc == 1 and doc["stopped_at"] and doc["ticks"] == 1
