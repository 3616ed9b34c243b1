"""Assemble the running agent from its config: state store, pipeline, notifiers,
recording, metrics endpoint and the daemon loop; and reload it on SIGHUP.

``watchdog run`` only parses arguments and calls :func:`build` then :meth:`Agent.serve`.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

from watchdog.clock import Clock

log = logging.getLogger("watchdog.agent")


@dataclass
class Agent:
    """A built agent: the pipeline and what runs around it."""

    cfg: Any
    spec: str
    pipeline: Any
    daemon: Any
    rules_override: list[str]
    state_dir: Any
    metrics_error: str | None = None
    servers: list[Any] = field(default_factory=list)

    def announce(self) -> None:
        """The start line, after the first tick (so it can say what was found)."""
        p = self.pipeline
        if p.source is None:
            print(f"watchdog: GPUs not readable yet ({p.source_error}); retrying, state in "
                  f"{self.state_dir}", file=sys.stderr)
            return
        n = len(p.source.devices())
        print(f"watchdog: watching {n} GPU{'s' if n != 1 else ''} on {p.host} (source "
              f"{self.spec}, every {p.interval:g}s"
              f"{f', {self.daemon.speed:g}x speed' if self.daemon.speed != 1 else ''}, "
              f"{len(p.detector.rules)} rules, state in {self.state_dir})", file=sys.stderr)

    def serve(self) -> int:
        """Run until SIGTERM/SIGINT or ``--duration``; returns the exit code."""
        p = self.pipeline
        self.daemon.on_ready = self.announce
        self.daemon.install_signals()
        try:
            return self.daemon.run()
        finally:
            p.close()
            for s in self.servers:
                try:
                    s.shutdown()
                except Exception:  # noqa: BLE001 - shutting down anyway
                    pass
            log.info("stopped after %d ticks", p.stats.ticks)

    def reload(self) -> str:
        """SIGHUP: re-read the config and rules; raise WatchdogError to keep the old ones."""
        from watchdog import config as config_mod
        from watchdog.detect import load_rules

        if self.cfg.path is None:
            rules = load_rules(self.rules_override or None)
            self.pipeline.replace_detector(_detector_factory(rules, self.pipeline))
            return f"rules reloaded ({len(rules)} rules)"
        new = config_mod.load(self.cfg.path)
        rules = load_rules(self.rules_override or list(new.rules) or None)
        notes = []
        for key in ("source", "state_dir", "host", "metrics_listen", "record", "model",
                    "notify"):
            if getattr(new, key) != getattr(self.cfg, key):
                notes.append(f"{key} changed: takes effect at the next restart")
        self.pipeline.replace_detector(_detector_factory(rules, self.pipeline))
        if new.interval != self.cfg.interval:
            self.pipeline.interval = new.interval
            notes.append(f"interval now {new.interval:g}s")
        self.cfg = new
        return "; ".join([f"{self.cfg.path}: {len(rules)} rules", *notes])


def _detector_factory(rules: Any, pipeline: Any) -> Any:
    from watchdog.detect import Detector
    from watchdog.detect.engine import LIVE_TICK_BATCH_S

    def make(source: Any) -> Any:
        return Detector(rules, host=pipeline.host or source.host, devices=source.devices(),
                        tick_batch_s=LIVE_TICK_BATCH_S)

    return make


def _anomaly(cfg: Any, sdir: Any, namespace: str, pipeline: Any) -> Any:
    """The anomaly model hook for config ``model:`` (None when off)."""
    from pathlib import Path

    from watchdog.anomaly.auto import DaemonModel, parse

    settings = parse(cfg.model, f"{cfg.path}:{cfg.lines.get('model', '?')}")
    if settings is None:
        return None

    def gpu_model() -> str:
        src = pipeline.source
        names = [d.name for d in src.devices() if d.name] if src is not None else []
        return names[0] if names else "unknown"

    return DaemonModel(settings, Path(sdir) / f"anomaly-{namespace}.wdm", pipeline.host,
                       pipeline.interval, gpu_model)


def _notifier(cfg: Any, sdir: Any, clock: Clock, host: str | None, pipeline: Any) -> Any:
    """Alerting (``notify:`` with at least one sink), or None: console only."""
    if cfg.notify is None or not cfg.notify.sinks:
        return None
    from watchdog.notify.notifier import for_agent

    def rule_info(name: str) -> tuple[str, str | None]:
        det = pipeline.detector
        for r in getattr(det, "rules", ()) if det is not None else ():
            if r.name == name:
                return r.scope, getattr(r, "runbook", None)
        return "node", None  # the agent's own node-level incidents (NVML unavailable)

    return for_agent(cfg.notify, sdir, clock.now, host or socket.gethostname(), rule_info)


def build(cfg: Any, *, spec: str, options: Any, interval: float, speed: float,
          rules_override: list[str], state_dir: str | None, demo: bool, clock: Clock,
          stop_after: float | None) -> Agent:
    """Everything ``watchdog run`` needs, from a validated config and the command line."""
    from watchdog.detect import load_rules
    from watchdog.notify_console import ConsoleNotifier
    from watchdog.pipeline.live import LivePipeline
    from watchdog.service.daemon import Daemon
    from watchdog.sources import kind_of, open_live
    from watchdog.state import connect, resolve_state_dir
    from watchdog.state.agent import AgentStore

    rules = load_rules(rules_override or list(cfg.rules) or None)
    namespace = "sim" if kind_of(spec) == "sim" else "nvml"
    sdir = resolve_state_dir(state_dir or cfg.state_dir)
    store = AgentStore(connect(sdir), namespace)
    host = options.host or (None if namespace == "sim" else socket.gethostname())
    recorder_box: list[Any] = []

    def open_source(now: float) -> Any:
        src = open_live(spec, options, start=now)
        if cfg.record is not None and not recorder_box:
            from watchdog.service.recorder import Recorder

            recorder_box.append(Recorder(cfg.record.dir, cfg.record.keep_s, host=src.host,
                                         devices=src.devices(), source=spec))
            pipeline.recorder = recorder_box[0]
        return src

    colour = None if not os.environ.get("JOURNAL_STREAM") else False
    pipeline = LivePipeline(open_source, lambda src: None, clock, spec=spec,
                            interval=interval, store=store,
                            notifiers=[ConsoleNotifier(color=colour)], host=host)
    pipeline._make_detector = _detector_factory(rules, pipeline)
    pipeline.notifier = _notifier(cfg, sdir, clock, host, pipeline)
    pipeline.anomaly = _anomaly(cfg, sdir, namespace, pipeline)
    agent = Agent(cfg=cfg, spec=spec, pipeline=pipeline, daemon=None,
                  rules_override=rules_override, state_dir=sdir)
    stop_at = clock.now() + stop_after if stop_after is not None else None
    agent.daemon = Daemon(pipeline, interval=interval, speed=speed, stop_at=stop_at,
                          reload=agent.reload)
    if cfg.metrics_listen:
        from watchdog.service.metrics import parse_listen, serve

        mhost, mport = parse_listen(cfg.metrics_listen, f"{cfg.path}:metrics")
        server, err = serve(pipeline, mhost, mport)
        agent.metrics_error = err
        pipeline.extra_status["metrics"] = {"listen": f"{mhost}:{mport}", "error": err}
        if server is not None:
            agent.servers.append(server)
    if demo:
        log.info("demo node: state kept apart from real GPUs (namespace sim) in %s", sdir)
    return agent
