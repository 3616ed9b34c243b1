"""``python -m watchdog.testing.fakenvml SCENARIO -- CMD ARGS…``: run a console tool in this
process with the fake NVML installed.

``CMD`` is a console-script name of an installed distribution (``watchdog``, ``gpustat``,
…), resolved through its entry point, or ``module:function``. The function is called with
``sys.argv`` set to ``[CMD, ARGS…]``; its return value (or ``SystemExit``) is the exit code.
"""

from __future__ import annotations

import sys
from importlib import import_module
from importlib.metadata import entry_points

USAGE = "usage: python -m watchdog.testing.fakenvml SCENARIO -- CMD [ARGS…]"


def _resolve(cmd: str):
    if ":" in cmd:
        mod, _, attr = cmd.partition(":")
        return getattr(import_module(mod), attr)
    for ep in entry_points(group="console_scripts"):
        if ep.name == cmd:
            return ep.load()
    raise SystemExit(f"fakenvml: no console script named {cmd!r}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    from watchdog.testing import fakenvml

    try:
        fakenvml.install(args[0])
    except KeyError as e:
        print(f"fakenvml: {e.args[0]}", file=sys.stderr)
        return 2
    func = _resolve(args[2])
    sys.argv = [args[2], *args[3:]]
    try:
        rc = func()
    except SystemExit as e:
        rc = e.code
    finally:
        fakenvml.uninstall()
    if rc is None:
        return 0
    return rc if isinstance(rc, int) else 1


if __name__ == "__main__":
    sys.exit(main())
