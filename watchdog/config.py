"""The daemon's YAML configuration: load, validate, and report errors as file:line.

A config file means production: with no ``source:`` it watches the real GPUs (``nvml``)
and never falls back to the simulator. Secrets never live in this file: sinks name
environment variables or files that hold them. Unknown keys are errors, not silently
ignored, so a misspelt ``intreval:`` cannot leave the daemon on defaults.

Sections the alerting and anomaly-model code own (``notify:``, ``model:``) are kept as
parsed YAML plus their line numbers here and validated by their own parsers, here, at
load (``model:`` by :func:`watchdog.anomaly.auto.parse`: its ranges, and a model file is
loaded and checked), so a bad one stops the daemon at start and a SIGHUP with it keeps
the running config.

Every value has a range (:data:`RANGES`), checked here, so a typo (``interval: 1ms``,
``sim_gpus: -3``, ``speed: .inf``) fails ``watchdog run`` at start with one line and a
SIGHUP reload with it keeps the running config. The file itself is read within the bounds
of :mod:`watchdog.yamlsafe` (a regular file of at most 1 MiB, no alias bombs), and a
``source: sim:…`` is checked (scenario names, parameters, times) before the daemon starts.
What depends on the node the command line may change (``--gpus`` and ``--gpu-model`` win
over ``sim_gpus`` and ``sim_model``) is left to ``watchdog run``, which checks the spec
against the GPUs actually simulated (:func:`watchdog.sources.check_live`) before it
starts: here a spec only has to fit some node (GPU 300 fits none; GPU 9 fits
``--gpus 16`` whatever ``sim_gpus`` says).

Every path in the file (``state_dir``, ``rules``, ``record.dir``, a ``model`` file,
``job.id_file``, each sink's ``*_file``) is relative to the folder of the config file, not
to the current directory: the service runs in ``/`` and an operator's command anywhere
else, and both must mean the same files (:func:`beside`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.errors import InputError
from watchdog.paths import beside
from watchdog.service.config import Config, Record
from watchdog.units import DAY, duration_in, format_duration, number_in, parse_duration
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    from watchdog.untyped import Json

__all__ = ["RANGES", "Config", "Record", "load"]

HOUR = 3600.0
YEAR = 365 * DAY

#: The range of every bounded setting: (low, high); durations in seconds. ``speed`` must be
#: above its low end (0 < speed <= 1000); the others include both ends.
RANGES: dict[str, tuple[float, float]] = {
    "interval": (0.1, HOUR),            # 100 ms .. 1 h between samples
    "call_timeout": (0.1, 60.0),        # 100 ms .. 1 min per NVML call
    "speed": (0.0, 1000.0),             # a simulated node at most 1000x real time
    "sim_gpus": (1, 256),
    "sim_seed": (0, 2**32 - 1),
    "retention": (HOUR, 10 * YEAR),     # resolved incidents kept 1 h .. 10 years
    "record.keep": (HOUR, 10 * YEAR),   # recordings kept 1 h .. 10 years
}
#: The most entries ``rules:`` may list, and the longest ``host:``.
MAX_RULE_PATHS = 1000
MAX_HOST = 253


_KEYS = {"source", "interval", "rules", "host", "state_dir", "speed", "sim_gpus",
         "sim_model", "sim_seed", "metrics", "record", "retention", "call_timeout",
         "notify", "model", "runbook_url", "job", "slurm"}


#: ``model:`` values that name no file
_MODEL_WORDS = ("auto", "none", "off", "")


def _paths(out: JsonDoc, p: Path) -> None:
    """Resolve the paths of the settings in ``out`` against the config file ``p``."""
    if out.get("state_dir"):
        out["state_dir"] = beside(out["state_dir"], p)
    if out.get("rules"):
        out["rules"] = tuple(beside(r, p) for r in out["rules"])
    if out.get("record") is not None:
        out["record"] = Record(dir=beside(out["record"].dir, p), keep_s=out["record"].keep_s)
    model = out.get("model")
    if isinstance(model, str) and model.lower() not in _MODEL_WORDS:
        out["model"] = beside(model, p)
    elif isinstance(model, dict) and isinstance(model.get("use"), str) and \
            model["use"].lower() not in _MODEL_WORDS:
        out["model"] = {**model, "use": beside(model["use"], p)}
    job = out.get("job")
    if job is not None and getattr(job, "id_file", None):
        from dataclasses import replace

        out["job"] = replace(job, id_file=beside(job.id_file, p))


def load(path: str | Path) -> Config:
    """Read and validate ``path``; every problem is one InputError naming file and line.
    Paths in it are relative to its folder (:func:`beside`)."""
    from watchdog import yamlsafe

    p = Path(path)
    node, data = yamlsafe.load_file(p, "config")
    if data is None:
        return Config(path=str(p))
    if not isinstance(data, dict):
        raise InputError(f"{p}: expected a mapping of settings at the top level")
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value} if node else {}
    out: JsonDoc = {"path": str(p), "lines": lines}
    for key, value in data.items():
        at = f"{p}:{lines.get(key, '?')}"
        if key not in _KEYS:
            raise InputError(f"{at}: unknown setting {key!r} (known: {', '.join(sorted(_KEYS))})")
        if key == "metrics":
            out["metrics_listen"] = _metrics(value, at)
        elif key == "retention":
            out["retention_s"] = _duration(value, at, key)
        elif key == "job":
            from watchdog.service.jobs import parse_config

            out["job"] = parse_config(value, at)
        elif key == "slurm":
            from watchdog.service.slurm import parse_config as parse_slurm

            out["slurm"] = parse_slurm(value, at)
        else:
            out[key] = _coerce(key, value, at)
    _paths(out, p)
    if "notify" in out:
        from watchdog.notify.config import parse_notify

        out["notify"] = parse_notify(out["notify"], lines, str(p), out.get("runbook_url"),
                                     node=node)
    if "source" in out and out["source"] not in ("nvml",) and not str(out["source"]).startswith(
            "sim"):
        raise InputError(f"{p}:{lines.get('source', '?')}: source {out['source']!r}: the "
                         "daemon reads nvml or sim[:SCENARIO,…] (use `watchdog replay` for logs)")
    cfg = Config(**out)
    _check_sim(cfg, str(p), lines)
    if cfg.model is not None:
        from watchdog.anomaly.auto import parse as parse_model

        parse_model(cfg.model, f"{p}:{lines.get('model', '?')}")
    return cfg


def _check_sim(cfg: Config, p: str, lines: dict[str, int]) -> None:
    """``sim_model`` must name a model, and a ``source: sim…`` is checked now (scenario
    names, parameters, times, GPUs), so a typo stops the daemon at start (or keeps the
    running config on SIGHUP) instead of failing on each tick.

    Only what no command line can change: ``--gpus`` and ``--gpu-model`` win over
    ``sim_gpus`` and ``sim_model``, so the spec is refused only when it fits no node:
    the largest (:data:`RANGES` ``sim_gpus``) of any GPU model, the config's own tried
    first (its error is the one shown). ``watchdog run`` checks it against the node it
    simulates before it starts."""
    from watchdog.sources import SourceOptions, check_live, kind_of
    from watchdog.sources.sim.models import MODELS

    if "sim_model" in lines and cfg.sim_model.strip().lower() not in MODELS:
        raise InputError(f"{p}:{lines['sim_model']}: sim_model {cfg.sim_model!r}: unknown "
                         f"simulated GPU model (valid: {', '.join(sorted(MODELS))})")
    if kind_of(cfg.source) != "sim":
        return
    gpus = int(RANGES["sim_gpus"][1])
    first: InputError | None = None
    for model in dict.fromkeys([cfg.sim_model.strip().lower(), *sorted(MODELS)]):
        try:
            check_live(cfg.source, SourceOptions(sim_gpus=gpus, sim_model=model,
                                                 sim_seed=cfg.sim_seed))
            return
        except InputError as e:
            first = first or e
    assert first is not None
    msg = str(first).replace(f"(the node has GPUs 0-{gpus - 1})",
                             f"(a simulated node has at most {gpus} GPUs)")
    msg = "source " + msg.removeprefix("--source ") if msg.startswith("--source ") else msg
    raise InputError(f"{p}:{lines.get('source', '?')}: {msg}") from None


def _duration(value: Json, at: str, key: str) -> float:
    lo, hi = RANGES[key]
    if parse_duration(str(value), what=f"{at}: {key}") <= 0:
        raise InputError(f"{at}: {key} must be positive ({format_duration(lo)} to "
                         f"{format_duration(hi)})")
    return duration_in(value, lo, hi, what=f"{at}: {key}")


def _metrics(value: Json, at: str) -> str | None:
    from watchdog.service.metrics import parse_listen

    if value is None or value is False:
        return None
    if not isinstance(value, dict) or set(value) - {"listen"}:
        raise InputError(f"{at}: metrics must be a mapping like {{listen: 127.0.0.1:9849}}")
    listen = str(value.get("listen", "127.0.0.1:9849"))
    parse_listen(listen, at)
    return listen


def _coerce(key: str, value: Json, at: str) -> Json:
    if key in ("interval", "call_timeout"):
        return _duration(value, at, key)
    if key == "rules":
        items = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            raise InputError(f"{at}: rules must be a path or a list of paths")
        if len(items) > MAX_RULE_PATHS:
            raise InputError(f"{at}: rules lists {len(items)} paths (at most "
                             f"{MAX_RULE_PATHS}; name a folder instead)")
        return tuple(items)
    if key == "speed":
        lo, hi = RANGES[key]
        return float(number_in(value, lo, hi, what=f"{at}: speed", lo_open=True))
    if key in ("sim_gpus", "sim_seed"):
        lo, hi = RANGES[key]
        return int(number_in(value, int(lo), int(hi), what=f"{at}: {key}", integer=True))
    if key == "record":
        if not isinstance(value, dict) or "dir" not in value or set(value) - {"dir", "keep"}:
            raise InputError(f"{at}: record must be a mapping like {{dir: /var/lib/"
                             "nvml-watchdog/recordings, keep: 7d}}")
        if not isinstance(value["dir"], str) or not value["dir"]:
            raise InputError(f"{at}: record.dir must be a folder path")
        keep = _duration(value.get("keep", "7d"), at, "record.keep")
        return Record(dir=value["dir"], keep_s=keep)
    if key == "notify":
        if value is not None and not isinstance(value, dict):
            raise InputError(f"{at}: notify must be a mapping (group_wait, routes, sinks, …)")
        return value
    if key == "model":
        return value
    if not isinstance(value, str):
        raise InputError(f"{at}: {key} must be a string")
    if key == "host" and not 0 < len(value) <= MAX_HOST:
        raise InputError(f"{at}: host must be 1 to {MAX_HOST} characters")
    return value
