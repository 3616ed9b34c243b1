"""The command-line boundary: help, version, and errors as one line with an exit code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from watchdog import cli
from watchdog.errors import InputError


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert "nvml-watchdog" in capsys.readouterr().out
    assert cli.main([]) == 2  # no command: help and a usage exit code
    assert "COMMAND" in capsys.readouterr().out


def test_watchdog_errors_become_one_line_and_their_exit_code(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def boom(_args: object) -> int:
        raise InputError("trace.csv:3: column 'power.draw': 'abc' is not a number")

    monkeypatch.setattr(cli, "build_parser", lambda only=None: _parser_with("boom", boom))
    assert cli.main(["boom"]) == 2
    err = capsys.readouterr().err
    assert err == "watchdog: error: trace.csv:3: column 'power.draw': 'abc' is not a number\n"


def test_internal_errors_never_print_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def bug(_args: object) -> int:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "build_parser", lambda only=None: _parser_with("bug", bug))
    assert cli.main(["bug"]) == 70
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error: ZeroDivisionError" in err
    assert len(err.strip().splitlines()) == 1


def test_python_dash_m_runs_the_cli() -> None:
    res = subprocess.run([sys.executable, "-m", "watchdog", "--help"],
                         capture_output=True, text=True, check=True)
    assert "usage: watchdog" in res.stdout


def _parser_with(name: str, func):  # type: ignore[no-untyped-def]
    """The real top-level parser plus one extra sub-command ``name`` that calls ``func``."""
    parser = _REAL_BUILD()
    sub = next(a for a in parser._actions if a.dest == "command")
    sub.add_parser(name).set_defaults(func=func)
    return parser


_REAL_BUILD = cli.build_parser
