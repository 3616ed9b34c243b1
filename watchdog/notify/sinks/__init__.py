"""Sink types, built from ``notify.sinks`` in the config. Each module exposes
``from_config(name, options, where) -> Sink`` and is imported only when a sink of its type
is configured (slack-sdk and the PagerDuty client load only where they are used).

:data:`TYPES` is the one list of sink types: the config's checks and messages read it, so
a new sink type is its module plus one entry here.
"""

from __future__ import annotations

import importlib

from watchdog.errors import InputError
from watchdog.notify.base import Sink
from watchdog.untyped import JsonDoc

#: sink type (the config's ``type:``) -> its module in this package
TYPES: dict[str, str] = {"slack": "slack", "pagerduty": "pagerduty",
                         "alertmanager": "alertmanager", "webhook": "webhook", "log": "logsink"}


def build_sink(name: str, type_: str, options: JsonDoc, where: str) -> Sink:
    """The sink ``name`` of ``type_``; bad options raise InputError naming ``where``."""
    if type_ not in TYPES:
        raise InputError(f"{where}: unknown sink type {type_!r} (one of: {', '.join(TYPES)})")
    mod = importlib.import_module(f"watchdog.notify.sinks.{TYPES[type_]}")
    return mod.from_config(name, options, where)
