"""The live agent: source -> detector -> notifiers on an injected clock (no sleeping)."""

from __future__ import annotations

import pytest

from watchdog.agent import Agent
from watchdog.clock import ManualClock
from watchdog.detect import Detector, load_rules
from watchdog.incident import Incident
from watchdog.sources.sim import SimSource


def _agent(spec: str, clock: ManualClock, notifiers: list) -> Agent:  # type: ignore[type-arg]
    src = SimSource.from_spec(spec, gpus=8, seed=1, start=clock.now())
    det = Detector(load_rules(), host=src.host, devices=src.devices())
    return Agent(src, det, clock, notifiers)


def _run(agent: Agent, clock: ManualClock, seconds: float, step: float = 5.0) -> None:
    end = clock.now() + seconds
    while clock.now() < end:
        agent.tick()
        clock.advance(step)


def test_a_hung_job_is_one_page_that_fires_and_then_resolves() -> None:
    clock = ManualClock(start=1_750_000_000.0)
    sent: list[tuple[str, Incident]] = []
    agent = _agent("sim:comm_hang(for=6m)@3m", clock, [lambda s, i: sent.append((s, i))])
    _run(agent, clock, 20 * 60)
    assert [(s, i.kind) for s, i in sent] == [("firing", "comm_hang"), ("resolved", "comm_hang")]
    inc = sent[0][1]
    assert inc.gpus == [str(i) for i in range(8)]
    onset = clock.t - 20 * 60 + 180
    assert onset <= inc.started_at < inc.fired_at <= onset + 180  # under 3 min, no history
    assert inc.resolved_at is not None and inc.resolved_at >= onset + 360
    assert agent.stats.ticks == 240 and agent.stats.samples == 240 * 8


def test_a_healthy_node_sends_nothing() -> None:
    clock = ManualClock(start=1_750_000_000.0)
    sent: list[tuple[str, Incident]] = []
    agent = _agent("sim:healthy", clock, [lambda s, i: sent.append((s, i))])
    _run(agent, clock, 30 * 60)
    assert sent == []


def test_a_failing_source_or_notifier_never_stops_the_agent(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(start=1_750_000_000.0)
    got: list[str] = []

    def broken(_state: str, _inc: Incident) -> None:
        raise ConnectionError("slack is down")

    agent = _agent("sim:gpu_lost@60", clock, [broken, lambda s, i: got.append(i.kind)])
    real = agent.source.sample
    calls = {"n": 0}

    def flaky(now: float):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("driver hiccup")
        return real(now)

    agent.source.sample = flaky  # type: ignore[method-assign]
    _run(agent, clock, 120)
    assert agent.stats.source_errors == 1
    assert "gpu_lost" in got  # the second notifier still heard about it
    assert "slack is down" in caplog.text and "driver hiccup" in caplog.text


def test_ticks_from_two_threads_never_overlap() -> None:
    """The scheduler's thread and a direct call (the daemon's first tick) used to run the
    detector at once and corrupt its window state; ticks are serialized now."""
    import threading

    clock = ManualClock(start=1_750_000_000.0)
    agent = _agent("sim:comm_hang(for=6m)@1m", clock, [])
    inside = {"now": 0, "most": 0}
    real = agent.detector.feed_tick

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        inside["now"] += 1
        inside["most"] = max(inside["most"], inside["now"])
        try:
            return real(*args, **kwargs)
        finally:
            inside["now"] -= 1

    agent.detector.feed_tick = counting  # type: ignore[method-assign]
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(60):
                agent.tick()
                clock.advance(1.0)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and inside["most"] == 1
    assert agent.stats.ticks == 120
