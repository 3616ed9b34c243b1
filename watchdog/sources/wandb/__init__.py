"""Weights & Biases runs as recorded telemetry: run files, run folders, wide tables.

W&B's system monitor samples every GPU of a training job (every 10-30 s) into the run's
own file, ``wandb/run-<date>-<id>/run-<id>.wandb``, beside the job's console output and
its exit code; many users keep these folders for every run they made. Entry points:

* :func:`read_run`: a run file -> :class:`~.assemble.WandbRecording` (the replay frame
  contract of :mod:`watchdog.sources.replay`, plus the job's notable console lines and
  exit code);
* :func:`read_table`: the same metrics as a wide CSV (:mod:`.table`);
* :func:`runs_in`: the run files a path names (a file, a run folder, any folder above
  runs), for ``watchdog replay``.

The file is read by this package's own small reader of its framing (:mod:`.framing`)
and of the few protobuf fields needed (:mod:`.proto`), not by the ``wandb`` package:
``docs/wandb.md`` says why, with the measured costs. Imports are lazy: the framing and
protobuf modules load no numpy or pandas. GPUs are named ``run-<id>/gpu<i>`` (the host is
the file's stem, never the metadata's host name, which is private).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.sources.wandb.assemble import WandbRecording

__all__ = ["host_of", "read_run", "read_table", "runs_in"]


def read_run(path: str, host: str | None = None, data: bytes | None = None
             ) -> WandbRecording:
    """See :func:`.assemble.read_run`."""
    from watchdog.sources.wandb.assemble import read_run as read

    return read(path, host=host, data=data)


def read_table(path: str, data: bytes, host: str | None = None) -> WandbRecording:
    """See :func:`.assemble.read_table`."""
    from watchdog.sources.wandb.assemble import read_table as read

    return read(path, data, host=host)


def runs_in(path: str) -> list[str]:
    """See :func:`.discover.runs_in`."""
    from watchdog.sources.wandb.discover import runs_in as find

    return find(path)


def host_of(path: str) -> str:
    """See :func:`.assemble.host_of`."""
    from watchdog.sources.wandb.assemble import host_of as host

    return host(path)
