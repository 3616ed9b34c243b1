"""Hostile delivery: a full outbox, a sink that was never tried, a token that cannot work.

* A sink down for longer than the outbox holds once made the outbox refuse the newest
  notifications, resolves included: the receiver kept a page firing for good while
  ``watchdog alerts`` said "no alerts". Now a full outbox merges superseded notifications
  into their group's newest (a resolve replaces its own firing) and never drops a group's
  newest state; what it merged or dropped is counted (``alerts``, ``status``, metric).
* ``watchdog alerts test`` said Alertmanager was "delivered" without sending anything
  (a URL on a closed port passed the pre-production check). It now posts a test alert
  that pages nobody and says what each sink answered.
* A token containing a newline can never work (it cannot go into an HTTP header): it was
  retried for ever. It is a configuration error, one line, before anything is sent.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_helpers import run

from watchdog.notify import outbox
from watchdog.notify import store as st
from watchdog.notify.base import Alert, Notification
from watchdog.store.db import migrate
from watchdog.testing.httpserver import Reply, Server

SIM = "sim:comm_hang(for=4m)@2m"


# --- 5. the outbox never loses the last state of a group ------------------------------------
def _db() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    st.open_store(c)
    migrate(c, "notify_dropped", outbox.STEPS)
    return c


def _alert(fp: str, status: str) -> Alert:
    return Alert(fingerprint=fp, status=status, kind="comm_hang", severity="critical",  # type: ignore[arg-type]
                 host="n", gpus=("0",), uuids=("GPU-0",), started_at=0.0, fired_at=1.0,
                 resolved_at=2.0 if status == "resolved" else None, rule="r", summary="s")


def _queue(c: sqlite3.Connection, n: Notification, limit: int) -> int:
    """What the policy does with one new notification; returns rows dropped."""
    keep, k, what = outbox.make_room(c, n, limit)
    if k:
        outbox.count(c, n.sink, k, 0.0, what)
    if keep is not None:
        c.execute("INSERT INTO notify_outbox (sink, group_key, reason, doc, created_at, "
                  "next_at) VALUES (?, ?, ?, ?, 0, 0)", (keep.sink, keep.group_key, keep.reason,
                                                         st.notification_to_json(keep)))
    return k


def _pending(c: sqlite3.Connection) -> list[Notification]:
    return [st.notification_from_json(d) for (d,) in c.execute(
        "SELECT doc FROM notify_outbox WHERE state = 'pending' ORDER BY id")]


def test_a_resolve_replaces_its_own_firing_in_a_full_outbox() -> None:
    """outbox: with outbox_max 1, a group's resolve merges into its queued firing: the
    receiver gets the resolve (and PagerDuty the alert's change), one drop counted"""
    c = _db()
    fire = Notification(id="a", sink="pd", group_key="g#1", reason="new", created_at=1.0,
                        alerts=(_alert("fp1", "firing"),), changed=("fp1",))
    other = Notification(id="b", sink="pd", group_key="g#1", reason="repeat", created_at=2.0,
                         alerts=(_alert("fp1", "firing"), _alert("fp2", "firing")),
                         changed=("fp2",))
    done = Notification(id="c", sink="pd", group_key="g#1", reason="resolved", created_at=3.0,
                        alerts=(_alert("fp1", "resolved"), _alert("fp2", "resolved")),
                        changed=("fp1",))
    assert _queue(c, fire, 1) == 0
    assert _queue(c, other, 1) == 1
    assert _queue(c, done, 1) == 1
    (last,) = _pending(c)
    assert last.id == "c" and [a.status for a in last.alerts] == ["resolved", "resolved"]
    assert last.changed == ("fp1", "fp2")  # fp2's firing was never sent: its change is kept
    assert outbox.dropped(c) == {"pd": 2}


def test_a_reminder_turned_merge_keeps_a_real_reason() -> None:
    """outbox: merged into a reminder, real changes keep a reason PagerDuty acts on"""
    fire = Notification(id="a", sink="pd", group_key="g", reason="new", created_at=1.0,
                        alerts=(_alert("fp1", "firing"),), changed=("fp1",))
    rep = Notification(id="b", sink="pd", group_key="g", reason="repeat", created_at=2.0,
                       alerts=(_alert("fp1", "firing"),), changed=())
    m = outbox.merged(rep, [fire])
    assert (m.reason, m.changed) == ("new", ("fp1",))


def test_a_full_outbox_never_drops_a_groups_newest_state() -> None:
    """outbox: 2,000 notifications of 6 groups and agent notices into an outbox of 3: after
    each, every group's newest state is the last queued row of its group (or the group
    resolved before its sink heard of it), and every drop is counted"""
    rng = random.Random(7)
    c = _db()
    newest: dict[str, Notification] = {}
    dropped = 0
    state = {g: {f"{g}-a": "resolved", f"{g}-b": "resolved"} for g in "abcdef"}
    for i in range(2000):
        if rng.random() < 0.05:
            n = Notification(id=f"m{i}", sink="s", group_key="agent/n", reason="meta",
                             created_at=float(i), alerts=(), text="sink failing")
            dropped += _queue(c, n, 3)
            continue
        g = rng.choice("abcdef")
        if g in newest and rng.random() < 0.2:  # a reminder: the same state, nothing changed
            reason, changed = "repeat", ()
        else:
            fp = rng.choice(sorted(state[g]))
            state[g][fp] = "firing" if state[g][fp] == "resolved" else "resolved"
            reason, changed = rng.choice(["new", "update", "resolved"]), (fp,)
        n = Notification(id=f"n{i}", sink="s", group_key=g, reason=reason, created_at=float(i),
                         alerts=tuple(_alert(f, s) for f, s in sorted(state[g].items())),
                         changed=changed)
        newest[g] = n
        dropped += _queue(c, n, 3)
        if rng.random() < 0.1:  # the sink comes back for a moment: the oldest row is sent
            c.execute("UPDATE notify_outbox SET state = 'sent' WHERE id = (SELECT MIN(id) "
                      "FROM notify_outbox WHERE state = 'pending')")
        queued = _pending(c)
        for grp, want in newest.items():
            mine = [x for x in queued if x.group_key == grp]
            sent = c.execute("SELECT doc FROM notify_outbox WHERE group_key = ? AND state = "
                             "'sent' ORDER BY id DESC LIMIT 1", (grp,)).fetchone()
            last = st.notification_from_json(sent[0]) if sent is not None else None
            if mine:
                got = mine[-1]
                assert [(a.fingerprint, a.status) for a in got.alerts] == \
                    [(a.fingerprint, a.status) for a in want.alerts], (i, grp)
                assert set(want.changed) <= set(got.changed)
            elif last is not None and [(a.fingerprint, a.status) for a in last.alerts] == \
                    [(a.fingerprint, a.status) for a in want.alerts]:
                continue  # its newest state was delivered (a reminder of it may go)
            else:
                assert all(a.status == "resolved" for a in want.alerts) and sent is None, \
                    (i, grp)
        assert len(queued) <= 3 + len("abcdef")  # beyond the bound by one row per group
    assert outbox.dropped(c) == {"s": dropped} and dropped > 1000


def wd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.slow
def test_a_sink_down_through_a_whole_incident_gets_its_resolve(tmp_path: Path) -> None:
    """outbox: outbox_max 1, the sink down while a hang fires and resolves: the resolve
    replaces the queued firing; when the sink is back it hears "resolved" (not a page left
    firing), and `alerts` and `status` count what was merged away"""
    with Server(Reply(503, {"error": "down"})) as hook:
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f"source: {SIM}\nstate_dir: {tmp_path / 'state'}\nnotify:\n"
                       f"  resolve_hold: 10s\n  outbox_max: 1\n"
                       f"  sinks:\n    hook: {{type: webhook, url: \"{hook.url}/page\"}}\n")
        p = subprocess.run([sys.executable, "-m", "watchdog", "run", "--config", str(cfg),
                            "--speed", "60", "--duration", "14m"], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
        assert "RESOLVED" in p.stderr and hook.refused, p.stderr[-3000:]
        assert "merged into its newest" in p.stderr
        doc = json.loads(wd("alerts", "--all", "--json", "--config", str(cfg)).stdout)
        assert doc["outbox"]["hook"]["pending"]["count"] == 1
        assert doc["outbox"]["hook"]["dropped"] >= 1
        listing = wd("alerts", "--config", str(cfg)).stdout
        assert "superseded dropped by a full outbox" in listing, listing
        status = wd("status", "--config", str(cfg)).stdout
        assert "superseded dropped (outbox full)" in status, status
        # the sink is back; the agent restarts on a healthy node and sends what is queued
        # once the row's backoff (on the real clock, up to a few tens of seconds) is over
        hook.default = Reply(200)
        cfg.write_text(cfg.read_text().replace(SIM, "sim:healthy"))
        q = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "--config", str(cfg),
                              "--speed", "60", "--duration", "2h"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "HOME": str(tmp_path)})
        end = time.monotonic() + 90
        while not hook.requests and time.monotonic() < end and q.poll() is None:
            time.sleep(0.2)
        q.send_signal(signal.SIGTERM)
        _, err = q.communicate(timeout=60)
        assert q.returncode == 0, err[-3000:]
    pages = [(r.body["reason"], r.body["status"]) for r in hook.requests]
    assert pages and pages[-1] == ("resolved", "resolved"), pages
    assert ("new", "firing") not in pages[1:]


# --- 6. alerts test tries every sink ----------------------------------------------------------
AM = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    if AM is None:
        pytest.skip("prometheus-alertmanager is not installed (apt-get install "
                    "prometheus-alertmanager; .ci/run installs it)")
    cfg = tmp_path / "am.yml"
    cfg.write_text("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
    port = _free_port()
    proc = subprocess.Popen(
        [AM, f"--config.file={cfg}", f"--storage.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=1)
            break
        except OSError:
            if proc.poll() is not None:
                raise AssertionError("alertmanager did not start") from None
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(10)


def _received(url: str) -> float:
    """Alerts Alertmanager accepted through its API so far (its own counter)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines()
               if x.startswith("alertmanager_alerts_received_total"))


def test_alerts_test_says_alertmanager_on_a_closed_port_failed(tmp_path: Path) -> None:
    """alerts test: Alertmanager on a closed port is not "delivered": it says what failed
    and the command exits 1"""
    cfg = tmp_path / "w.yaml"
    cfg.write_text(f"notify:\n  sinks:\n    am: {{type: alertmanager, url: "
                   f"\"http://127.0.0.1:{_free_port()}\"}}\n    l: {{type: log}}\n")
    o = run(["alerts", "test", "--config", str(cfg)], timeout=60)
    assert o.rc == 1, (o.stdout, o.stderr)
    assert "am (alertmanager): retry: " in o.stdout and "refused" in o.stdout, o.stdout
    assert "l (log): delivered: written to the agent's log" in o.stdout, o.stdout


def test_alerts_test_reaches_a_real_alertmanager_and_says_what_it_answered(
        tmp_path: Path, alertmanager: str) -> None:
    """alerts test: a real Alertmanager receives a test alert (that pages nobody) and the
    command says what it answered"""
    before = _received(alertmanager)
    cfg = tmp_path / "w.yaml"
    cfg.write_text(f"host: n7\nnotify:\n  sinks:\n    am: {{type: alertmanager, "
                   f"url: \"{alertmanager}\"}}\n")
    o = run(["alerts", "test", "--config", str(cfg)], timeout=60)
    assert o.rc == 0, (o.stdout, o.stderr)
    assert "am (alertmanager): delivered: HTTP 200 from 127.0.0.1" in o.stdout, o.stdout
    assert _received(alertmanager) == before + 1
    with urllib.request.urlopen(alertmanager + "/api/v2/alerts", timeout=5) as r:
        assert json.load(r) == []  # ended at once: nothing active, nobody paged


# --- 10. a token with a newline --------------------------------------------------------------
@pytest.mark.parametrize("how", ["token_file", "token_env"])
def test_a_token_with_a_newline_is_a_configuration_error(tmp_path: Path, how: str) -> None:
    """secrets: a Slack token holding a newline is one configuration line (exit 2), never
    sent, never retried for ever"""
    token = "xoxb-0000-first\nxoxb-0000-second"
    tok = tmp_path / "tok"
    tok.write_text(token + "\n")
    tok.chmod(0o600)
    with Server() as slack:
        src = f"token_file: {tok}" if how == "token_file" else "token_env: T"
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f"source: sim:healthy\nstate_dir: {tmp_path / 's'}\nnotify:\n  sinks:\n"
                       f"    slack: {{type: slack, {src}, channel: \"#x\", "
                       f"api_url: \"{slack.url}/api/\"}}\n")
        for args in (["run", "--config", str(cfg), "--duration", "3s"],
                     ["alerts", "test", "--config", str(cfg)]):
            o = run(args, timeout=60, extra_env={"T": token})
            assert o.rc == 2, (args, o.rc, o.stderr[-1000:])
            errors = [x for x in o.stderr.splitlines() if x.startswith("watchdog: error:")]
            assert len(errors) == 1 and "a line break" in errors[0], o.stderr[-1000:]
            assert "first" not in o.stderr and "second" not in o.stderr  # never quoted
        assert slack.connections == 0
