"""The daemon's model: config ``model:``, self-baselining, refits, the state file.

``model:`` values (validated here, file:line in every message):

* absent, ``none`` or ``false``: no model;
* a path: a file from ``watchdog train`` (checked at start; a file for other GPUs is
  refused when the GPUs are first read, then the agent runs without a model);
* ``auto``, or a mapping ``{use: auto, baseline: 1h, refit: 24h}``: the agent baselines
  itself. It keeps the windows of the last :data:`KEEP_S` (leaving out any GPU's
  windows while a rule is pending or firing on it, and for a window's length after),
  fits once every GPU has ``baseline`` of busy time (at least an hour, default 1 h) on
  a worker thread (sampling never waits for a fit), scores from then on, and refits
  every ``refit`` (default 24 h) on the windows kept. ``baseline`` lies within
  :data:`BASELINE_RANGE` (1 h to 30 days) and ``refit`` within :data:`REFIT_RANGE` (1 h
  to 90 days: a fit costs seconds of CPU, so no more than one an hour). The model is
  saved in the state directory, so a restart scores at once instead of learning again.
  A coarse fit (:func:`~watchdog.anomaly.train.coarse`: its held-out part held
  something the rest had not shown, so its threshold is high) still scores, and is
  refitted as soon as another ``baseline`` of busy time is in, not a ``refit`` later.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly import persist, train
from watchdog.anomaly.model import Model
from watchdog.anomaly.runner import EVERY_S
from watchdog.anomaly.stage import AnomalyStage, Engagement
from watchdog.errors import InputError
from watchdog.units import duration_in, parse_duration
from watchdog.untyped import Array, Json, JsonDoc

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from watchdog.incident import Incident
    from watchdog.records import DeviceInfo, Sample

log = logging.getLogger("watchdog.records")
MIN_BASELINE_S = 3600.0
#: ``model.baseline`` (s of busy time per GPU): 1 h to 30 days.
BASELINE_RANGE = (MIN_BASELINE_S, 30 * 86400.0)
#: ``model.refit`` (s between fits): 1 h to 90 days.
REFIT_RANGE = (3600.0, 90 * 86400.0)
KEEP_S = 7 * 86400.0


@dataclass(frozen=True)
class ModelSettings:
    """``use``: ``auto`` or a model file path; spans in s of busy time / clock time."""

    use: str
    baseline_s: float = MIN_BASELINE_S
    refit_s: float = 86400.0


def parse(value: Json, at: str) -> ModelSettings | None:
    """The config's ``model:`` value -> settings (None: no model). ``at``: file:line."""
    if value is None or value is False or (isinstance(value, str) and value.lower() in
                                           ("none", "off", "")):
        return None
    if isinstance(value, str):
        value = {"use": value}
    if not isinstance(value, dict) or "use" not in value or set(value) - {
            "use", "baseline", "refit"}:
        raise InputError(f"{at}: model must be none, auto, a model file, or a mapping like "
                         "{use: auto, baseline: 1h, refit: 24h}")
    use = str(value["use"])
    baseline = parse_duration(str(value.get("baseline", "1h")), what=f"{at}: model.baseline")
    if use != "auto":
        if "baseline" in value or "refit" in value:
            raise InputError(f"{at}: model.baseline and model.refit apply to use: auto")
        try:
            persist.load(use)  # a missing, damaged or foreign file is a config error now
        except persist.ModelFileError as e:
            raise persist.ModelFileError(f"{at}: {e}") from None
    if baseline < MIN_BASELINE_S:
        raise InputError(f"{at}: model.baseline {value.get('baseline')}: at least 1h of busy "
                         "time (a shorter baseline would page on the job's ordinary rhythm)")
    baseline = duration_in(value.get("baseline", "1h"), *BASELINE_RANGE,
                           what=f"{at}: model.baseline")
    refit = duration_in(value.get("refit", "24h"), *REFIT_RANGE, what=f"{at}: model.refit")
    return ModelSettings(use, baseline, refit)


class DaemonModel:
    """The ``anomaly=`` hook of :class:`~watchdog.pipeline.live.LivePipeline`."""

    def __init__(self, settings: ModelSettings, state_file: Path, host: str | None,
                 interval: float, gpu_model: Callable[[], str] | None = None) -> None:
        self.settings = settings
        self.state_file = state_file
        self.interval = interval
        self._gpu_name = "unknown"
        self._gpu_model = gpu_model or (lambda: self._gpu_name)
        self.stage = AnomalyStage(None, host or "localhost", interval)
        self.state = "starting"
        self.error: str | None = None
        self.fitted_at: float | None = None
        self._rows: deque[tuple[float, Array, Array]] = deque()
        self._busy_s: dict[str, float] = {}
        self._engaged_at: dict[str, float] = {}
        self._uuids: list[str] = []
        self._worker: threading.Thread | None = None
        self._fitted: tuple[Model, float, float] | None = None  # model, when, busy min
        self._started = False
        self.coarse = False
        self._busy_at_fit = 0.0  # busy minutes collected when the model in use was fitted

    def open(self, host: str, devices: Sequence[DeviceInfo]) -> None:
        """The source is open: its host names the incidents, its GPUs' product name picks
        (and is written into) the model."""
        self.stage.set_host(host)
        names = [d.name for d in devices if d.name]
        self._gpu_name = names[0] if names else "unknown"

    def set_interval(self, interval: float) -> None:
        """The agent now samples every ``interval`` s (a reload). The window is rebuilt
        for the new step; a model fitted on another step cannot score these windows: a
        model file is set aside (said once), ``auto`` baselines again."""
        if interval == self.interval:
            return
        old, self.interval = self.interval, interval
        model = self.stage.model
        keep = model is not None and abs(model.step - interval) <= 1e-6
        self.stage = AnomalyStage(model if keep else None, self.stage.host, interval)
        self._rows.clear()
        self._busy_s = {}
        if model is None or keep:
            return
        why = (f"the model was fitted on {model.step:g} s samples, the agent now samples "
               f"every {interval:g} s (was {old:g} s)")
        if self.settings.use == "auto":
            log.warning("anomaly model set aside: %s; baselining again", why)
            self.state, self.fitted_at, self.coarse = "collecting", None, False
        else:
            log.error("anomaly model not used: %s", why)
            self.state, self.error = "off", why

    # --- the hook --------------------------------------------------------------------
    def __call__(self, now: float, samples: Sequence[Sample],
                 engaged: Engagement) -> list[tuple[str, Incident]]:
        """One tick: the readings in, the windows the detector has caught up with judged
        (:class:`~watchdog.anomaly.stage.AnomalyStage`), training data collected."""
        if not self._started:
            self._start()
        if self._fitted is not None:  # a fit finished on the worker thread
            model, at, busy = self._fitted
            self._fitted = None
            self.stage.set_model(model)
            self.fitted_at, self.state = at, "scoring"
            self.coarse, self._busy_at_fit = train.coarse(model), busy
        self.stage.add_samples(now, samples)
        out = self.stage.judge(engaged)
        if self.settings.use == "auto":
            self._collect(now, engaged.at(engaged.until))
            self._maybe_fit(now)
        return out

    def _start(self) -> None:
        self._started = True
        gm = self._gpu_model()
        path = Path(self.settings.use) if self.settings.use != "auto" else self.state_file
        if self.settings.use == "auto" and not path.exists():
            self.state = "collecting"
            return
        try:
            model = persist.load(path, gm)
            if abs(model.step - self.interval) > 1e-6:
                raise InputError(f"{path}: trained on {model.step:g} s samples, the agent "
                                 f"samples every {self.interval:g} s")
        except InputError as e:
            self.error = str(e)
            if self.settings.use != "auto":
                self.state = "off"
                log.error("anomaly model not used: %s", e)
                return
            log.warning("saved model not used (%s); baselining again", e)
            self.state = "collecting"
            return
        self.stage.set_model(model)
        self.fitted_at, self.state = model.trained_to, "scoring"
        self.coarse = self.settings.use == "auto" and train.coarse(model)
        log.info("anomaly model %s loaded: threshold %.3f, trained on %s", path,
                 model.threshold, model.gpu_model)
        if self.coarse:
            self._warn_coarse(model)

    def _warn_coarse(self, model: Model) -> None:
        log.warning("anomaly %s; refitting after %.0f more busy minutes",
                    train.coarse_note(model), self.settings.baseline_s / 60.0)

    def _collect(self, now: float, engaged: set[str]) -> None:
        """At every window the stage judges (every :data:`EVERY_S`): keep its features
        for the next fit, unless a rule is engaged on the GPU (or was, a window ago)."""
        latest = self.stage.latest
        if latest is None or latest[0] != now or latest[1] is None:
            return
        feats = latest[1]
        if self.stage.uuids != self._uuids:  # other GPUs: start over
            self._uuids = list(self.stage.uuids)
            self._rows.clear()
            self._busy_s = {}
        pad = F.WINDOW_S
        for u in engaged:
            self._engaged_at[u] = now
        excl = np.array([now - self._engaged_at.get(u, -np.inf) <= pad for u in self._uuids])
        self._rows.append((now, feats, excl))
        busy = F.busy(feats[None])[0] & ~excl
        for u, b in zip(self._uuids, busy, strict=True):
            if b:
                self._busy_s[u] = self._busy_s.get(u, 0.0) + max(EVERY_S, self.interval)
        while self._rows and self._rows[0][0] < now - KEEP_S:
            self._rows.popleft()

    def busy_minutes(self) -> float:
        """Busy minutes collected on the least busy GPU."""
        if not self._uuids:
            return 0.0
        return min(self._busy_s.get(u, 0.0) for u in self._uuids) / 60.0

    def _maybe_fit(self, now: float) -> None:
        if (self._worker is not None and self._worker.is_alive()) or self._fitted is not None:
            return  # a fit is running, or finished and not yet taken up by the hook
        if not self.due(now) or not self._rows:
            return
        t = np.array([r[0] for r in self._rows])
        feats = np.stack([r[1] for r in self._rows])
        excl = np.stack([r[2] for r in self._rows])
        gm = self._gpu_model()
        self.state = "fitting" if self.fitted_at is None else self.state
        self._worker = threading.Thread(
            target=self._fit,
            args=(t, feats, excl, gm, now, list(self._uuids), self.busy_minutes()),
            name="anomaly-fit", daemon=True)
        self._worker.start()

    def due(self, now: float) -> bool:
        """Whether a fit is due at ``now``: the first once ``baseline`` of busy time is
        in, then every ``refit``, or after another ``baseline`` when the last was coarse."""
        busy_s = self.busy_minutes() * 60.0
        if self.fitted_at is None:
            return busy_s >= self.settings.baseline_s
        if self.coarse:
            return busy_s - self._busy_at_fit * 60.0 >= self.settings.baseline_s
        return now - self.fitted_at >= self.settings.refit_s

    def _fit(self, t: Array, feats: Array, excl: Array, gm: str,
             now: float, uuids: list[str], busy_min: float) -> None:
        """On the worker thread: fit, save, hand over (never raises)."""
        try:
            model, stats = train.fit(feats, step=EVERY_S, t=t, gpu_model=gm, exclude=excl,
                                     stride=EVERY_S, uuids=uuids)
            model.step = self.interval  # the live grid the features were computed on
            persist.save(model, self.state_file)
            log.info("anomaly model fitted on %d windows in %.1f s: threshold %.3f; saved "
                     "to %s", int(stats["windows"]), stats["fit_s"], model.threshold,
                     self.state_file)
            if train.coarse(model):
                self._warn_coarse(model)
            self._fitted = (model, now, busy_min)
        except Exception as e:  # noqa: BLE001 - a failed fit must not stop the agent
            self.error = f"fit failed: {type(e).__name__}: {e}"
            log.error("anomaly model %s", self.error)
            if self.fitted_at is None:
                self.state = "collecting"
            self.fitted_at = now if self.fitted_at is not None else None

    def status(self) -> JsonDoc:
        """The ``model`` block of ``watchdog status``."""
        m = self.stage.model
        return {"use": self.settings.use, "state": self.state,
                "busy_min": round(self.busy_minutes(), 1),
                "need_min": round(self.settings.baseline_s / 60.0),
                "fitted_at": self.fitted_at,
                "threshold": None if m is None else round(m.threshold, 4),
                "coarse": self.coarse,
                "last_score_max": None if self.stage.runner is None
                else self.stage.runner.last_max,
                "score_ms": round(self.stage.scored_ms, 3), "error": self.error,
                **self.stage.gate.status()}
