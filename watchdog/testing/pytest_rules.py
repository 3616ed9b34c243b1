"""A pytest plugin: collect rule unit tests in ``<rules>/tests/*.yaml`` as test items.

The repository's root ``conftest.py`` enables it for the shipped rules; a site with its
own rules folder can enable it too (``pytest -p watchdog.testing.pytest_rules``). Files
are collected when they sit in a ``tests`` folder beside rule files (``../*.yaml``).

Each case runs through :func:`watchdog.pipeline.ruletest.run_case`, the same code as
``watchdog rules test``; a failure shows the expected-versus-got diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.pipeline import ruletest


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if (file_path.suffix in (".yaml", ".yml") and file_path.parent.name == "tests"
            and any(file_path.parent.parent.glob("*.y*ml"))):
        return RuleTestFile.from_parent(parent, path=file_path)
    return None


class RuleTestFile(pytest.File):
    """A rule test file: one item per test case."""

    def collect(self):
        for case in ruletest.load_cases(self.path):
            yield RuleTestItem.from_parent(self, name=case.name, case=case)


class RuleTestItem(pytest.Item):
    """One rule test case."""

    def __init__(self, *, case: ruletest.Case, **kwargs) -> None:
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        fails = ruletest.run_case(self.case)
        if fails:
            raise RuleTestFailure("\n".join(fails))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, RuleTestFailure):
            return f"{self.case.file}:{self.case.line}: {self.case.name}\n{excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, self.case.line, f"rule test: {self.case.name}"


class RuleTestFailure(Exception):
    """A rule test case whose incidents differ from the expected ones."""
