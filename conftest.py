"""Repository-wide pytest setup: collect the shipped rules' unit tests (rules/tests/), and
size the test workers to the machine."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["watchdog.testing.pytest_rules"]

#: workers at most: past this, starting workers (each imports the package and collects the
#: suite) costs more than it saves
MAX_WORKERS = 8


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per CPU this process may run on (``taskset``, a cgroup's
    cpuset), at most :data:`MAX_WORKERS`."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))
