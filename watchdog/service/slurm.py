"""The agent in a Slurm cluster: drain the node when it is bad, resume it when it is good
again, through Slurm's own interface (:mod:`watchdog.service.scontrol`).

Config (optional; no ``slurm:`` = the agent never calls Slurm)::

    slurm:
      drain: [gpu_lost, ecc, xid]   # kinds whose critical incidents drain (default)
      hold_down: 15m                # clean this long after the last one resolved
      resume: true                  # false: a person resumes the node
      dry_run: false                # true: log and record what it would do, call nothing
      node: gpu-node-017            # the node's name in Slurm (default: hostname -s)
      scontrol: scontrol            # the program (default: on PATH)
      timeout: 10s                  # each scontrol call

Rules it keeps (docs/slurm.md says why):

* Drain on the *first* critical incident of a drain kind (``watchdog.cluster``), with a
  reason that starts ``watchdog:``; at most once per incident. The ``agent`` kind never
  drains.
* Never overwrite a reason it did not write: a node drained or down for another reason
  is left as it is (recorded as ``skipped``).
* Resume only a drain of its own (the reason still starts ``watchdog:``), only once no
  drain incident is active, the agent has been able to judge, and both for
  ``hold_down`` (a flapping GPU stays out). A restarted agent that finds its own drain
  resumes it the same way, counting from its start.
* An admin's RESUME (or a reason of their own) while the incident is still active is
  respected: no drain again for that incident, also across restarts, until it resolves.
* An agent that cannot judge (GPUs unreadable) changes nothing: no drain, no resume.

Decisions use the agent's clock; ``scontrol`` runs on a thread of its own, woken by each
transition (so a drain follows the tick that fired it) and every :data:`POLL_S`
otherwise, never on the tick thread. Every action goes into ``watchdog status``
(``slurm``), the incident's evidence (``slurm``) and the metrics
(``watchdog_slurm_drains_total``…).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from watchdog.cluster import DRAIN_KINDS, NEVER_DRAIN
from watchdog.errors import InputError
from watchdog.incident import Incident
from watchdog.service.scontrol import (
    PREFIX,
    NodeState,
    Scontrol,
    ScontrolError,
    is_ours,
    reason_text,
)
from watchdog.store.store import Store

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
from watchdog.untyped import Json, JsonDoc

log = logging.getLogger("watchdog.slurm")
POLL_S = 5.0  # real seconds between looks at the node while there is something to watch
KEEP_ACTIONS = 20  # actions shown in status
RANGES = {"hold_down": (0.0, 7 * 86_400.0), "timeout": (1.0, 60.0)}
STEPS = ("CREATE TABLE slurm_state (id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL)",)


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    """The config's ``slurm:`` (durations in seconds)."""

    drain: frozenset[str] = DRAIN_KINDS
    hold_down_s: float = 900.0
    resume: bool = True
    dry_run: bool = False
    node: str | None = None
    scontrol: str = "scontrol"
    timeout_s: float = 10.0


def parse_config(value: Json, at: str) -> SlurmConfig | None:
    """The ``slurm:`` mapping; each problem is one InputError naming ``at``."""
    from watchdog.incident import KINDS
    from watchdog.units import duration_in

    if value is None or value is False:
        return None
    keys = {"drain", "hold_down", "resume", "dry_run", "node", "scontrol", "timeout"}
    if value is True:
        value = {}
    if not isinstance(value, dict) or set(value) - keys:
        raise InputError(f"{at}: slurm must be a mapping of {', '.join(sorted(keys))}")
    out: JsonDoc = {}
    if "drain" in value:
        kinds = value["drain"] or []
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            raise InputError(f"{at}: slurm.drain must be a list of incident kinds")
        for k in kinds:
            if k not in KINDS:
                raise InputError(f"{at}: slurm.drain: unknown kind {k!r} (kinds: "
                                 f"{', '.join(KINDS)})")
            if k in NEVER_DRAIN:
                raise InputError(f"{at}: slurm.drain: {k!r} never drains (the agent's own "
                                 "trouble says nothing about the GPUs)")
        out["drain"] = frozenset(kinds)
    for key, name in (("hold_down", "hold_down_s"), ("timeout", "timeout_s")):
        if key in value:
            lo, hi = RANGES[key]
            out[name] = duration_in(value[key], lo, hi, what=f"{at}: slurm.{key}")
    for key in ("resume", "dry_run"):
        if key in value:
            if not isinstance(value[key], bool):
                raise InputError(f"{at}: slurm.{key} must be true or false")
            out[key] = value[key]
    for key in ("node", "scontrol"):
        if key in value:
            text = value[key]
            if not isinstance(text, str) or not 0 < len(text) <= 253 or not text.isprintable() \
                    or " " in text:
                raise InputError(f"{at}: slurm.{key} must be a name or path without blanks")
            out[key] = text
    return SlurmConfig(**out)


def identity(inc: Incident) -> str:
    """What names an incident across ticks and restarts: its rule and its GPUs."""
    return f"{inc.rule}/{','.join(sorted(inc.uuids)) or 'node'}"


class SlurmActor:
    """Drains and resumes one node; see the module docs for the rules it keeps.

    ``now()`` is the agent's clock; ``judging()`` whether the agent can read its GPUs;
    ``annotate(inc, text)`` records an action on an incident; ``db`` the state store (or
    None) where what must survive a restart is kept; ``status_to`` the pipeline's extra
    status, where the actor keeps its part of ``watchdog status`` ("slurm")."""

    def __init__(self, cfg: SlurmConfig, *, now: Callable[[], float],
                 judging: Callable[[], bool],
                 annotate: Callable[[Incident, str], None] | None = None,
                 db: Store | None = None, node: str | None = None,
                 status_to: JsonDoc | None = None) -> None:
        self.cfg = cfg
        self.node = node or cfg.node or socket.gethostname().split(".")[0]
        self.scontrol = Scontrol(cfg.scontrol, self.node, cfg.timeout_s)
        self.now = now
        self.judging = judging
        self.annotate = annotate
        self.db = db
        self._lock = threading.Lock()
        self._holding: JsonDoc = {}  # identity -> active drain incident
        self._drained_for: set[str] = set()
        self._respected: set[str] = set()  # admin resumed during these incidents
        self._drained: JsonDoc | None = None  # our drain: reason, at, for
        self._clean_since = now()  # no drain incident since (agent clock)
        self._judging_since: float | None = None
        self._seen_node = False
        self.actions: deque[JsonDoc] = deque(maxlen=KEEP_ACTIONS)
        self.counts = {"drains": 0, "resumes": 0, "errors": 0}
        self.error: str | None = None
        self.status_to = status_to
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._load()

    # --- the tick thread: transitions only -----------------------------------------------
    def __call__(self, what: str, inc: Incident) -> None:
        """A notifier: ``(transition, incident)`` from the pipeline (cheap, no I/O)."""
        if inc.kind not in self.cfg.drain or inc.kind in NEVER_DRAIN or \
                inc.severity != "critical":
            return
        key = identity(inc)
        with self._lock:
            if what == "resolved":
                if self._holding.pop(key, None) is not None and not self._holding:
                    self._clean_since = inc.resolved_at or self.now()
                self._drained_for.discard(key)
                self._respected.discard(key)
            elif inc.fired_at is not None:
                self._holding[key] = inc
        self._wake.set()

    # --- the worker -------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="slurm", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.timeout_s * 3 + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - the actor must not die
                log.error("slurm: %s: %s", type(e).__name__, e)
            self._wake.wait(POLL_S)

    def step(self) -> None:
        """One look: drain, notice an admin's hand, or resume, as the state calls for."""
        now = self.now()
        judging = bool(self.judging())
        if not judging:
            self._judging_since = None
        elif self._judging_since is None:
            self._judging_since = now
        with self._lock:
            holding = dict(self._holding)
            pending = [k for k in holding if k not in self._drained_for
                       and k not in self._respected]
            clean_since = self._clean_since
        if not judging:
            self._publish(now, judging)
            return
        if pending:
            self._drain(now, holding, pending)
        elif self._drained is not None or not self._seen_node:
            self._watch(now, holding, clean_since)
        self._publish(now, judging)

    def _state(self) -> NodeState | None:
        try:
            st = self.scontrol.show()
        except ScontrolError as e:
            self._failed(str(e))
            return None
        self._seen_node = True
        return st

    def _drain(self, now: float, holding: JsonDoc, pending: list[str]) -> None:
        inc = holding[pending[0]]
        st = self._state()
        if st is None:
            return
        if st.reason and not is_ours(st.reason):
            self._act(now, "skipped", f"node {self.node} already has a reason not ours: "
                      f"{st.reason!r}", pending, holding, remember=True)
            return
        if st.drained and is_ours(st.reason):  # drained already, by us (another incident)
            self._adopt(now, st.reason, pending)
            return
        gpus = ",".join(inc.gpus) or "node"
        reason = reason_text(f"{PREFIX} {inc.kind} GPU {gpus}: {inc.summary}")
        if not self.cfg.dry_run:
            try:
                self.scontrol.drain(reason)
            except ScontrolError as e:
                self._failed(str(e))
                return
            self.counts["drains"] += 1
        self._adopt(now, reason, pending, dry=self.cfg.dry_run)
        self._act(now, "drain", reason, pending, holding)

    def _adopt(self, now: float, reason: str | None, keys: list[str],
               dry: bool = False) -> None:
        with self._lock:
            self._drained_for.update(keys)
            if self._drained is None:
                self._drained = {"reason": reason, "at": now, "dry_run": dry}
        self._save()

    def _watch(self, now: float, holding: JsonDoc, clean_since: float) -> None:
        """Our drain (or, at start, whether there is one): the admin's hand, or resume."""
        if self._drained is not None and self._drained.get("dry_run"):
            self._resume(now, holding, clean_since)  # a drain that was never made
            return
        st = self._state()
        if st is None:
            return
        if self._drained is None:  # at start: a drain of ours left by an earlier run
            if st.drained and is_ours(st.reason):
                self._adopt(now, st.reason, [])
                self._act(now, "adopted", f"node {self.node} drained by an earlier run: "
                          f"{st.reason}", [], holding)
            return
        if not st.drained or not is_ours(st.reason):
            why = "resumed" if not st.drained else f"set its own reason {st.reason!r}"
            self._act(now, "respected", f"an admin {why}: not drained again for the "
                      "incidents active now", list(holding), holding, remember=True)
            with self._lock:
                self._drained = None
            self._save()
            return
        self._resume(now, holding, clean_since)

    def _resume(self, now: float, holding: JsonDoc, clean_since: float) -> None:
        if holding or not self.cfg.resume:
            return
        since = max(clean_since, self._judging_since or now)
        if now - since < self.cfg.hold_down_s:
            return
        if not (self.cfg.dry_run or (self._drained or {}).get("dry_run")):
            try:
                self.scontrol.resume()
            except ScontrolError as e:
                self._failed(str(e))
                return
            self.counts["resumes"] += 1
        self._act(now, "resume", f"clean for {now - since:.0f} s (hold-down "
                  f"{self.cfg.hold_down_s:.0f} s)", [], holding)
        with self._lock:
            self._drained = None
        self._save()

    # --- records ------------------------------------------------------------------------------
    def _act(self, now: float, action: str, text: str, keys: list[str],
             holding: JsonDoc, remember: bool = False) -> None:
        dry = self.cfg.dry_run and action in ("drain", "resume")
        entry = {"at": now, "action": action, "node": self.node, "detail": text,
                 "incidents": keys, "dry_run": dry}
        self.actions.append(entry)
        self.error = None
        if remember:
            with self._lock:
                self._respected.update(keys)
            self._save()
        word = f"would {action}" if dry else action
        log.warning("slurm: %s node %s: %s", word, self.node, text)
        if self.annotate is not None:
            for k in keys:
                if k in holding:
                    self.annotate(holding[k], f"{word} node {self.node}: {text}")

    def _failed(self, text: str) -> None:
        if text != self.error:
            log.error("slurm: %s (retried every %.0f s)", text, POLL_S)
        self.error = text
        self.counts["errors"] += 1

    def _publish(self, now: float, judging: bool) -> None:
        """``watchdog status``'s ``slurm`` section (replaced whole: the status writer reads
        it from the tick thread)."""
        with self._lock:
            doc = {"node": self.node, "dry_run": self.cfg.dry_run, "judging": judging,
                   "drain_kinds": sorted(self.cfg.drain), "hold_down_s": self.cfg.hold_down_s,
                   "resume": self.cfg.resume, "drained": self._drained,
                   "holding": sorted(self._holding), "respected": sorted(self._respected),
                   "error": self.error, "actions": list(self.actions), "checked_at": now,
                   **self.counts}
        if self.status_to is not None:
            self.status_to["slurm"] = doc

    def collect(self) -> Iterator[Metric]:
        """Prometheus metrics (a prometheus_client collector)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, key, doc in (
                ("watchdog_slurm_drains", "drains", "Nodes drained through scontrol."),
                ("watchdog_slurm_resumes", "resumes", "Drains of its own resumed."),
                ("watchdog_slurm_errors", "errors", "scontrol calls that failed.")):
            c = CounterMetricFamily(name, doc, labels=["node"])
            c.add_metric([self.node], float(self.counts[key]))
            yield c
        g = GaugeMetricFamily("watchdog_slurm_drained", "1 while the node is drained by "
                              "the agent.", labels=["node"])
        g.add_metric([self.node], 1.0 if self._drained is not None else 0.0)
        yield g

    # --- what survives a restart ----------------------------------------------------------
    def _load(self) -> None:
        if self.db is None:
            return
        try:
            self.db.migrate("slurm", STEPS)
            row = self.db.run(lambda c: c.execute(
                "SELECT doc FROM slurm_state WHERE id = 1").fetchone())
        except Exception as e:  # noqa: BLE001 - Slurm's own state is the truth anyway
            log.error("slurm: cannot read its state: %s", e)
            return
        if row:
            doc = json.loads(row[0])
            self._respected = set(doc.get("respected") or [])

    def _save(self) -> None:
        if self.db is None:
            return
        with self._lock:
            text = json.dumps({"respected": sorted(self._respected), "drained": self._drained})
        try:
            self.db.run(lambda c: c.execute(
                "INSERT INTO slurm_state VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET "
                "doc = excluded.doc", (text,)))
        except Exception as e:  # noqa: BLE001 - a full disk must not stop the actor
            log.error("slurm: cannot save its state: %s", e)
