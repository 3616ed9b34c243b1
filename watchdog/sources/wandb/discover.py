"""Which W&B run files a path names, for ``watchdog replay PATH``.

* a file: itself;
* a run folder (``run-<date>-<id>/`` or ``offline-run-…``): its ``run-<id>.wandb``;
* any other folder (a ``wandb/`` folder, a project, a folder of projects): every run file
  below it, in path order (a ``wandb/`` folder's run folders are named by start time, so
  this is the order the runs were made). Symbolic links to folders are not followed
  (W&B's ``latest-run`` link would name a run twice), a file reached twice is read once.

Bounds: at most :data:`MAX_RUNS` runs and :data:`MAX_DEPTH` folder levels; a folder with
no run file is an :class:`InputError`.
"""

from __future__ import annotations

import os
from pathlib import Path

from watchdog.errors import InputError

MAX_RUNS = 10000
MAX_DEPTH = 16


def runs_in(path: str) -> list[str]:
    """The run files ``path`` names (see the module docstring); a path that is not a
    folder is returned as it is."""
    if not os.path.isdir(path):
        return [path]
    found: list[str] = []
    seen: set[str] = set()
    base = len(Path(path).parts)
    for root, dirs, files in os.walk(path, followlinks=False, onerror=_raise):
        if len(Path(root).parts) - base >= MAX_DEPTH:
            dirs[:] = []
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".wandb"):
                continue
            full = os.path.join(root, name)
            real = os.path.realpath(full)
            if real in seen or not os.path.isfile(full):
                continue
            seen.add(real)
            found.append(full)
            if len(found) > MAX_RUNS:
                raise InputError(f"{path}: more than {MAX_RUNS} W&B runs; name fewer "
                                 "folders")
    if not found:
        raise InputError(f"{path}: is a directory with no W&B run file (run-<id>.wandb) in it")
    return found


def _raise(e: OSError) -> None:
    raise InputError(f"{e.filename}: {e.strerror or e}")
