"""Detector: feeds blocks of samples through signals, rules and alert states (skeleton)."""

from __future__ import annotations


class Detector:
    """See docs/rules.md; implementation in progress."""

    def __init__(self, rules, host, devices, config=None):  # type: ignore[no-untyped-def]
        raise NotImplementedError
