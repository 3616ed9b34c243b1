"""Options shared by several commands: the source spec and the column mapping."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from watchdog.errors import InputError
from watchdog.sources import SourceOptions
from watchdog.units import check_tz
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    from pathlib import Path

    from watchdog.store.locate import Found


def add_source_args(p: argparse.ArgumentParser, default: str | None = "nvml",
                    sim_defaults: bool = True) -> None:
    """Add ``--source``, ``--map`` and the simulated-node options to ``p``.

    ``sim_defaults=False``: the simulated-node options default to None, so a command
    that also reads a config can tell "not given" from an explicit value."""
    p.add_argument("--source", default=default, metavar="SPEC",
                   help="nvml | sim[:SCENARIO,…] | PATH to a log or recording "
                        f"(default: {default or 'see below'})")
    p.add_argument("--map", action="append", default=[], metavar="METRIC=COLUMN,…",
                   help="map catalogue metrics onto a foreign CSV's columns, "
                        "e.g. power.draw=power_W,temperature.gpu=temp_C")
    p.add_argument("--host", default=None, help="host name to report (default: this host)")
    add_tz_arg(p)
    sim = p.add_argument_group("simulated node (--source sim…)")
    sim.add_argument("--gpus", type=int, default=8 if sim_defaults else None,
                     help="number of simulated GPUs (default 8)")
    sim.add_argument("--gpu-model", dest="gpu_model",
                     default="h100-sxm" if sim_defaults else None,
                     help="simulated GPU type: h100-sxm | a100-pcie (default h100-sxm)")
    sim.add_argument("--model", dest="old_model", default=None, help=argparse.SUPPRESS)
    sim.add_argument("--seed", type=int, default=0 if sim_defaults else None,
                     help="random seed (default 0)")


def gpu_model_arg(args: argparse.Namespace) -> str | None:
    """``--gpu-model``, or the deprecated ``--model h100-sxm|a100-pcie`` (one note on
    stderr). ``--model`` now names the anomaly model; any other value is an error."""
    old = getattr(args, "old_model", None)
    if old is None:  # (the simulator's models are imported only past here: a probe of
        return args.gpu_model  # real GPUs loads no simulator)
    from watchdog.sources.sim.models import MODELS

    if not old_gpu_model(old):
        raise InputError(f"--model {old}: this command takes no anomaly model; the "
                         f"simulated GPU type is --gpu-model ({' | '.join(MODELS)})")
    if args.gpu_model not in (None, old) and args.gpu_model != "h100-sxm":
        raise InputError(f"--model {old} and --gpu-model {args.gpu_model} disagree")
    return old


def old_gpu_model(value: str | None) -> bool:
    """Whether ``--model VALUE`` is the old spelling of ``--gpu-model`` (a simulated GPU
    type, not an anomaly model); says so on stderr, once per command, if it is."""
    from watchdog.sources.sim.models import MODELS

    if value not in MODELS:
        return False
    print(f"watchdog: note: --model {value} is deprecated for the simulated GPU type; "
          f"use --gpu-model {value}", file=sys.stderr)
    return True


def add_tz_arg(p: argparse.ArgumentParser) -> None:
    """``--tz ZONE``: the zone of a log's naive timestamps (nvidia-smi writes local time)."""
    p.add_argument("--tz", default=None, metavar="ZONE",
                   help="time zone the log's timestamps were written in, when they carry "
                        "none (nvidia-smi writes the logging host's local time), e.g. "
                        "Europe/Berlin (default: UTC)")


def parse_map(items: list[str]) -> dict[str, str]:
    """Parse ``--map`` values (``metric=column[,metric=column…]``, repeatable).

    The metric must be a catalogue name or alias; an unknown one is an error naming it.
    """
    from watchdog import catalogue

    out: dict[str, str] = {}
    for item in items:
        for pair in item.split(","):
            if not pair.strip():
                continue
            if "=" not in pair:
                raise InputError(f"--map {pair!r}: expected METRIC=COLUMN")
            metric, column = (s.strip() for s in pair.split("=", 1))
            name = catalogue.canonical(metric) or (
                metric if metric in ("timestamp", "index", "uuid", "name", "pci.bus_id")
                else None)
            if name is None or not column:
                raise InputError(
                    f"--map {pair!r}: unknown metric {metric!r} "
                    "(see the catalogue: `watchdog record --list-metrics`)")
            out[name] = column
    return out


def source_options(args: argparse.Namespace) -> SourceOptions:
    """Build :class:`SourceOptions` from parsed arguments."""
    if args.gpus < 1 or args.gpus > 256:
        raise InputError(f"--gpus {args.gpus}: expected 1..256")
    return SourceOptions(host=args.host, mapping=parse_map(args.map), sim_gpus=args.gpus,
                         sim_model=gpu_model_arg(args) or "h100-sxm", sim_seed=args.seed,
                         tz=check_tz(getattr(args, "tz", None)))


# --- the state directory and silences, for status, alerts and silence -------------------

def service_state(args: argparse.Namespace) -> tuple[Found, str | None]:
    """``(found, config error)``: the state directory ``status``, ``alerts`` and
    ``silence`` act on (:func:`watchdog.store.locate.find`: ``--state-dir``, the config's
    ``state_dir:``, or where the service keeps it; never a new, unread one), and why the
    config given with ``--config`` does not load (None when it does).

    A config that exists but does not load (a typo during an incident: the running agent
    keeps its old config) still leads to the state: its ``state_dir:`` is read leniently,
    so on-call can see and silence what the agent does. A config that is not there at all
    (a wrong path) is an error: it names no agent."""
    from watchdog import config as config_mod
    from watchdog.paths import state_dir_of
    from watchdog.store.locate import find

    configured, broken = None, None
    if getattr(args, "config", None):
        try:
            configured = config_mod.load(args.config).state_dir
        except InputError as e:
            if not _readable_file(args.config):
                raise
            broken = str(e)
            configured = state_dir_of(args.config)
    found = find(getattr(args, "state_dir", None), configured)
    if broken is not None:
        print(f"watchdog: warning: the config is broken (a reload keeps the agent's running "
              f"config): {broken}; using the state in {found.path}", file=sys.stderr)
    return found, broken


def _readable_file(path: str) -> bool:
    import os

    return os.path.isfile(path) and os.access(path, os.R_OK)


def state_dir(args: argparse.Namespace) -> Path:
    """The state directory of :func:`service_state`."""
    return service_state(args)[0].path


def with_times(d: JsonDoc, keys: Iterable[str]) -> JsonDoc:
    """``d`` with each time in ``keys`` as ISO 8601 with zone and as ``<key>_epoch``."""
    from watchdog.incident import iso

    out = dict(d)
    for k in keys:
        t = d.get(k)
        out[k] = iso(t) if t is not None else None
        out[f"{k}_epoch"] = t
    return out


def what(s: JsonDoc) -> str:
    """``GPU 3 thermal_throttle``, ``thermal_throttle``, ``GPU 3`` or ``everything``."""
    if not (s["gpu"] or s["kind"]):
        return "everything"
    return " ".join(x for x in (f"GPU {s['gpu']}" if s["gpu"] else "", s["kind"] or "") if x)


def silence_state(s: JsonDoc, now: float) -> str:
    """``active``; ``expired`` (ended by `silence expire`); ``ended`` (its time ran out)."""
    if s["expired_at"] is not None:
        return "expired"
    return "active" if s["ends_at"] > now else "ended"


def silence_json(s: JsonDoc, now: float) -> JsonDoc:
    """One silence as JSON (the shape in the module docs)."""
    return with_times({"id": s["id"], "what": what(s), "host": s["host"], "gpu": s["gpu"],
                       "kind": s["kind"], "state": silence_state(s, now),
                       "starts_at": s["starts_at"],
                       "ends_at": s["ends_at"], "expired_at": s["expired_at"],
                       "comment": s["comment"], "created_by": s["created_by"]},
                      ("starts_at", "ends_at", "expired_at"))
