"""Paths named in a config file mean the same files wherever the command runs.

The service runs in ``/`` (systemd), an operator's ``watchdog silence add --config …``
anywhere else; a relative ``state_dir: ./state`` or ``token_file: slack.token`` taken from
the current directory would mean two different files, and a silence written into a state
directory no agent reads. So a relative path in a config is taken from the folder of the
config file, as Prometheus and Alertmanager do with theirs.
"""

from __future__ import annotations

from pathlib import Path


def beside(value: str, config: str | Path | None) -> str:
    """``value`` (a path written in the config file ``config``) with ``~`` expanded and,
    when relative, taken from the config file's folder; only ``~`` is expanded without a
    config file."""
    v = Path(value).expanduser()
    if v.is_absolute() or config is None:
        return str(v)
    return str(Path(config).absolute().parent / v)


def state_dir_of(config: str | Path) -> str | None:
    """The ``state_dir:`` a config file names (resolved with :func:`beside`), read
    leniently: from the YAML when it parses, else from a top-level ``state_dir:`` line, so
    that a config broken by a typo elsewhere still leads to the agent's state. None when
    the file cannot be read or names no state directory."""
    import re

    from watchdog import yamlsafe
    from watchdog.errors import InputError

    try:
        text = yamlsafe.read_text(config, "config")
    except InputError:
        return None
    value: object = None
    try:
        _node, data = yamlsafe.load(text, str(config))
        if isinstance(data, dict):
            value = data.get("state_dir")
    except InputError:
        m = re.search(r"^state_dir:[ \t]*(['\"]?)([^'\"#\n]+?)\1[ \t]*(?:#.*)?$", text, re.M)
        value = m.group(2) if m else None
    return beside(value, config) if isinstance(value, str) and value.strip() else None
