"""Package layout that pyproject.toml cannot express on its own.

The shipped rules live in the top-level ``rules/`` folder (where people look for them)
and install as the package ``watchdog.default_rules``, so a wheel carries them and
``importlib.resources`` finds them from any directory. Everything else is in
pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["watchdog", "watchdog.*"]),
              "watchdog.default_rules", "watchdog.default_rules.tests"],
    package_dir={"watchdog.default_rules": "rules", "watchdog.default_rules.tests": "rules/tests"},
)
