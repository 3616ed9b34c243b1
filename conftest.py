"""Repository-wide pytest setup: collect the shipped rules' unit tests (rules/tests/)."""

pytest_plugins = ["watchdog.testing.pytest_rules"]
