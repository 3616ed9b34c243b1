"""Hostile conditions around the running agent, each through the real `watchdog run` (and
`status`, `alerts`, `silence`) as subprocesses, the way an operator meets them: a second
agent on the same state, a start refused half-way, a full disk, a rotten or read-only or
missing state directory, a wall clock that steps, a taken metrics port, a bad reload,
commands run by users who may or may not read the state, and the journal.

Every case states a budget for the agent's peak memory (the unit's MemoryMax), measured by
``bench/hostile.py``; the waits here are hang guards, not bounds on speed. Each page that
is due must reach the webhook receiver exactly once. Cases that need root (a tmpfs for a
full disk, a read-only mount, another user) skip with the reason when not root; CI runs
as root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hostile_helpers import MEMORY_MAX_MB, PeakRss, budget, env

from watchdog.testing.httpserver import Server

SIM = "sim:comm_hang(for=4m)@2m"
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root (mounts a tmpfs / another user)")
FAKETIME_LIB = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                                 "/usr/lib/faketime/libfaketimeMT.so.1") if Path(p).exists()),
                    None)


# --- helpers ------------------------------------------------------------------------------

@pytest.fixture
def hook() -> Iterator[Server]:
    with Server() as s:
        yield s


def write_config(tmp: Path, state: Path, hook: Server, extra: str = "",
                 source: str = SIM) -> Path:
    cfg = tmp / "w.yaml"
    cfg.write_text(f"""source: {source}
state_dir: {state}
notify:
  group_wait: 10s
  resolve_hold: 10s
  sinks:
    hook: {{type: webhook, url: "{hook.url}/page"}}
{extra}""")
    return cfg


class Agent:
    """A running `watchdog run`; its stderr goes to a file (read with :meth:`log`)."""

    def __init__(self, cfg: Path, *, speed: int = 60, duration: str = "12m",
                 extra_env: dict[str, str] | None = None, preexec: Callable[[], None] | None
                 = None, args: tuple[str, ...] = ()) -> None:
        self.logfile = cfg.parent / f"agent-{time.monotonic_ns()}.log"
        self._err = open(self.logfile, "w")  # noqa: SIM115 - closed in wait()
        self.p = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "run", "--config", str(cfg), "--speed",
             str(speed), "--duration", duration, *args], cwd=cfg.parent,
            stdout=self._err, stderr=self._err, env=env(HOME=str(cfg.parent),
                                                        **(extra_env or {})),
            preexec_fn=preexec)
        self.peak = PeakRss(self.p.pid, every_s=0.05)
        self.peak_rss_mb = 0.0

    def log(self) -> str:
        return self.logfile.read_text()

    def wait_log(self, text: str, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.log():
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not logged within {timeout} s:\n{self.log()}")

    def wait(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            pid, status, _usage = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                self.p.returncode = os.waitstatus_to_exitcode(status)
                self.peak.stop()
                self.peak_rss_mb = self.peak.mb
                break
            if time.monotonic() > deadline:
                self.p.kill()
                self.p.wait()
                raise AssertionError(f"agent still running after {timeout} s:\n{self.log()}")
            time.sleep(0.05)
        self._err.close()
        budget(rss_mb=MEMORY_MAX_MB, peak_rss_mb=self.peak_rss_mb)
        return self.p.returncode

    def stop(self) -> int:
        self.p.send_signal(signal.SIGTERM)
        return self.wait(30)


def watchdog(*args: str, user: str | None = None, groups: str | None = None,
             timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """A command as an operator runs it (as another user with ``user``/``groups``)."""
    cmd = [sys.executable, "-m", "watchdog", *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={groups or user}",
               f"--groups={groups}" if groups else "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=env(HOME="/nonexistent"))


def pages(hook: Server) -> list[tuple[str, str]]:
    """``(reason, kinds)`` of every page the receiver got, in order."""
    return [(r.body["reason"], ",".join(sorted({a["labels"]["alertname"]
                                                for a in r.body["alerts"]})))
            for r in hook.requests if isinstance(r.body, dict)]


def hang_pages(hook: Server) -> list[str]:
    """The reasons of the pages that changed the comm_hang alert (new, update, resolved)."""
    out = []
    for r in hook.requests:
        if not isinstance(r.body, dict):
            continue
        for a in r.body["alerts"]:
            if a["labels"]["alertname"] == "comm_hang" and a["fingerprint"] in r.body["changed"]:
                out.append(a["status"])
    return out


def wait_for(done: Callable[[], bool], agent: Agent, what: str,
             guard_s: float = 120.0) -> None:
    """Poll until ``done()``; the guard only keeps a broken agent from hanging the suite
    (it is no bound on how fast the agent is)."""
    end = time.monotonic() + guard_s
    while not done():
        if agent.p.poll() is not None or time.monotonic() > end:
            raise AssertionError(f"never saw {what}:\n{agent.log()[-3000:]}")
        time.sleep(0.05)


def db_rows(state: Path, sql: str) -> list[tuple[object, ...]]:
    c = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        return c.execute(sql).fetchall()
    finally:
        c.close()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (a small disk that can fill up and be remounted read-only)."""
    if not ROOT:
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(mnt: Path) -> None:
    # unbuffered: a short last write must not leave bytes for close() to fail on
    with open(mnt / "fill", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


# --- one agent per state directory -----------------------------------------------------------

@pytest.mark.slow
def test_a_second_agent_on_the_same_state_is_refused_and_changes_nothing(
        tmp_path: Path, hook: Server) -> None:
    """agent: a second agent on the same state dir exits 2 naming the first's pid, and
    the first's incident and pages are untouched"""
    state = tmp_path / "state"
    cfg = write_config(tmp_path, state, hook, extra="model: off\n")
    # the first runs until it is stopped, so the second always starts while the first
    # holds the state, however slowly a busy machine starts either
    first = Agent(cfg, speed=60, duration="24h")
    try:
        wait_for(lambda: hang_pages(hook) == ["firing", "resolved"], first,
                 "the first agent's hang page and its resolve")
        # the hang came and went: nothing of the first's changes while the second runs
        before = db_rows(state, "SELECT id, summary, resolved_at FROM incidents")
        second = watchdog("run", "--config", str(cfg), "--speed", "60", "--duration", "1m",
                          timeout=120)
        assert second.returncode == 2, second.stderr
        lines = [x for x in second.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and f"pid {first.p.pid}" in lines[0], second.stderr
        assert db_rows(state, "SELECT id, summary, resolved_at FROM incidents") == before
        assert first.p.poll() is None, first.log()[-3000:]
    finally:
        rc = first.stop()
    assert rc == 0, first.log()[-3000:]
    assert hang_pages(hook) == ["firing", "resolved"]  # once each, from the first agent


@pytest.mark.slow
def test_a_start_refused_for_a_bad_key_file_changes_nothing_and_kill_9_blocks_nothing(
        tmp_path: Path, hook: Server) -> None:
    """agent: a start refused for a 0644 key file changes no state, and a restart after
    kill -9 is never blocked by a stale lock"""
    state = tmp_path / "state"
    cfg = write_config(tmp_path, state, hook)
    a = Agent(cfg, speed=60, duration="8m")
    a.wait_log("FIRING   CRITICAL comm_hang", timeout=40)
    time.sleep(0.5)
    a.p.kill()  # kill -9 with the incident active
    a.p.wait()
    a.peak.stop()
    a._err.close()
    snapshot = (db_rows(state, "SELECT id, resolved_at, summary FROM incidents"),
                db_rows(state, "SELECT fp, state, doc FROM notify_alerts"))
    key = tmp_path / "pd.key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    key.chmod(0o644)
    pd = f"    pd: {{type: pagerduty, routing_key_file: {key}}}\n"
    bad = write_config(tmp_path, state, hook, extra=pd)
    r = watchdog("run", "--config", str(bad), "--duration", "1m")
    assert r.returncode == 2 and "readable by others" in r.stderr, r.stderr
    assert (db_rows(state, "SELECT id, resolved_at, summary FROM incidents"),
            db_rows(state, "SELECT fp, state, doc FROM notify_alerts")) == snapshot
    cfg = write_config(tmp_path, state, hook)  # the key fixed (left out): starts at once
    again = Agent(cfg, speed=60, duration="1m")
    assert again.wait(30) == 0, again.log()
    assert "another nvml-watchdog agent" not in again.log()


# --- storage ------------------------------------------------------------------------------

@needs_root
@pytest.mark.slow
def test_a_full_disk_loses_no_page_and_the_state_is_written_once_it_has_room(
        tmp_path: Path, tmpfs: Path, hook: Server) -> None:
    """storage: on a full disk the hang is paged and resolved exactly once, status says
    MEMORY ONLY, and everything is on disk once there is room again"""
    state = tmpfs / "state"
    cfg = write_config(tmp_path, state, hook)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    a = Agent(cfg, speed=60, duration="8m", extra_env={"RUNTIME_DIRECTORY": str(run_dir)})
    a.wait_log("watching 8 GPUs")
    fill(tmpfs)
    a.wait_log("MEMORY ONLY", timeout=20)
    a.wait_log("FIRING   CRITICAL comm_hang", timeout=40)
    time.sleep(0.5)  # the status file is written every 5 s of the agent's clock (83 ms)
    st = subprocess.run([sys.executable, "-m", "watchdog", "status", "--config", str(cfg),
                         "--json"], capture_output=True, text=True, timeout=30,
                        env=env(RUNTIME_DIRECTORY=str(run_dir)))
    doc = json.loads(st.stdout)
    assert doc["state_db"]["mode"] == "memory" and "full" in doc["state_db"]["reason"]
    assert any(i["kind"] == "agent" for i in doc["active_incidents"])
    (tmpfs / "fill").unlink()
    assert a.wait(60) == 0
    assert hang_pages(hook) == ["firing", "resolved"], a.log()[-3000:]
    assert ("new", "agent") in pages(hook)
    log = a.log()
    assert log.count("state database in MEMORY ONLY") == 1  # said once, not per tick
    assert "back on disk" in log
    al = watchdog("alerts", "--config", str(cfg), "--all", "--json")
    kinds = {a["alert"]["kind"] for a in json.loads(al.stdout)["alerts"]}
    assert {"comm_hang", "agent"} <= kinds  # what happened in memory is on disk now


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "pages"])
def test_a_corrupt_database_is_moved_aside_and_paged_once(tmp_path: Path, hook: Server,
                                                          damage: str) -> None:
    """storage: a corrupt state.db (garbage, or a valid header over garbage pages) is
    moved aside, a fresh one used, one `agent` page sent, and the hang still paged"""
    state = tmp_path / "state"
    cfg = write_config(tmp_path, state, hook)
    if damage == "garbage":
        state.mkdir()
        (state / "state.db").write_bytes(os.urandom(40_000))
    else:
        assert Agent(cfg, speed=60, duration="1m").wait(30) == 0
        db = state / "state.db"
        size = db.stat().st_size
        with open(db, "r+b") as f:
            f.seek(4096)
            f.write(os.urandom(size - 4096))
    a = Agent(cfg, speed=60, duration="8m")
    assert a.wait(60) == 0, a.log()
    assert "Traceback" not in a.log()
    aside = [f for f in state.glob("state.db.corrupt-*") if not f.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1  # kept for a person to look at
    assert [p for p in pages(hook) if "agent" in p[1]][:1] == [("new", "agent")]
    assert hang_pages(hook) == ["firing", "resolved"], a.log()[-3000:]


@pytest.mark.slow
def test_corruption_while_running_is_one_line_and_delivery_goes_on(
        tmp_path: Path, hook: Server) -> None:
    """storage: a state.db that rots under the running agent is salvaged once (not an
    error per tick) and the hang is still paged exactly once"""
    state = tmp_path / "state"
    cfg = write_config(tmp_path, state, hook)
    a = Agent(cfg, speed=60, duration="8m")
    a.wait_log("watching 8 GPUs")
    time.sleep(1.0)
    db = state / "state.db"
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    with open(db, "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(db.stat().st_size - 4096))
    assert a.wait(60) == 0
    log = a.log()
    assert log.count("state database was damaged") == 1, log
    assert log.count("alerting failed") <= 1 and "delivery to hook failed" not in log
    assert hang_pages(hook) == ["firing", "resolved"], a.log()[-3000:]


@pytest.mark.slow
@needs_root
def test_a_read_only_state_dir_still_detects_and_pages_and_says_so(
        tmp_path: Path, tmpfs: Path, hook: Server) -> None:
    """storage: a read-only state dir (a file system remounted read-only): the agent
    detects and pages from memory and says MEMORY ONLY"""
    state = tmpfs / "state"
    cfg = write_config(tmp_path, state, hook)
    assert Agent(cfg, speed=60, duration="1m").wait(30) == 0  # a state to start from
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    a = Agent(cfg, speed=60, duration="8m")
    assert a.wait(60) == 0
    assert "MEMORY ONLY" in a.log()
    assert hang_pages(hook) == ["firing", "resolved"], a.log()[-3000:]
    assert ("new", "agent") in pages(hook)


@pytest.mark.slow
def test_a_state_dir_that_cannot_be_created_still_detects_and_pages(
        tmp_path: Path, hook: Server) -> None:
    """storage: a state dir that cannot exist (its parent is a file): memory only, paged"""
    (tmp_path / "blocker").write_text("a file, not a folder")
    cfg = write_config(tmp_path, tmp_path / "blocker" / "state", hook)
    a = Agent(cfg, speed=60, duration="8m")
    assert a.wait(60) == 0, a.log()
    assert "MEMORY ONLY" in a.log()
    assert hang_pages(hook) == ["firing", "resolved"], a.log()[-3000:]


# --- time -----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(FAKETIME_LIB is None, reason="libfaketime is not installed (Debian's "
                    "faketime; .ci/run installs it)")
@pytest.mark.parametrize("step", ["-1h", "+1h"])
def test_a_wall_clock_step_changes_no_schedule(tmp_path: Path, hook: Server,
                                               step: str) -> None:
    """time: the wall clock stepped an hour (monotonic untouched) mid-run: sampling goes
    on, the hang is paged and resolved once, and status says the clock moved"""
    state = tmp_path / "state"
    cfg = write_config(tmp_path, state, hook)
    clockfile = tmp_path / "faketime"
    clockfile.write_text("+0\n")
    # 12 min (6 s at 60x): the hang clears at 6 min and its resolve is held 10 s. With
    # 8 min a starved run (the suite's four workers on two cores, every time call through
    # libfaketime) stopped before its backlog reached the resolution, or 0.4 s after it,
    # and the held resolve went out only after the next start (1 run in 4 under load)
    a = Agent(cfg, speed=60, duration="12m", extra_env={
        "LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME_TIMESTAMP_FILE": str(clockfile),
        "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"})
    a.wait_log("watching 8 GPUs")
    time.sleep(0.5)
    clockfile.write_text(f"{step}\n")
    time.sleep(1.0)  # past the next status write (5 s of the agent's clock: 83 ms here)
    before = json.loads(watchdog("status", "--config", str(cfg), "--json").stdout)
    doc = before
    deadline = time.monotonic() + 120.0  # a stalled scheduler fails below, not hangs here
    while (doc["now"] - before["now"] < 60.0 and a.p.poll() is None
           and time.monotonic() < deadline):  # a minute of its clock
        time.sleep(0.2)
        doc = json.loads(watchdog("status", "--config", str(cfg), "--json").stdout)
    # sampling goes on at its pace after the step: at most one tick per second of the
    # agent's clock (a loaded machine runs fewer, coalesced), never none (a wall-clock
    # scheduler stepped back stops) nor an hour's worth (one stepped forward catches up)
    ticks, secs = doc["ticks"] - before["ticks"], doc["now"] - before["now"]
    assert secs >= 60.0 and 0 < ticks <= secs + 2, (ticks, secs)
    sign = 1 if step.startswith("+") else -1
    assert abs(doc["clock_offset_s"] - sign * 3600) < 60, doc["clock_offset_s"]
    assert a.wait(60) == 0, a.log()
    assert hang_pages(hook) == ["firing", "resolved"], a.log()[-3000:]


# --- the metrics port, reloads, the journal --------------------------------------------------

@pytest.mark.slow
def test_a_taken_metrics_port_is_retried_until_it_serves(tmp_path: Path, hook: Server) -> None:
    """operator: a metrics port taken at start is retried (status says so meanwhile) and
    serves once it is free"""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    state = tmp_path / "state"
    cfg = write_config(tmp_path, state, hook, source="sim:healthy")
    cfg.write_text(cfg.read_text() + f"metrics: {{listen: 127.0.0.1:{port}}}\n")
    a = Agent(cfg, speed=1, duration="60s")
    a.wait_log("retrying every")
    time.sleep(5.5)
    doc = json.loads(watchdog("status", "--config", str(cfg), "--json").stdout)
    assert doc["metrics"]["error"]
    blocker.close()
    end = time.monotonic() + 25
    body = ""
    while time.monotonic() < end:
        try:
            import urllib.request

            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) \
                .read().decode()
            break
        except OSError:
            time.sleep(0.5)
    a.stop()
    assert "watchdog_ticks" in body
    assert a.log().count("not started") == 1  # one line, not one per retry


@pytest.mark.slow
def test_a_failed_reload_shows_in_status_and_keeps_the_running_config(
        tmp_path: Path, hook: Server) -> None:
    """operator: a SIGHUP with a bad interval (or broken YAML) keeps the running config,
    and `status --json` says the reload failed and why"""
    state = tmp_path / "state"
    cfg = write_config(tmp_path, state, hook, source="sim:healthy")
    a = Agent(cfg, speed=1, duration="60s")
    a.wait_log("watching 8 GPUs")
    good = cfg.read_text()
    cfg.write_text(good + "interval: 99999999999999999999999999999999d\n")
    a.p.send_signal(signal.SIGHUP)
    a.wait_log("reload failed")
    time.sleep(5.5)
    doc = json.loads(watchdog("status", "--state-dir", str(state), "--json").stdout)
    assert doc["reload"]["ok"] is False and "interval" in doc["reload"]["message"]
    assert doc["interval_s"] == 1.0
    assert "RELOAD" not in doc and doc["stale"] is False
    cfg.write_text(good + "interval: 2s\n")
    a.p.send_signal(signal.SIGHUP)
    a.wait_log("interval now 2s")
    assert a.stop() == 0
    assert "Traceback" not in a.log()


@pytest.mark.slow
def test_under_the_journal_every_line_has_its_priority(tmp_path: Path, hook: Server) -> None:
    """operator: under systemd's journal every log line carries its syslog priority (a
    critical page <3>, a resolve <5>, information <6>), in one format, no secrets"""
    state = tmp_path / "state"
    token = "xoxb-hostile-secret-token-1234"
    cfg = write_config(tmp_path, state, hook, extra="""    slack: {type: slack, token_env: T,
            channel: "#gpu", api_url: "http://127.0.0.1:9/api/"}
""")
    r, w = os.pipe()
    st = os.fstat(w)
    p = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "--config", str(cfg),
                          "--speed", "60", "--duration", "8m"], stdout=w, stderr=w,
                         env=env(HOME=str(tmp_path), T=token,
                                 JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}"))
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    assert p.wait(60) == 0
    lines = [x for x in out.splitlines() if x.strip()]
    assert lines and all(x[:3] in ("<2>", "<3>", "<4>", "<5>", "<6>", "<7>") for x in lines), out
    assert any(x.startswith("<3>ERROR watchdog.incident: FIRING   CRITICAL comm_hang")
               for x in lines), out
    assert any(x.startswith("<5>NOTICE watchdog.incident: RESOLVED") for x in lines)
    assert any(x.startswith("<6>INFO watchdog.agent: watching 8 GPUs") for x in lines)
    assert token not in out
    assert sum("Not Supported" in x or "not supported" in x for x in lines) <= 1


# --- commands run by people who may not read the state --------------------------------------

@pytest.fixture
def stopped_state(hook: Server) -> Iterator[tuple[Path, Path]]:
    """A state directory left by an agent that ran and stopped, in a folder every user
    may traverse (pytest's own is private to root): ``(config, state dir)``."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="watchdog-admin-"))
    try:
        base.chmod(0o755)
        state = base / "state"
        cfg = write_config(base, state, hook)
        assert Agent(cfg, speed=60, duration="8m").wait(30) == 0  # a hang paged, resolved
        cfg.chmod(0o644)
        yield cfg, state
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
@needs_root
def test_status_as_someone_who_may_not_read_the_state_is_one_line_and_exit_2(
        stopped_state: tuple[Path, Path]) -> None:
    """admin: `status`/`alerts` as a user who cannot read the state: one line, exit 2"""
    cfg, state = stopped_state
    state.chmod(0o750)
    for cmd in (("status",), ("alerts",), ("silence", "list")):
        r = watchdog(*cmd, "--config", str(cfg), user="nobody", groups="nogroup")
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and "permission denied" in lines[0], (cmd, r.stderr)
        assert "internal error" not in r.stderr


@pytest.mark.slow
@needs_root
def test_the_services_group_reads_status_and_alerts_without_writing(
        stopped_state: tuple[Path, Path]) -> None:
    """admin: a member of the service's group reads status and alerts (DB 0640, dir
    0750), and the read-only open writes nothing"""
    cfg, state = stopped_state
    gid = 65534
    os.chown(state, 0, gid)
    for f in state.iterdir():
        os.chown(f, 0, gid)
    db = state / "state.db"
    assert db.stat().st_mode & 0o777 == 0o640
    state.chmod(0o750)
    before = {f.name: f.stat().st_mtime_ns for f in state.iterdir()}
    r = watchdog("status", "--config", str(cfg), user="nobody", groups="nogroup")
    assert r.returncode == 1 and "agent STOPPED" in r.stdout, r.stderr  # 1: stopped
    r = watchdog("alerts", "--config", str(cfg), "--all", "--json", user="nobody",
                 groups="nogroup")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["alerts"]
    assert {f.name: f.stat().st_mtime_ns for f in state.iterdir()} == before


def test_a_symlinked_state_db_is_never_written_through(tmp_path: Path) -> None:
    """admin: `silence add` on a state dir whose state.db is a symbolic link refuses to
    follow it (one line, exit 2) and the link's target is untouched"""
    target = tmp_path / "precious"
    target.write_text("do not touch\n")
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").symlink_to(target)
    r = watchdog("silence", "add", "--all", "--for", "1h", "--comment", "x", "--state-dir",
                 str(state))
    assert r.returncode == 2 and "symbolic link" in r.stderr, r.stderr
    assert target.read_text() == "do not touch\n"
    assert not (state / "state.db-wal").exists()


def test_a_silence_added_after_a_clock_step_keeps_its_length(tmp_path: Path) -> None:
    """time: a silence added while the system clock is an hour behind the running agent's
    is stored on the agent's timeline (2h means 2h for the agent)"""
    from watchdog.store.agent import AgentStore
    from watchdog.store.store import Store

    state = tmp_path / "state"
    store = AgentStore(Store(state), "sim")
    now = time.time()
    store.write_status({"clock_offset_s": -3600.0, "now": now + 3600}, now + 3600)
    store.db.close()
    r = watchdog("silence", "add", "--all", "--for", "2h", "--comment", "maintenance",
                 "--state-dir", str(state))
    after = time.time()
    assert r.returncode == 0, r.stderr
    (starts, ends), = db_rows(state, "SELECT starts_at, ends_at FROM notify_silences")
    # on the agent's timeline (an hour ahead), whenever the command ran
    assert now + 3600 <= starts <= after + 3600 and abs(ends - starts - 7200) < 1


def test_a_stopped_agents_state_is_read_with_the_plain_clock(tmp_path: Path) -> None:
    """time: without a running agent, silences use this machine's clock"""
    from watchdog.store import connect

    state = tmp_path / "state"
    connect(state).close()  # a stopped agent's state
    before = time.time()
    r = watchdog("silence", "add", "--all", "--for", "1h", "--comment", "x", "--state-dir",
                 str(state))
    assert r.returncode == 0, r.stderr
    (starts,), = db_rows(state, "SELECT starts_at FROM notify_silences")
    assert before <= starts <= time.time()
