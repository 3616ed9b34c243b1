"""Find the state directory of the agent a command is about, or say where it looked.

``watchdog silence``, ``alerts`` and ``status`` act on the *service's* state: a silence
written anywhere else mutes nothing while the command says it did. An operator following
the README runs them from a root shell without ``--config``, where the per-user default
(``~/.local/state``) is not where the service keeps its state (``/var/lib/nvml-watchdog``,
systemd's ``StateDirectory=``). So, unless ``--state-dir`` or a config's ``state_dir:``
names the directory, the commands look where an agent keeps its state, in this order:

1. ``$STATE_DIRECTORY`` (a command run by the unit, or with the unit's environment);
2. the ``state_dir:`` of the installed config ``/etc/nvml-watchdog/watchdog.yaml``;
3. the unit's state directory ``/var/lib/nvml-watchdog``;
4. this user's own (``$XDG_STATE_HOME/nvml-watchdog``, ``~/.local/state/nvml-watchdog``:
   where ``watchdog run`` without a config keeps it).

A directory holds agent state when its ``state.db`` exists. The first one whose agent is
running (it holds the directory's lock, :mod:`watchdog.store.lock`) wins, else the first
that holds state; none is one line naming every place looked at. Nothing is created: a
command never makes a new, unread state directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from watchdog.errors import InputError
from watchdog.store.db import DB_NAME, default_state_dir

SERVICE_STATE = Path("/var/lib/nvml-watchdog")  # the unit's StateDirectory=
SERVICE_CONFIG = Path("/etc/nvml-watchdog/watchdog.yaml")  # docs/install.md installs it


@dataclass(frozen=True, slots=True)
class Found:
    """The state directory a command acts on: ``path``; ``why`` it was chosen (for the
    line a command prints); ``pid`` of the agent running on it, None when none is."""

    path: Path
    why: str
    pid: int | None


def has_state(d: Path) -> bool:
    """Whether ``d`` holds an agent's database. One that cannot be looked into (another
    user's, mode 0750) counts: opening it then says "permission denied", which is the
    truth, rather than "nothing here"."""
    try:
        os.stat(d / DB_NAME)
    except PermissionError:
        return d.exists()
    except OSError:
        return False
    return True


def running_pid(d: Path) -> int | None:
    """The pid of the agent holding ``d``'s lock (``/proc/locks``), or None. Never takes
    the lock itself: a probe that held it for a moment could refuse a starting agent."""
    from watchdog.store.lock import holder_of

    try:
        return holder_of(d)
    except OSError:
        return None


def candidates(config_state_dir: str | None = None) -> list[tuple[Path, str]]:
    """``(directory, why)`` in the order they are tried, without repeats."""
    if config_state_dir:
        return [(Path(config_state_dir), "the config's state_dir")]
    out: list[tuple[Path, str]] = []
    env = os.environ.get("STATE_DIRECTORY")
    if env:
        out.append((Path(env.split(":")[0]), "$STATE_DIRECTORY"))
    installed = service_config_state_dir()
    if installed:
        out.append((Path(installed), f"state_dir of {SERVICE_CONFIG}"))
    out.append((SERVICE_STATE, "the service's"))
    out.append((default_state_dir(), "this user's"))
    seen: set[Path] = set()
    unique = []
    for d, why in out:
        key = Path(os.path.abspath(d))
        if key not in seen:
            seen.add(key)
            unique.append((d, why))
    return unique


def service_config_state_dir() -> str | None:
    """The ``state_dir:`` the installed config names (read leniently: a broken config
    still names its state directory), or None."""
    if not SERVICE_CONFIG.is_file():
        return None
    from watchdog.paths import state_dir_of

    return state_dir_of(SERVICE_CONFIG)


def find(explicit: str | os.PathLike[str] | None = None,
         config_state_dir: str | None = None) -> Found:
    """The state directory to act on (see the module docs), or InputError (exit 2), one
    line naming where it looked. ``explicit``: ``--state-dir``; ``config_state_dir``: the
    ``state_dir:`` of ``--config`` (already resolved against the config's folder)."""
    if explicit:
        d = Path(explicit).expanduser()
        if not has_state(d):
            raise InputError(f"{d}: no agent state here (no {DB_NAME}; has `watchdog run` "
                             "started with this state directory?)")
        return Found(d, "--state-dir", running_pid(d))
    tried = candidates(config_state_dir)
    held = [(d, why) for d, why in tried if has_state(d)]
    for d, why in held:
        pid = running_pid(d)
        if pid is not None:
            return Found(d, why, pid)
    if held:
        return Found(held[0][0], held[0][1], None)
    where = ", ".join(f"{d} ({why})" for d, why in tried)
    if config_state_dir:
        raise InputError(f"{tried[0][0]}: no agent state here (no {DB_NAME}; has `watchdog "
                         "run` started with this config?)")
    raise InputError(f"no agent state found (looked in {where}); name the service's config "
                     "with --config FILE or its state directory with --state-dir DIR")
