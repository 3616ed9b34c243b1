"""``watchdog rules check FILES…`` and ``watchdog rules test FILES…``.

``check`` validates rule files (or folders of ``*.yaml``; none given = the shipped rules)
and prints one line per rule; a bad file is one ``FILE:LINE: …`` error, exit 2.
``test`` runs rule unit tests (``docs/rules.md``; none given = the shipped
``rules/tests/``): one line per case, a diff for each failure; exit 0 all passed, 1 any
failed, 2 bad input. ``test --mutate`` moves each threshold of the tested rules by
x0.75 and x1.33 and lists those no test notices (exit 0, or 1 below ``--min-score``).
``export --prometheus`` prints the fleet rules for Prometheus (recording and alerting
rules in PromQL over every node's metrics: docs/fleet.md) on stdout, from the installed
package, ready for ``promtool check rules`` and Prometheus's ``rule_files``.
``export --grafana`` prints the Grafana dashboard over the same metrics (per node and per
job, the incidents as annotations, the culprit node of a job-wide hang: docs/fleet.md),
ready for Grafana's dashboard import or a provisioning folder.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable
    from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``rules`` sub-command (cheap imports only)."""
    p = subparsers.add_parser("rules", help="validate rule files and run rule unit tests",
                              description=__doc__.split("\n\n", 1)[0])
    sub = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    c = sub.add_parser("check", help="validate rule files; one line per rule")
    c.add_argument("files", nargs="*", metavar="FILE_OR_DIR",
                   help="rule files or folders (default: the shipped rules)")
    c.set_defaults(func=run_check)
    t = sub.add_parser("test", help="run rule unit tests (promtool-style)")
    t.add_argument("files", nargs="*", metavar="TEST_FILE_OR_DIR",
                   help="rule test files or folders (default: the shipped rules/tests)")
    t.add_argument("-q", "--quiet", action="store_true", help="print only failures")
    t.add_argument("--mutate", action="store_true",
                   help="mutation test: move each number of the tested rules' condition, "
                        "clear and for by x0.75 and x1.33 and report those no test pins")
    t.add_argument("--min-score", type=float, metavar="X", default=None,
                   help="with --mutate: exit 1 when the caught fraction is below X (0-1)")
    t.set_defaults(func=run_test)
    e = sub.add_parser("export", help="print rules for other systems (--prometheus: the "
                                      "fleet rules; --grafana: the dashboard)")
    what = e.add_mutually_exclusive_group(required=True)
    what.add_argument("--prometheus", action="store_true",
                      help="the fleet rules for Prometheus (PromQL recording and alerting "
                           "rules over every node's metrics; docs/fleet.md)")
    what.add_argument("--grafana", action="store_true",
                      help="the Grafana dashboard (JSON) over the same metrics")
    e.set_defaults(func=run_export)
    def usage(_args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=usage)


def run_check(args: argparse.Namespace) -> int:
    from watchdog.detect import load_rules

    rules = load_rules(args.files or None)
    for r in rules:
        for_text = (f"learned(default={r.learned.default:g}s)" if r.learned
                    else f"{r.for_s:g}s")
        print(f"ok {r.where}: {r.name} kind={r.kind} severity={r.severity} scope={r.scope} "
              f"for={for_text}")
    print(f"{len(rules)} rule(s) in {len(rules.sources)} file(s): ok")
    return 0


def prometheus_rules_file() -> Traversable:
    """The shipped fleet rule file (``rules/prometheus/fleet.yml``; in a wheel
    ``watchdog/default_rules/prometheus/fleet.yml``)."""
    from watchdog.detect.loader import default_rules_dir

    return default_rules_dir() / "prometheus" / "fleet.yml"


def grafana_dashboard_file() -> Traversable:
    """The shipped Grafana dashboard (``watchdog/dashboards/nvml-watchdog.json``)."""
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "dashboards" / "nvml-watchdog.json"


def run_export(args: argparse.Namespace) -> int:
    import sys

    from watchdog.errors import InputError

    path = grafana_dashboard_file() if args.grafana else prometheus_rules_file()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        what = "dashboard" if args.grafana else "fleet rules"
        raise InputError(f"{path}: the {what} is missing from this install: "
                         f"{e.strerror}") from None
    sys.stdout.write(text)
    return 0


def run_test(args: argparse.Namespace) -> int:
    from watchdog.detect.loader import default_rules_dir, rule_files
    from watchdog.pipeline.ruletest import run_files

    files = rule_files(args.files or [default_rules_dir() / "tests"], what="rule test")
    if args.mutate:
        return _run_mutate(files, args.min_score)
    if args.min_score is not None:
        from watchdog.errors import InputError

        raise InputError("--min-score: only with --mutate")
    passed, failed, lines = run_files(files)
    for line in lines:
        if not (args.quiet and line.startswith("ok ")):
            print(line)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def _run_mutate(files: list[Path], min_score: float | None) -> int:
    from watchdog.errors import InputError
    from watchdog.pipeline.mutate import report, run

    if min_score is not None and not 0 <= min_score <= 1:
        raise InputError(f"--min-score: {min_score:g} is not between 0 and 1")
    res = run(files)
    for line in report(res):
        print(line)
    return 1 if min_score is not None and res.score < min_score else 0
