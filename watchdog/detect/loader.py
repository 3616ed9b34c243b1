"""YAML rule files -> validated Rule objects (skeleton)."""

from __future__ import annotations


class Rule:
    """One validated rule (in progress)."""


class RuleSet:
    """The loaded rules (in progress)."""


def load_rules(paths=None):  # type: ignore[no-untyped-def]
    raise NotImplementedError
