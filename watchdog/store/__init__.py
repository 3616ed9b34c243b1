"""The SQLite store: the agent's durable state, one database in the state directory.

:class:`~watchdog.store.store.Store` is the database as the agent's threads use it (on
disk, in memory while the disk fails); :func:`connect` opens it for a command.

``state_dir`` comes from the config (``state_dir:``), else ``$STATE_DIRECTORY`` (systemd's
``StateDirectory=``), else a per-user folder (``$XDG_STATE_HOME/nvml-watchdog``, default
``~/.local/state/nvml-watchdog``). Components (learned detector state, incidents, the
alerting outbox, silences, the agent's status) keep their tables in the same database,
each with its own schema migrations (:func:`watchdog.store.db.migrate`).
"""

from watchdog.store.db import DB_NAME, connect, default_state_dir, migrate, resolve_state_dir

__all__ = ("DB_NAME", "connect", "default_state_dir", "migrate", "resolve_state_dir")
