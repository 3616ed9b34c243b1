"""Hostile rule files: bounded where they are parsed; a reload never ends the agent.

A condition nested 150 parentheses deep, an ``or`` chain of 1,000 terms or ``not`` 20,000
times once ended the running agent with ``internal error: RecursionError`` on SIGHUP (and
every restart under systemd read the same file); a summary's ``{temp:.1500000000f}`` took
2.9 GB for ``rules check`` to say "ok" and ended a reload in MemoryError; ``for: 400d``
passed. Each is now one ``FILE:LINE`` error from ``rules check`` (exit 2, in a few MB),
and on SIGHUP the running rules stay, whatever the new file does.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hostile_helpers import Outcome, budget, run
from test_hostile_agent import Agent, watchdog, write_config

from watchdog.testing.httpserver import Server

RULE = """- name: hostile
  kind: thermal_throttle
  severity: warning
  condition: {condition}
  for: {for_}
  evidence:
    temp: last(temperature.gpu, 10s)
  summary: "{summary}"
"""
#: each bomb and the words its one error line must hold
BOMBS = {
    "150 parentheses": ({"condition": "(" * 150 + "temperature.gpu > 90" + ")" * 150},
                        "nested more than 32 levels"),
    "1,000 or-terms": ({"condition": " or ".join(["temperature.gpu > 90"] * 1000)},
                       "more than 1024 tokens"),
    "a 100-term or-chain": ({"condition": " or ".join(["temperature.gpu > 90"] * 100)},
                           "more than 64 levels deep"),
    "not x 20,000": ({"condition": "not " * 20000 + "temperature.gpu > 90"},
                     "more than 1024 tokens"),
    "not x 40": ({"condition": "not " * 40 + "temperature.gpu > 90"},
                 "nested more than 32 levels"),
    "unary minus x 40": ({"condition": "-" * 40 + "temperature.gpu > 90"},
                         "nested more than 32 levels"),
    "format precision bomb": ({"summary": "GPU {gpus} at {temp:.1500000000f} C"},
                              "precision at most 12"),
    "format width bomb": ({"summary": "GPU {gpus} at {temp:>900000000.1f} C"},
                          "width at most 40"),
    "format 5,000-digit width": ({"summary": "{temp:" + "9" * 5000 + "}"},
                                 "width at most 40"),
    "nested format field": ({"summary": "{temp:{n_gpus}}"}, "not a plain format spec"),
    "for: 400d": ({"for_": "400d"}, "for: 400 days is longer than the 7 days"),
    "keep_firing_for: 30d": ({"for_": "1m\n  keep_firing_for: 30d"},
                             "keep_firing_for: 30 days is longer"),
    "learned wait of 8 days": ({"for_": "learned(default=8d, min=1m)"},
                               "for: 8 days is longer"),
}


def rule_file(tmp: Path, **fields: str) -> Path:
    f = tmp / "hostile.yaml"
    f.write_text(RULE.format(**{"condition": "temperature.gpu > 90", "for_": "1m",
                                "summary": "GPU {gpus} at {temp:.0f} C", **fields}))
    return f


def refused_by_name(o: Outcome, path: Path, words: str) -> str:
    """Exit 2, exactly one error line naming the file and a line, holding ``words``, no
    traceback; the budget: far below the unit's MemoryMax (the bombs took gigabytes),
    measured by bench/hostile.py."""
    assert "Traceback" not in o.stderr and "internal error" not in o.stderr, o.stderr[-2000:]
    assert o.rc == 2, (o.rc, o.stderr[-1000:])
    errors = [x for x in o.stderr.splitlines() if x.startswith("watchdog: error:")]
    assert len(errors) == 1, o.stderr[-2000:]
    assert errors[0].startswith(f"watchdog: error: {path}:"), errors[0]
    assert words in errors[0], errors[0]
    budget(o)
    return errors[0]


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_rules_check_refuses_a_rule_bomb_with_its_file_and_line(tmp_path: Path,
                                                                 bomb: str) -> None:
    """rules: `watchdog rules check` refuses a rule bomb with one FILE:LINE line"""
    fields, words = BOMBS[bomb]
    f = rule_file(tmp_path, **fields)
    o = run(["rules", "check", str(f)], timeout=60)
    refused_by_name(o, f, words)


def test_every_shipped_rule_and_documented_example_is_far_inside_the_limits() -> None:
    """rules: the limits leave at least 4x room over every shipped rule (tokens, nesting,
    terms, depth, format width and precision, for:)"""
    import re
    import string

    from watchdog.detect import lang, loader

    rules = loader.load_rules(None)
    docs = (Path(__file__).resolve().parent.parent / "docs" / "rules.md").read_text()
    exprs = [r.condition_src for r in rules]
    summaries = [r.summary for r in rules]
    for block in re.findall(r"```ya?ml\n(.*?)```", docs, re.S):  # the documented examples
        try:
            doc = yaml.safe_load(block)
        except yaml.YAMLError:
            continue
        items = doc.get("rules") if isinstance(doc, dict) else doc
        examples = [r for r in items or [] if isinstance(r, dict) and "condition" in r]
        exprs += [str(r["condition"]) for r in examples]
        summaries += [str(r["summary"]) for r in examples if "summary" in r]
    assert len(exprs) > len(rules) and len(summaries) > len(rules)  # the examples count
    level = [0]
    enter = lang._Parser.enter

    def spy(self: lang._Parser, t: lang.Tok) -> None:
        enter(self, t)
        level[0] = max(level[0], self.level)

    lang._Parser.enter = spy  # type: ignore[method-assign]
    try:
        nodes = [lang.parse(e) for e in exprs]
    finally:
        lang._Parser.enter = enter  # type: ignore[method-assign]
    tokens = max(len(lang.tokenize(e)) for e in exprs)

    def size(n: lang.Node, d: int = 1) -> tuple[int, int]:
        kids = [size(c, d + 1) for c in lang.children(n)]
        return 1 + sum(k[0] for k in kids), max([d, *(k[1] for k in kids)])

    count, depth = max(size(n)[0] for n in nodes), max(size(n)[1] for n in nodes)
    assert 4 * tokens <= lang.MAX_TOKENS and 4 * level[0] <= lang.MAX_NESTING
    assert 4 * count <= lang.MAX_NODES and 4 * depth <= lang.MAX_DEPTH
    specs = [spec for text in summaries for _, f, spec, _ in string.Formatter().parse(text)
             if f]
    widths = [int(m.group(1) or 0) for s in specs if (m := re.match(r"\D*(\d*)", s))]
    precs = [int(m.group(1)) for s in specs if (m := re.search(r"\.(\d+)", s))]
    assert 4 * max(widths) <= loader.MAX_FORMAT_WIDTH
    assert 4 * max(precs) <= loader.MAX_FORMAT_PRECISION
    assert 4 * max(r.for_s for r in rules) <= loader.MAX_FOR_S


# --- SIGHUP -------------------------------------------------------------------------------
@pytest.fixture()
def hook() -> Iterator[Server]:
    with Server() as s:
        yield s


@pytest.mark.slow
def test_a_rule_bomb_on_sighup_keeps_the_running_rules(tmp_path: Path, hook: Server) -> None:
    """rules: a rule bomb written into the rules folder and SIGHUP: one line naming the
    file and line, the running rules stay, the agent goes on (no RecursionError, exit 0)"""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "extra.yaml").write_text(RULE.format(condition="temperature.gpu > 200", for_="1m",
                                                  summary="GPU {gpus} at {temp:.0f} C"))
    state = tmp_path / "state"
    cfg = write_config(tmp_path, state, hook, source="sim:healthy",
                       extra=f"rules: [{rules}]\n")
    a = Agent(cfg, speed=1, duration="60s")
    try:
        a.wait_log("watching 8 GPUs")
        for n, (fields, words) in enumerate(
                [BOMBS["150 parentheses"], BOMBS["not x 20,000"], BOMBS["1,000 or-terms"],
                 BOMBS["format precision bomb"]]):
            bomb = rule_file(tmp_path, **fields).read_text()
            (rules / "extra.yaml").write_text(bomb)
            a.p.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while a.log().count("reload failed") <= n and time.monotonic() < deadline:
                time.sleep(0.05)
            failed = [x for x in a.log().splitlines() if "reload failed" in x]
            assert len(failed) == n + 1, a.log()
            assert f"{rules / 'extra.yaml'}:" in failed[-1] and words in failed[-1], failed[-1]
        assert a.p.poll() is None, a.log()
        time.sleep(5.5)  # the next status row
        doc = json.loads(watchdog("status", "--state-dir", str(state), "--json").stdout)
        assert doc["reload"]["ok"] is False and "extra.yaml:" in doc["reload"]["message"]
        assert a.stop() == 0
    finally:
        if a.p.poll() is None:
            a.p.kill()
    assert "Traceback" not in a.log() and "RecursionError" not in a.log()


@pytest.mark.parametrize("error", [RecursionError("maximum recursion depth exceeded"),
                                   MemoryError(), KeyError("bug")])
def test_any_failure_of_a_reload_keeps_the_agent_running(error: Exception) -> None:
    """rules: whatever a reload raises (RecursionError, MemoryError, a bug), the daemon
    logs one line, keeps the running config and goes on ticking"""
    from watchdog.clock import ManualClock
    from watchdog.service.daemon import Daemon

    class Pipeline:
        clock = ManualClock(0.0)
        source = detector = None
        source_error = "none"
        host = "n"

        def __init__(self) -> None:
            self.extra_status: dict[str, object] = {}
            self.ticks = 0
            self.stats = type("S", (), {"ticks": 0, "missed_ticks": 0, "last_detect_ms": 0.0,
                                        "nvml_errors": 0})()

        def tick(self) -> None:
            self.ticks += 1

    def reload() -> str:
        raise error

    p = Pipeline()
    d = Daemon(p, interval=0.01, reload=reload)
    t = threading.Thread(target=d.run, daemon=True)
    t.start()
    d._on_hup(signal.SIGHUP, None)
    deadline = time.monotonic() + 30
    while d.reload_state is None and time.monotonic() < deadline:
        time.sleep(0.01)
    ticks = p.ticks
    while p.ticks <= ticks + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    d.stop()
    t.join(10)
    assert d.reload_state is not None and d.reload_state["ok"] is False
    assert type(error).__name__ in d.reload_state["message"]
    assert p.ticks > ticks + 2 and not t.is_alive()


def test_a_wait_longer_than_the_configs_retention_is_refused(tmp_path: Path) -> None:
    """rules: `retention: 1h` and a rule with `for: 2h`: `watchdog run` refuses it with
    the rule's file and line (its pending state would outlive the database's memory)"""
    f = rule_file(tmp_path, for_="2h")
    cfg = tmp_path / "w.yaml"
    cfg.write_text(f"source: sim:healthy\nstate_dir: {tmp_path / 's'}\nretention: 1h\n"
                   f"rules: [{f}]\n")
    o = run(["run", "--config", str(cfg), "--duration", "2s"], timeout=60)
    line = refused_by_name(o, f, "for: 2 h is longer than the config's retention (1 h)")
    assert line.startswith(f"watchdog: error: {f}:5:"), line
