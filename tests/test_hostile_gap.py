"""Hostile time: a gap in the agent's own ticks is said, and past a minute paged.

An agent stopped for 2 minutes (SIGSTOP, a paused VM, a swap storm) left no line in the
journal and no incident: only ``status`` showed the missed ticks. Now a gap of more than
3 intervals is one log line, and a gap of more than a minute also an ``agent`` incident
(rule ``agent_unwatched``) that says how long the node was not watched, from when to when.
"""

from __future__ import annotations

import logging
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_hostile_agent import Agent, write_config

from watchdog.clock import ManualClock
from watchdog.detect import Detector, load_rules
from watchdog.incident import Incident
from watchdog.pipeline.live import LivePipeline
from watchdog.sources.sim import SimSource
from watchdog.testing.httpserver import Server

T0 = 1_750_000_000.0


def _agent(clock: ManualClock, sent: list[tuple[str, Incident]],
           interval: float = 1.0) -> LivePipeline:
    rules = load_rules()
    return LivePipeline(
        lambda now: SimSource.from_spec("sim:healthy", gpus=2, seed=1, start=now),
        lambda src: Detector(rules, host=src.host, devices=src.devices()),
        clock, spec="sim:healthy", interval=interval,
        listeners=[lambda s, i: sent.append((s, i))], watch_gaps=True)


def _gap_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "no tick for" in r.getMessage()]


def test_two_minutes_without_a_tick_are_one_line_and_an_agent_incident(
        caplog: pytest.LogCaptureFixture) -> None:
    """time: the agent held 2 min (SIGSTOP): one journal line and an `agent` incident that
    says the node was unwatched for 2 min, from when to when; it resolves after 15 min"""
    caplog.set_level(logging.INFO)
    clock = ManualClock(start=T0)
    sent: list[tuple[str, Incident]] = []
    p = _agent(clock, sent, interval=5.0)  # 5 s ticks: the 15 min after in 180 ticks
    for _ in range(5):
        p.tick()
        clock.advance(5.0)
    clock.advance(115.0)  # held: no tick for 2 min
    p.tick()
    (line,) = _gap_lines(caplog)
    assert line.startswith("no tick for 2 min") and "not watched" in line, line
    (fired,) = [(s, i) for s, i in sent if i.kind == "agent"]
    assert fired[0] == "firing" and fired[1].rule == "agent_unwatched"
    assert "did not run for 2 min (15:07:00Z to 15:09:00Z)" in fired[1].summary
    assert fired[1].evidence["unwatched_s"] == pytest.approx(120.0)
    for _ in range(180):
        clock.advance(5.0)
        p.tick()
    assert [s for s, i in sent if i.kind == "agent"] == ["firing", "resolved"]
    assert len(_gap_lines(caplog)) == 1


def test_a_short_gap_is_a_line_and_no_incident(caplog: pytest.LogCaptureFixture) -> None:
    """time: 10 s without a tick is one line, no incident; 3 intervals are neither"""
    caplog.set_level(logging.INFO)
    clock = ManualClock(start=T0)
    sent: list[tuple[str, Incident]] = []
    p = _agent(clock, sent)
    p.tick()
    clock.advance(3.0)  # 3 intervals: a late tick, not a gap
    p.tick()
    assert _gap_lines(caplog) == []
    clock.advance(10.0)
    p.tick()
    assert len(_gap_lines(caplog)) == 1 and not any(i.kind == "agent" for _, i in sent)


@pytest.fixture()
def hook() -> Iterator[Server]:
    with Server() as s:
        yield s


@pytest.mark.slow
def test_a_stopped_agent_says_so_in_the_journal(tmp_path: Path, hook: Server) -> None:
    """time: `kill -STOP` for 5 s on a running agent: a `no tick for 5 s` line after
    `kill -CONT`, and the agent goes on"""
    cfg = write_config(tmp_path, tmp_path / "state", hook, source="sim:healthy")
    a = Agent(cfg, speed=1, duration="60s")
    try:
        a.wait_log("watching 8 GPUs")
        time.sleep(2)
        a.p.send_signal(signal.SIGSTOP)
        time.sleep(5)
        a.p.send_signal(signal.SIGCONT)
        a.wait_log("no tick for")
        time.sleep(2)
        assert a.stop() == 0
    finally:
        if a.p.poll() is None:
            a.p.kill()
    # one line for the stop (a busy machine may add one for a late tick of its own)
    lines = [x for x in a.log().splitlines() if "no tick for" in x]
    assert lines and all("the GPUs were not watched" in x for x in lines), a.log()
    assert any(re.search(r"no tick for [5-9] s", x) for x in lines), lines
