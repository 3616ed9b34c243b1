"""The live pipeline: source -> detector -> notifiers on an injected clock (no sleeping)."""

from __future__ import annotations

import pytest

from watchdog.clock import ManualClock
from watchdog.detect import Detector, load_rules
from watchdog.detect.learned import LEVELS_VERSION
from watchdog.incident import Incident
from watchdog.pipeline.live import LivePipeline
from watchdog.sources.sim import SimSource


def _agent(spec: str, clock: ManualClock, listeners: list,  # type: ignore[type-arg]
           store: object = None, step: float = 5.0) -> LivePipeline:
    rules = load_rules()
    agent = LivePipeline(
        lambda now: SimSource.from_spec(spec, gpus=8, seed=1, start=now),
        lambda src: Detector(rules, host=src.host, devices=src.devices()),
        clock, spec=spec, interval=step, store=store, listeners=listeners)
    agent.tick()  # opens the source; its first reading
    clock.advance(step)
    return agent


def _run(agent: LivePipeline, clock: ManualClock, seconds: float, step: float = 5.0) -> None:
    end = clock.now() + seconds
    while clock.now() < end:
        agent.tick()
        clock.advance(step)


@pytest.mark.slow
def test_a_hung_job_is_one_page_that_fires_and_then_resolves() -> None:
    clock = ManualClock(start=1_750_000_000.0)
    sent: list[tuple[str, Incident]] = []
    agent = _agent("sim:comm_hang(for=6m)@3m", clock, [lambda s, i: sent.append((s, i))])
    _run(agent, clock, 20 * 60)
    assert [(s, i.kind) for s, i in sent] == [("firing", "comm_hang"), ("resolved", "comm_hang")]
    inc = sent[0][1]
    assert inc.gpus == [str(i) for i in range(8)]
    onset = 1_750_000_000.0 + 180  # the simulation starts at the first tick
    assert onset <= inc.started_at < inc.fired_at <= onset + 180  # under 3 min, no history
    assert inc.resolved_at is not None and inc.resolved_at >= onset + 360
    assert agent.stats.ticks == 241 and agent.stats.samples == 241 * 8


@pytest.mark.slow
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
    assert agent.stats.ticks == 121


# --- state across restarts ---------------------------------------------------------------

def _store(tmp_path, namespace: str = "sim"):  # type: ignore[no-untyped-def]
    from watchdog.store.agent import AgentStore
    from watchdog.store.store import Store

    return AgentStore(Store(tmp_path / "state"), namespace)


def _fire_delay(spec: str, store: object, start: float) -> tuple[float, Incident]:
    clock = ManualClock(start=start)
    sent: list[tuple[str, Incident]] = []
    agent = _agent(spec, clock, [lambda s, i: sent.append((s, i))], store=store)
    _run(agent, clock, 20 * 60)
    agent.close()
    fired = [i for s, i in sent if s == "firing" and i.kind == "comm_hang"]
    assert len(fired) == 1, sent
    return fired[0].fired_at - fired[0].started_at, fired[0]  # type: ignore[operator]


@pytest.mark.slow
def test_a_restart_keeps_the_learned_hang_wait_and_power_levels(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An hour of healthy training teaches the node its longest checkpoint wait; after a
    restart on the same state a hang fires as early as it would have without the restart,
    and earlier than on a node that learned nothing."""
    store = _store(tmp_path)
    clock = ManualClock(start=1_750_000_000.0)
    agent = _agent("sim:healthy", clock, [], store=store)
    _run(agent, clock, 3600)
    learned = agent.detector.learned_state()["comm_hang"]
    levels = agent.detector.learned_levels()
    agent.close()  # SIGTERM's path: saves
    assert learned["longest_s"] and learned["episodes"] >= 1
    waits, saved_levels = _store(tmp_path).load_learned("sim-node")
    assert waits["comm_hang"] == learned
    assert {u: {k: v for k, v in lv.items() if k != "version"}
            for u, lv in saved_levels.items()} == levels
    assert all(v["busy_w"] > 500 for v in levels.values())
    assert {lv["version"] for lv in saved_levels.values()} == {LEVELS_VERSION}

    after_restart, inc = _fire_delay("sim:comm_hang@5m", _store(tmp_path), 1_750_010_000.0)
    fresh, _ = _fire_delay("sim:comm_hang@5m", None, 1_750_010_000.0)
    assert inc.evidence["learned_longest_s"] == learned["longest_s"]
    assert after_restart < fresh
    assert after_restart <= learned["longest_s"] + 60 + 5  # learned wait + margin + a tick


@pytest.mark.slow
def test_a_simulated_node_never_touches_a_real_nodes_learned_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    real = _store(tmp_path, "nvml")
    real.save_learned("sim-node", {"comm_hang": {"longest_s": 400.0, "episodes": 9}},
                      {"GPU-x": {"idle_w": 90.0, "busy_w": 650.0, "max_sm_mhz": 1980.0}},
                      1_749_999_000.0, LEVELS_VERSION)
    clock = ManualClock(start=1_750_000_000.0)
    agent = _agent("sim:healthy", clock, [], store=_store(tmp_path, "sim"))
    assert agent.detector.learned_state()["comm_hang"]["longest_s"] is None  # not 400
    _run(agent, clock, 3600)
    agent.close()
    waits, levels = _store(tmp_path, "nvml").load_learned("sim-node")
    assert waits == {"comm_hang": {"longest_s": 400.0, "episodes": 9}}
    assert list(levels) == ["GPU-x"]


def test_status_is_written_and_old_rows_are_pruned(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from watchdog.store.agent import read_active, read_status

    store = _store(tmp_path)
    clock = ManualClock(start=1_750_000_000.0)
    agent = _agent("sim:gpu_lost(for=2m)@60", clock, [], store=store)
    _run(agent, clock, 600)
    doc, written = store.db.run(read_status)
    assert doc is not None and agent.stats.ticks - 1 <= doc["ticks"] <= agent.stats.ticks
    assert written is not None and clock.now() - written <= 10
    assert [g["index"] for g in doc["gpus"]] == list(range(8))
    rows = dict(store.db.run(lambda c: c.execute(
        "SELECT kind, resolved_at FROM incidents").fetchall()))
    assert rows["gpu_lost"] is not None  # lost at 1 min, back at 3 min: resolved
    assert [a["kind"] for a in store.db.run(read_active)] == [k for k, r in rows.items()
                                                            if r is None]
    assert store.prune(clock.now() + 89 * 86_400) == 0
    assert store.prune(clock.now() + 91 * 86_400) >= 1
    left = store.db.run(lambda c: c.execute(
        "SELECT count(*) FROM incidents WHERE resolved_at IS NOT NULL").fetchone()[0])
    assert left == 0


# --- NVML trouble becomes incidents -------------------------------------------------------

def _nvml_agent(clock: ManualClock, sent: list, timeout: float = 0.3) -> LivePipeline:  # type: ignore[type-arg]
    from watchdog.sources.nvml import NvmlSource

    rules = load_rules()
    return LivePipeline(
        lambda now: NvmlSource(host="node-a", call_timeout=timeout),
        lambda src: Detector(rules, host=src.host, devices=src.devices()),
        clock, spec="nvml", interval=1.0, host="node-a",
        listeners=[lambda s, i: sent.append((s, i))])


@pytest.mark.slow
def test_no_driver_at_start_is_one_node_incident_then_recovery() -> None:
    """NVML cannot be opened: the agent stays up, raises one node-level nvml_error, retries
    with backoff; when the driver is back the incident resolves and sampling starts."""
    from watchdog.testing import fakenvml

    clock = ManualClock(start=1_750_000_000.0)
    sent: list[tuple[str, Incident]] = []
    fakenvml.install("init_failure", time_fn=clock.now)
    try:
        agent = _nvml_agent(clock, sent)
        tries = []
        real_open = agent._open_source

        def counting(now: float):  # type: ignore[no-untyped-def]
            tries.append(now - 1_750_000_000.0)
            return real_open(now)

        agent._open_source = counting  # type: ignore[method-assign]
        for _ in range(120):
            agent.tick()
            clock.advance(1.0)
        assert [(s, i.kind, i.gpus) for s, i in sent] == [("firing", "nvml_error", [])]
        assert "Driver Not Loaded" in sent[0][1].summary or "driver" in sent[0][1].summary.lower()
        assert tries[:4] == [0.0, 5.0, 15.0, 35.0]  # 5 s doubling
        assert agent.status()["source_state"] == "unavailable"
        fakenvml.install("healthy", time_fn=clock.now)
        for _ in range(200):
            agent.tick()
            clock.advance(1.0)
        assert [(s, i.kind) for s, i in sent] == [("firing", "nvml_error"),
                                                  ("resolved", "nvml_error")]
        assert agent.stats.ticks > 0 and len(agent.last_samples) == 8
        assert agent.status()["source_state"] == "ok"
        agent.close()
    finally:
        fakenvml.uninstall()


def test_a_wedged_nvml_call_is_an_nvml_error_incident_while_other_gpus_go_on() -> None:
    from watchdog.testing import fakenvml

    clock = ManualClock(start=1_750_000_000.0)
    sent: list[tuple[str, Incident]] = []
    fakenvml.install("blocking_call", time_fn=clock.now)
    try:
        agent = _nvml_agent(clock, sent)
        start = clock.now()
        for _ in range(90):
            agent.tick()
            clock.advance(1.0)
        fired = [i for s, i in sent if s == "firing"]
        assert [(i.kind, i.gpus) for i in fired] == [("nvml_error", ["2"])]
        assert fired[0].fired_at - start <= 60  # type: ignore[operator]
        others = [s for s in agent.last_samples if s.index != 2]
        assert len(others) == 7 and all(s.get("power.draw") for s in others)
        assert agent.status()["nvml_errors"]["total"] >= 80
        agent.close()
    finally:
        fakenvml.uninstall()


@pytest.mark.parametrize(("retention_s", "kept"), [(12 * 3600.0, False), (48 * 3600.0, True)])
def test_the_configured_retention_prunes_resolved_incidents(tmp_path, retention_s: float,  # type: ignore[no-untyped-def]
                                                            kept: bool) -> None:
    """The config's ``retention:`` (through :class:`Settings`) is what the agent prunes
    by, not the 90-day default: at the next daily prune a day-old resolved incident goes
    under a 12 h retention and stays under a 48 h one."""
    from watchdog.pipeline.settings import Settings

    store = _store(tmp_path)
    clock = ManualClock(start=1_750_000_000.0)
    rules = load_rules()
    spec = "sim:gpu_lost(for=2m)@60"
    agent = LivePipeline(
        lambda now: SimSource.from_spec(spec, gpus=8, seed=1, start=now),
        lambda src: Detector(rules, host=src.host, devices=src.devices()),
        clock, spec=spec, settings=Settings(5.0, rules, retention_s), store=store)
    _run(agent, clock, 400)  # the GPU lost at 1 min, back at 3 min
    resolved = "SELECT count(*) FROM incidents WHERE resolved_at IS NOT NULL"
    before = store.db.run(lambda c: c.execute(resolved).fetchone()[0])
    assert before >= 1
    clock.advance(86_400.0)  # the next daily prune, the incidents a day old
    agent.tick()
    assert store.db.run(lambda c: c.execute(resolved).fetchone()[0]) == (before if kept else 0)
def test_the_live_detector_forgets_engagements_long_over(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A long-running agent keeps only recent rule engagements (a healthy node's
    checkpoints engage rules ~30 times an hour: kept for ever, every tick searched them)."""
    from watchdog.pipeline import live

    monkeypatch.setattr(live, "ENGAGED_KEEP_S", 300.0)
    clock = ManualClock(start=1_750_000_000.0)
    agent = _agent("sim:healthy", clock, [])
    seen: set[object] = set()
    for _ in range(40 * 12):  # 40 min: two checkpoints' engagements
        agent.tick()
        clock.advance(5.0)
        seen |= set(agent.detector.engaged._episodes)
    e = agent.detector.engaged
    assert len(seen) > len(e._episodes) > 0
    assert all(end > e.until - 2 * 300.0 for end in e._episodes.values())
