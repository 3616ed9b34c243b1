"""Bad input is one InputError line naming the file (and line), never a traceback.

Fuzzed with hypothesis: random bytes and mutated valid logs either load or raise
InputError, nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from watchdog.cli import main
from watchdog.errors import InputError
from watchdog.sources.replay import open_log

LOGS = Path(__file__).parent / "fixtures" / "logs"
VALID = sorted(p for p in LOGS.iterdir() if p.name != "custom_logger.csv")


def _one_line(e: pytest.ExceptionInfo[InputError], path: Path) -> str:
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        open_log(tmp_path / "nope.csv")
    assert "no such file" in _one_line(e, tmp_path / "nope.csv")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        open_log(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable(tmp_path: Path) -> None:
    p = tmp_path / "secret.csv"
    p.write_text("timestamp,power.draw\n")
    p.chmod(0)
    with pytest.raises(InputError, match="permission denied"):
        open_log(p)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "empty.csv"
    p.write_bytes(content)
    with pytest.raises(InputError) as e:
        open_log(p)
    assert "empty" in _one_line(e, p)


def test_binary(tmp_path: Path) -> None:
    p = tmp_path / "core.csv"
    p.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError) as e:
        open_log(p)
    assert "binary" in _one_line(e, p)


def _variant(tmp_path: Path, edit) -> Path:
    lines = (LOGS / "smi_units_in_values.csv").read_text().splitlines()
    edit(lines)
    p = tmp_path / "log.csv"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_row_with_more_fields_in_the_middle(tmp_path: Path) -> None:
    p = _variant(tmp_path, lambda ls: ls.__setitem__(2, ls[2] + ", 7"))
    with pytest.raises(InputError) as e:
        open_log(p)
    assert ":3: 11 fields, expected 10" in _one_line(e, p)


def test_row_with_fewer_fields_in_the_middle(tmp_path: Path) -> None:
    p = _variant(tmp_path, lambda ls: ls.__setitem__(3, ls[3].rsplit(",", 2)[0]))
    with pytest.raises(InputError) as e:
        open_log(p)
    assert ":4: 8 fields, expected 10" in _one_line(e, p)


def test_garbage_in_a_value_column(tmp_path: Path) -> None:
    p = _variant(tmp_path, lambda ls: ls.__setitem__(2, ls[2].replace("250.00 W", "hello")))
    with pytest.raises(InputError) as e:
        open_log(p)
    assert ":3: column 'power.draw'" in _one_line(e, p)


def test_bad_timestamp(tmp_path: Path) -> None:
    p = _variant(tmp_path, lambda ls: ls.__setitem__(4, ls[4].replace("2026/02/25", "yesterday")))
    with pytest.raises(InputError) as e:
        open_log(p)
    assert ":5: column 'timestamp'" in _one_line(e, p)


def test_cli_boundary_prints_one_line_and_exits_2(tmp_path: Path, capsys) -> None:
    p = tmp_path / "core.csv"
    p.write_bytes(b"\x00\x01\x02garbage")
    rc = main(["record", "--source", str(p), "--output", str(tmp_path / "o.wdrec")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "binary" in err and "Traceback" not in err


def _load_or_input_error(path: Path) -> None:
    try:
        open_log(path)
    except InputError as e:
        assert "\n" not in str(e)


FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.binary(max_size=400))
def test_fuzz_random_bytes(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "fuzz.csv"
    p.write_bytes(data)
    _load_or_input_error(p)


@FUZZ
@given(which=st.sampled_from(VALID), cut=st.integers(0, 2000), junk=st.binary(max_size=12),
       at=st.integers(0, 2000))
def test_fuzz_mutated_valid_logs(tmp_path: Path, which: Path, cut: int, junk: bytes,
                                 at: int) -> None:
    data = which.read_bytes()
    at %= len(data) + 1
    mutated = (data[:at] + junk + data[at:])[: max(cut, 1) if cut < len(data) else None]
    p = tmp_path / which.name
    p.write_bytes(mutated)
    _load_or_input_error(p)


@FUZZ
@given(text=st.text(alphabet=st.sampled_from(list("0123456789,.:-/ TZPx[]NA%WMiB#\n")),
                    max_size=300))
def test_fuzz_log_like_text(tmp_path: Path, text: str) -> None:
    p = tmp_path / "fuzz.csv"
    p.write_text("timestamp, index, power.draw [W], pstate\n" + text)
    _load_or_input_error(p)
