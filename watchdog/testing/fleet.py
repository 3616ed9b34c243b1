"""A simulated fleet on loopback, for ``tests/test_fleet_e2e.py`` and
``bench/fleet_bench.py``: real agents (``watchdog run --source sim:node(id=K),…``, each its
own host name, state and metrics port), a real Prometheus scraping them with the shipped
fleet rules and a real Alertmanager with the documented route and inhibitions
(``config/prometheus-fleet.yml``, ``config/alertmanager-fleet.yml``), timers scaled down,
its receiver a loopback webhook; PagerDuty is :class:`~watchdog.testing.httpserver.Server`
over TLS.

Ports are picked by binding port 0 first (neither binary takes ``:0``). Every process
started here is stopped by :meth:`Fleet.close`, by its own pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from watchdog import yamlsafe
from watchdog.untyped import JsonDoc

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def missing_binaries() -> str | None:
    """Why a fleet cannot run here (a binary missing), or None."""
    if PROMETHEUS is None:
        return "prometheus is not installed (apt-get install prometheus; .ci/run installs it)"
    if ALERTMANAGER is None:
        return ("prometheus-alertmanager is not installed (apt-get install "
                "prometheus-alertmanager; .ci/run installs it)")
    return None


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return int(port)


HANG_ALERTS = ("JobHangCulprit", "JobHang", "JobStall")


def fleet_rules(for_s: float | None = None, alerts: tuple[str, ...] = HANG_ALERTS) -> str:
    """The shipped fleet rules (what ``watchdog rules export --prometheus`` prints), with
    the ``for:`` of ``alerts`` set to ``for_s`` seconds when given (a test's compressed
    time; the straggler rule's windows are minutes of Prometheus's own clock, kept)."""
    out = subprocess.run([sys.executable, "-m", "watchdog", "rules", "export", "--prometheus"],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    if for_s is None:
        return out
    lines, current = [], None
    for ln in out.splitlines():
        if ln.lstrip().startswith("- alert: "):
            current = ln.split("- alert: ", 1)[1].strip()
        elif ln.lstrip().startswith("- record: "):
            current = None
        if ln.startswith("        for: ") and current in alerts:
            ln = f"        for: {for_s:g}s"
        lines.append(ln)
    return "\n".join(lines) + "\n"


def alertmanager_config(receiver_url: str, *, scale: float = 1.0) -> str:
    """``config/alertmanager-fleet.yml`` as documented, its receiver a webhook to
    ``receiver_url`` and its timers multiplied by ``scale`` (at least 1 s)."""
    _, doc = yamlsafe.load_file(REPO / "config" / "alertmanager-fleet.yml")

    def scaled(text: str) -> str:
        from watchdog.units import parse_duration

        return f"{max(1000, round(parse_duration(text, what='timer') * scale * 1000))}ms"

    def walk(route: JsonDoc) -> None:
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in route:
                route[key] = scaled(route[key])
        for sub in route.get("routes", []):
            walk(sub)

    walk(doc["route"])
    doc["receivers"] = [{"name": r["name"], "webhook_configs": [
        {"url": receiver_url, "send_resolved": True}]} for r in doc["receivers"]]
    return yaml.safe_dump(doc, sort_keys=False)


def prometheus_config(rules_file: Path, targets: list[str], am_port: int,
                      interval_s: float = 1.0) -> str:
    """``config/prometheus-fleet.yml`` as documented, on loopback: ``honor_labels`` and
    all, scraping ``targets`` and evaluating every ``interval_s``."""
    _, doc = yamlsafe.load_file(REPO / "config" / "prometheus-fleet.yml")
    doc["global"] = {"scrape_interval": f"{interval_s:g}s",
                     "evaluation_interval": f"{interval_s:g}s"}
    doc["rule_files"] = [str(rules_file)]
    doc["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [
        f"127.0.0.1:{am_port}"]
    jobs = [j for j in doc["scrape_configs"] if j["job_name"] == "nvml-watchdog"]
    jobs[0]["static_configs"] = [{"targets": targets}]
    jobs[0]["scrape_timeout"] = f"{min(interval_s, 10):g}s"
    doc["scrape_configs"] = jobs
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass
class Node:
    """One simulated node: its host name, sim spec (scenarios), job and metrics port."""

    host: str
    spec: str
    metrics_port: int
    job: str | None = None  # the config's job: {id: …}; None: the GPUs' processes say
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None


@dataclass
class Fleet:
    """Agents, Prometheus and Alertmanager on loopback, in ``folder``."""

    folder: Path
    nodes: list[Node] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    prom_port: int = 0
    am_port: int = 0

    # --- the agents --------------------------------------------------------------------------
    def start_agents(self, *, speed: float, duration: str, sinks: str = "", seed: int = 7,
                     interval: str = "1s", notify: str = "", env: dict[str, str] | None = None,
                     gpus: int = 8, ask_prometheus: bool = False) -> None:
        """Start every node's ``watchdog run`` (:meth:`start_agent`)."""
        for n in self.nodes:
            self.start_agent(n, speed=speed, duration=duration, sinks=sinks, seed=seed,
                             interval=interval, notify=notify, env=env, gpus=gpus,
                             ask_prometheus=ask_prometheus)

    def start_agent(self, n: Node, *, speed: float, duration: str, sinks: str = "",
                    seed: int = 7, interval: str = "1s", notify: str = "",
                    env: dict[str, str] | None = None, gpus: int = 8,
                    ask_prometheus: bool = False) -> None:
        """Start node ``n``'s ``watchdog run``; ``sinks`` is the YAML of its
        ``notify.sinks`` (indented by 4), ``notify`` extra ``notify:`` keys (indented by
        2); ``ask_prometheus``: ``job: {prometheus: …}`` (a job-wide resolve waits for the
        fleet)."""
        cfg = self.folder / f"{n.host}.yaml"
        text = (f"source: \"{n.spec}\"\nhost: {n.host}\nstate_dir: {self.folder / n.host}\n"
                f"interval: {interval}\nsim_seed: {seed}\nsim_gpus: {gpus}\n"
                f"metrics: {{listen: 127.0.0.1:{n.metrics_port}}}\n")
        job = [f"id: \"{n.job}\""] if n.job is not None else []
        if ask_prometheus:
            job.append(f"prometheus: \"http://127.0.0.1:{self.prom_port}\"")
        if job:
            text += f"job: {{{', '.join(job)}}}\n"
        if sinks:
            text += f"notify:\n{notify}  sinks:\n{sinks}"
        cfg.write_text(text)
        n.log = self.folder / f"{n.host}.log"
        out = open(n.log, "wb")  # noqa: SIM115 - the child keeps it; closed with it
        n.proc = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "run", "--config", str(cfg), "--speed",
             f"{speed:g}", "--duration", duration], cwd=self.folder, stdout=out,
            stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(self.folder),
                                           "OMP_NUM_THREADS": "1", **(env or {})})
        out.close()
        self.procs.append(n.proc)
        if n not in self.nodes:
            self.nodes.append(n)

    def wait_agents(self, timeout: float) -> list[int | None]:
        """Wait for every agent to exit (``--duration``); their exit codes."""
        end = time.monotonic() + timeout
        procs = [n.proc for n in self.nodes if n.proc is not None]
        for proc in procs:
            try:
                proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return [proc.poll() for proc in procs]

    # --- Prometheus and Alertmanager -------------------------------------------------------
    def start_alertmanager(self, receiver_url: str, scale: float) -> str:
        assert ALERTMANAGER is not None
        cfg = self.folder / "alertmanager.yml"
        cfg.write_text(alertmanager_config(receiver_url, scale=scale))
        self.am_port = free_port()
        self._start([ALERTMANAGER, f"--config.file={cfg}",
                     f"--storage.path={self.folder / 'am-data'}",
                     f"--web.listen-address=127.0.0.1:{self.am_port}",
                     "--cluster.listen-address="], "alertmanager")
        url = f"http://127.0.0.1:{self.am_port}"
        self._ready(url + "/-/ready", "alertmanager")
        return url

    def start_prometheus(self, rules: str, interval_s: float = 1.0) -> str:
        assert PROMETHEUS is not None
        rules_file = self.folder / "fleet.yml"
        rules_file.write_text(rules)
        cfg = self.folder / "prometheus.yml"
        cfg.write_text(prometheus_config(
            rules_file, [f"127.0.0.1:{n.metrics_port}" for n in self.nodes], self.am_port,
            interval_s))
        self.prom_port = free_port()
        self._start([PROMETHEUS, f"--config.file={cfg}",
                     f"--storage.tsdb.path={self.folder / 'prom-data'}",
                     f"--web.listen-address=127.0.0.1:{self.prom_port}",
                     "--rules.alert.resend-delay=1s"], "prometheus")
        url = f"http://127.0.0.1:{self.prom_port}"
        self._ready(url + "/-/ready", "prometheus")
        return url

    def _start(self, argv: list[str], name: str) -> None:
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 - the child keeps it
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           cwd=self.folder))
        log.close()

    def _ready(self, url: str, name: str, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                urllib.request.urlopen(url, timeout=1).close()
                return
            except OSError:
                if self.procs[-1].poll() is not None:
                    break
                time.sleep(0.2)
        text = (self.folder / f"{name}.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name} did not become ready:\n{text}")

    def query(self, expr: str) -> list[JsonDoc]:
        """An instant query's result vector."""
        url = (f"http://127.0.0.1:{self.prom_port}/api/v1/query?"
               + urllib.parse.urlencode({"query": expr}))
        with urllib.request.urlopen(url, timeout=10) as r:
            return list(json.load(r)["data"]["result"])

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 20
        for p in self.procs:
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def pagerduty_incidents(events: list[tuple[str, str]]) -> int:
    """How many PagerDuty incidents a sequence of ``(event_action, dedup_key)`` opens: a
    trigger for a key with no open incident opens one (also after its resolve)."""
    open_keys: set[str] = set()
    opened = 0
    for action, key in events:
        if action == "trigger" and key not in open_keys:
            open_keys.add(key)
            opened += 1
        elif action == "resolve":
            open_keys.discard(key)
    return opened
