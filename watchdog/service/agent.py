"""Assemble the running agent from its config: state store, pipeline, alerting, recording,
metrics endpoint and the daemon loop; and reload it on SIGHUP.

``watchdog run`` only parses arguments and calls :func:`build` then :meth:`Agent.serve`.
:func:`build` checks and opens what can refuse the start (:class:`Opened`); the
:class:`Agent` is then built in one pass, every part given what it needs when it is made
(the parts that call back into the agent get its bound methods).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from watchdog.clock import Clock
from watchdog.detect import Detector, Rule
from watchdog.incident import Incident
from watchdog.notify.base import Sink
from watchdog.notify.notifier import Notifier
from watchdog.pipeline.live import LivePipeline
from watchdog.pipeline.ports import AnomalyHook, Listener, SampleRecorder
from watchdog.pipeline.settings import Settings
from watchdog.service.claim import GpuClaim, claim_at_start
from watchdog.service.config import Config
from watchdog.service.daemon import Daemon
from watchdog.service.fleet import FleetView
from watchdog.service.jobs import JobTracker, SampleTee
from watchdog.service.metrics_http import MetricsServer
from watchdog.service.slurm import SlurmActor
from watchdog.sources import SourceOptions
from watchdog.sources.base import LiveSource
from watchdog.store.agent import AgentStore
from watchdog.store.lock import StateLock
from watchdog.store.store import Store
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.agent")
METRICS_RETRY_S = 10.0  # a metrics port that was taken is tried again this often


@dataclass
class Opened:
    """What :func:`build` checked and opened before the agent is made: the locked state
    directory, the rules in force, the sinks (secrets read), the anomaly hook, the
    recorder, the job tracker, the claim on the GPUs (and the source opened for it), and
    the state database."""

    state_dir: Path
    lock: StateLock
    settings: Settings
    sinks: dict[str, Sink] | None
    host: str | None
    anomaly: AnomalyHook | None
    recorder: SampleRecorder | None
    jobs: JobTracker
    gpus: GpuClaim
    first: LiveSource | None
    db: Store
    store: AgentStore


class Agent:
    """A built agent: the pipeline and what runs around it (alerting, the fleet's view,
    the Slurm actor, the metrics endpoint, the daemon loop)."""

    def __init__(self, cfg: Config, opened: Opened, *, spec: str, options: SourceOptions,
                 interval: float, speed: float, clock: Clock, stop_after: float | None,
                 rules_override: list[str], load_config: Callable[[str], Config] | None,
                 shadow: bool) -> None:
        self.cfg = cfg
        self.spec = spec
        self.rules_override = rules_override
        self.load_config = load_config  # path -> a validated config (SIGHUP)
        self.state_dir = opened.state_dir
        self.lock: StateLock | None = opened.lock
        self.db: Store | None = opened.db
        self.settings = opened.settings  # the interval and rules in force (one owner)
        self.jobs = opened.jobs  # what the node runs
        self.gpus: GpuClaim | None = opened.gpus  # this agent's claim on the node's GPUs
        self.exit_code = 0  # 2 once a claim found another agent on the GPUs
        self.servers: list[MetricsServer] = []
        self.metrics_at: tuple[str, int] | None = None
        self.metrics_error: str | None = None
        self._metrics_retry_at = 0.0
        host = opened.host
        # the fleet's view of the job (job: {prometheus: URL}); a shadow never notifies
        url = cfg.job.prometheus if cfg.job is not None else None
        fleet = FleetView(url, host or socket.gethostname()) if url and not shadow else None
        self.alerting = None if shadow else _alerting(
            cfg, opened, clock, self._job_of, fleet.job_clear if fleet is not None else None)
        self.fleet = fleet if self.alerting is not None else None
        status: JsonDoc = {}  # the pipeline's extra status, which the parts keep up to date
        # drains and resumes the node (config slurm:); a shadow never acts
        self.slurm = None if shadow or cfg.slurm is None else SlurmActor(
            cfg.slurm, now=clock.now, judging=self._judging, annotate=self._annotate,
            db=opened.db, status_to=status)
        from watchdog.notify.console import IncidentLog

        listeners: list[Listener] = [IncidentLog(clock.now, stamp=speed != 1)]
        if self.slurm is not None:  # it sees every transition
            listeners.append(self.slurm)
        self.pipeline = LivePipeline(
            opened.gpus.opener(spec, options, opened.first, on_refused=self.refused),
            _detector_factory(opened.settings, host), clock, spec=spec,
            settings=opened.settings, store=opened.store, listeners=listeners,
            alerting=self.alerting, recorder=SampleTee(opened.jobs, opened.recorder, status),
            host=host, anomaly=opened.anomaly, watch_gaps=speed == 1, extra_status=status)
        self.daemon = Daemon(self.pipeline, interval=interval, settings=opened.settings,
                             speed=speed,
                             stop_at=clock.now() + stop_after if stop_after is not None
                             else None, reload=self.reload, maintain=self.maintain,
                             on_ready=self.announce)
        if self.fleet is not None:
            self.fleet.start()
        if self.slurm is not None:
            self.slurm.start()
        if shadow:
            status["shadow"] = True
            log.warning("SHADOW agent (--shadow): watches and records beside the node's "
                        "agent and never notifies")
        if cfg.metrics_listen:
            from watchdog.service.metrics import parse_listen

            self.metrics_at = parse_listen(cfg.metrics_listen, f"{cfg.path}:metrics")
            self.start_metrics()

    # --- what the parts call back ----------------------------------------------------------
    def _job_of(self, uuids: list[str]) -> tuple[str, str | None] | None:
        """The job the GPUs ``uuids`` run, for alerting: ``(id, run id)``; a job only a
        process's environment names labels the page but never joins the job's incident
        (no run id: not job-wide)."""
        j = self.jobs.job_for(uuids)
        return None if j is None else (j.id, j.run_id if j.trusted else None)

    def _judging(self) -> bool:
        """Whether the agent can read its GPUs now (the Slurm actor judges only then)."""
        return self.pipeline.source is not None

    def _annotate(self, inc: Incident, text: str) -> None:
        """The Slurm actor's note on an incident (what it did about it)."""
        self.pipeline.annotate(inc, "slurm", text)

    def announce(self) -> None:
        """The start line, after the first tick (so it can say what was found)."""
        p = self.pipeline
        where = f"state in {self.state_dir}" + (
            " (MEMORY ONLY)" if self.db is not None and self.db.mode == "memory" else "")
        if p.source is None:
            log.error("GPUs not readable yet (%s); retrying, %s", p.source_error, where)
            return
        n = len(p.source.devices())
        rules = len(p.detector.rules) if p.detector is not None else 0
        log.info("watching %d GPU%s on %s (source %s, every %gs%s, %d rules, %s)", n,
                 "s" if n != 1 else "", p.host, self.spec, p.interval,
                 f", {self.daemon.speed:g}x speed" if self.daemon.speed != 1 else "",
                 rules, where)

    def start_metrics(self) -> None:
        """Serve the metrics endpoint; a taken port is retried every
        ``METRICS_RETRY_S`` (:meth:`maintain`) and shown by ``watchdog status`` meanwhile."""
        from watchdog.service.metrics import serve

        if self.metrics_at is None or self.servers:
            return
        mhost, mport = self.metrics_at
        first = self.metrics_error is None and not self._metrics_retry_at
        server, err = serve(self.pipeline, mhost, mport, quiet=True, jobs=self.jobs,
                            extra=[self.slurm] if self.slurm is not None else [])
        self._metrics_retry_at = time.monotonic() + METRICS_RETRY_S
        if err is not None and first:
            log.error("%s; retrying every %.0f s", err, METRICS_RETRY_S)
        if server is not None:
            self.servers.append(server)
            if self.metrics_error is not None:
                log.warning("metrics endpoint %s:%d serving now", mhost, mport)
        self.metrics_error = err
        self.pipeline.extra_status["metrics"] = {"listen": f"{mhost}:{mport}", "error": err}

    def maintain(self) -> None:
        """Called by the daemon's main loop every few seconds (not on the tick thread)."""
        if self.metrics_at is not None and not self.servers and \
                time.monotonic() >= self._metrics_retry_at:
            self.start_metrics()

    def serve(self) -> int:
        """Run until SIGTERM/SIGINT or ``--duration``; returns the exit code."""
        p = self.pipeline
        self.daemon.install_signals()
        try:
            return self.daemon.run() or self.exit_code
        finally:
            if self.fleet is not None:
                self.fleet.stop()
            if self.slurm is not None:
                self.slurm.stop()
            p.close()
            if self.gpus is not None:
                self.gpus.release()
            for s in self.servers:
                try:
                    s.shutdown()
                except Exception:  # noqa: BLE001 - shutting down anyway
                    pass
            if self.db is not None:
                if not self.db.try_disk(force=True):
                    log.error("stopping with the state in memory only (%s): what happened "
                              "since it could not be written is lost", self.db.reason)
                self.db.close()
            if self.lock is not None:
                self.lock.release()
            log.info("stopped after %d ticks", p.stats.ticks)

    def refused(self, e: Exception) -> None:
        """Another agent claimed the GPUs before this one could (NVML came back after
        both started): this one never notifies and stops with exit 2."""
        log.error("%s; stopping (exit 2)", e)
        alerting, self.pipeline.alerting = self.pipeline.alerting, None
        if alerting is not None:
            alerting.close()
        self.exit_code = 2
        self.daemon.stop()

    def reload(self) -> str:
        """SIGHUP: re-read the config and rules; raise (WatchdogError for a bad file) to
        keep the old ones. Everything is read and checked before anything changes; the
        interval and the rules then change for every part at once (:class:`Settings`), and
        a failure while applying them puts the running ones back."""
        from watchdog.detect import load_rules

        if self.cfg.path is None:
            rules = load_rules(self.rules_override or None)
            self._apply(None, rules)
            return f"rules reloaded ({len(rules)} rules)"
        if self.load_config is None:
            from watchdog.errors import WatchdogError

            raise WatchdogError("this agent was built without a config loader")
        new = self.load_config(self.cfg.path)
        rules = load_rules(self.rules_override or list(new.rules) or None)
        within_retention(rules, new.retention_s)
        notes = []
        for key in ("source", "state_dir", "host", "metrics_listen", "record", "model",
                    "notify", "job", "slurm"):
            if getattr(new, key) != getattr(self.cfg, key):
                notes.append(f"{key} changed: takes effect at the next restart")
        changed = self._apply(new.interval, rules, new.retention_s)
        if "interval" in changed:
            notes.append(f"interval now {new.interval:g}s")
        self.cfg = new
        return "; ".join([f"{self.cfg.path}: {len(rules)} rules", *notes])

    def _apply(self, interval: float | None, rules: Sequence[Rule],
               retention_s: float | None = None) -> frozenset[str]:
        """Put ``interval``, ``rules`` and ``retention_s`` in force, in one update; on any
        failure the running ones are put back (and the failure raised for the reload to
        report)."""
        s = self.settings
        old = (s.interval, s.rules, s.retention_s)
        try:
            changed = s.update(interval=interval, rules=rules, retention_s=retention_s)
            self.pipeline.replace_detector()
        except BaseException:
            s.update(interval=old[0], rules=old[1], retention_s=old[2])
            self.pipeline.replace_detector()
            raise
        return changed


def within_retention(rules: Sequence[Rule], retention_s: float | None) -> None:
    """Refuse a rule that waits longer than the state database keeps anything (the
    config's ``retention:``): its pending state would outlive what it is about. The rule
    language caps every wait at 7 days already (``docs/rules.md``, Limits)."""
    if not retention_s:
        return
    from watchdog.errors import InputError
    from watchdog.notify.render import how_long

    for r in rules:
        waits = [("for", r.for_s), ("keep_firing_for", r.keep_firing_for)]
        if r.learned is not None:
            waits += [("for", r.learned.min), ("for", r.learned.margin)]
        for key, secs in waits:
            if secs > retention_s:
                raise InputError(f"{r.file}:{r.key_lines.get(key, r.line)}: rule {r.name}: "
                                 f"{key}: {how_long(secs)} is longer than the config's "
                                 f"retention ({how_long(retention_s)}), all the state "
                                 "database keeps")


def _detector_factory(settings: Settings, host: str | None
                      ) -> Callable[[LiveSource], Detector]:
    """Builds the live detector for a source's GPUs with the rules in force."""
    from watchdog.pipeline.core import build_detector

    def make(source: LiveSource) -> Detector:
        return build_detector(settings.rules, host=host or source.host,
                              devices=source.devices(), mode="live")

    return make


def _anomaly(cfg: Config, sdir: Path, namespace: str, host: str | None,
             settings: Settings) -> AnomalyHook | None:
    """The anomaly model hook for config ``model:`` (None when off), following the
    interval in force."""
    from watchdog.anomaly.auto import DaemonModel, parse

    model = parse(cfg.model, f"{cfg.path}:{cfg.lines.get('model', '?')}")
    if model is None:
        return None
    hook = DaemonModel(model, sdir / f"anomaly-{namespace}.wdm", host, settings.interval)
    settings.subscribe(lambda s, changed: hook.set_interval(s.interval)
                       if "interval" in changed else None)
    return hook


def _own_runbook(rule: str) -> str | None:
    """The shipped runbook page of an incident the agent raises itself (no rule file),
    found where the shipped rules find theirs (``../docs/runbooks/`` beside them)."""
    from watchdog.detect.loader import default_rules_dir
    from watchdog.pipeline.own import OWN_RULES

    kind = OWN_RULES.get(rule)
    if kind is None:
        return None
    page = (default_rules_dir() / ".." / "docs" / "runbooks" / f"{kind}.md").resolve()
    return str(page) if page.is_file() else None


def _alerting(cfg: Config, opened: Opened, clock: Clock,
              job_of: Callable[[list[str]], tuple[str, str | None] | None],
              job_clear: Callable[[str, str], bool | None] | None) -> Notifier | None:
    """Alerting (``notify:`` with at least one sink), or None: console only."""
    if not opened.sinks or cfg.notify is None:
        return None
    from watchdog.notify.notifier import for_agent

    settings = opened.settings

    def rule_info(name: str) -> tuple[str, str | None]:
        scope, runbook = settings.rule_info(name)
        return scope, runbook or _own_runbook(name)

    return for_agent(cfg.notify, opened.db, clock.now, opened.host or socket.gethostname(),
                     rule_info, sinks=opened.sinks, wall=clock.real, job_of=job_of,
                     job_clear=job_clear)


def build(cfg: Config, *, spec: str, options: SourceOptions, interval: float, speed: float,
          rules_override: list[str], state_dir: str | None, demo: bool, clock: Clock,
          stop_after: float | None, load_config: Callable[[str], Config] | None = None,
          shadow: bool = False) -> Agent:
    """Everything ``watchdog run`` needs, from a validated config and the command line,
    in one pass: every collaborator is built before the part that uses it.

    Order matters: the state directory is locked first (a second agent changes nothing),
    then everything that can refuse the start is checked (rules, sinks and their secrets,
    the model file, the claim on the GPUs), and only then is the state database opened
    and changed. ``shadow``: beside the node's agent (``run --shadow``): no claim on the
    GPUs, and no notification ever (no sink is started)."""
    import os

    from watchdog.detect import load_rules
    from watchdog.sources import kind_of
    from watchdog.store import resolve_state_dir
    from watchdog.store.lock import acquire

    sdir = resolve_state_dir(state_dir or cfg.state_dir)
    lock = acquire(sdir)
    gpus: GpuClaim | None = None
    first = None
    try:
        settings = Settings(interval, load_rules(rules_override or list(cfg.rules) or None),
                            cfg.retention_s)
        within_retention(settings.rules, cfg.retention_s)
        sinks = None
        if cfg.notify is not None and cfg.notify.sinks:
            from watchdog.notify.notifier import build_sinks

            sinks = build_sinks(cfg.notify)
        namespace = "sim" if kind_of(spec) == "sim" else "nvml"
        host = options.host or (None if namespace == "sim" else socket.gethostname())
        anomaly = _anomaly(cfg, Path(sdir), namespace, host, settings)
        recorder = None
        if cfg.record is not None:
            from watchdog.service.recorder import Recorder

            recorder = Recorder(cfg.record.dir, cfg.record.keep_s, source=spec, host=host)
        jobs = JobTracker(cfg.job)
        if jobs.problem:
            log.warning("%s: the node's own reading is used", jobs.problem)
        gpus = GpuClaim({"pid": os.getpid(), "state_dir": str(sdir), "host": host,
                         "started_at": clock.real()},
                        wanted=namespace == "nvml" and not shadow)
        first = claim_at_start(spec, options, clock, gpus)
        db = Store(sdir)
        store = AgentStore(db, namespace)
    except BaseException:
        if first is not None:
            first.close()
        if gpus is not None:
            gpus.release()
        lock.release()
        raise
    opened = Opened(Path(sdir), lock, settings, sinks, host, anomaly, recorder, jobs, gpus,
                    first, db, store)
    agent = Agent(cfg, opened, spec=spec, options=options, interval=interval, speed=speed,
                  clock=clock, stop_after=stop_after, rules_override=rules_override,
                  load_config=load_config, shadow=shadow)
    if demo:
        log.info("demo node: state kept apart from real GPUs (namespace sim) in %s", sdir)
    return agent
