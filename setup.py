"""Package layout that pyproject.toml cannot express on its own.

The shipped rules live in the top-level ``rules/`` folder (where people look for them)
and install as the package ``watchdog.default_rules``, so a wheel carries them and
``importlib.resources`` finds them from any directory; the fleet rules for Prometheus
(``rules/prometheus/fleet.yml``, printed by ``watchdog rules export --prometheus``) ride
along as package data of it (pyproject.toml). The documentation folder ``docs/``
installs twice: as ``watchdog.docs`` beside the rules, so a shipped rule's ``runbook:
../docs/runbooks/KIND.md`` resolves in an installed wheel as in a checkout, and as data
under ``<venv>/share/doc/nvml-watchdog`` (``/opt/nvml-watchdog/share/doc/nvml-watchdog``
for the systemd unit's ``Documentation=``). Everything else is in pyproject.toml.
"""

from glob import glob

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["watchdog", "watchdog.*"]),
              "watchdog.default_rules", "watchdog.default_rules.tests", "watchdog.docs"],
    package_dir={"watchdog.default_rules": "rules", "watchdog.default_rules.tests": "rules/tests",
                 "watchdog.docs": "docs"},
    data_files=[("share/doc/nvml-watchdog", sorted(glob("docs/*.md"))),
                ("share/doc/nvml-watchdog/runbooks", sorted(glob("docs/runbooks/*.md")))],
)
