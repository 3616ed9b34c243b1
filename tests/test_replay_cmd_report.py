"""The incident table and terminal progress of `watchdog replay`."""

from __future__ import annotations

import io

from watchdog.incident import Incident
from watchdog.report.progress import Progress, should_show
from watchdog.report.table import HEADERS, duration, format_table, gpu_legend, gpu_list

T0 = 1_763_712_000.0  # 2025-11-21T08:00:00Z


def inc(host: str = "n1", gpus: tuple[str, ...] = ("0", "1", "2", "5"),
        resolved: float | None = T0 + 7300, fired: float | None = T0 + 42) -> Incident:
    return Incident("comm_hang", "critical", host, list(gpus), [f"U{g}" for g in gpus], T0,
                    fired, resolved, "comm_hang", "4 GPUs hung")


def test_gpu_list_compacts_ranges():
    assert gpu_list(["0", "1", "2", "5"]) == "0-2,5"
    assert gpu_list(["7", "6", "3"]) == "3,6-7"
    assert gpu_list(["3"]) == "3"
    assert gpu_list(["a", "b"]) == "a,b"


def test_duration_words():
    assert [duration(s) for s in (0, 42, 125, 7300)] == ["0s", "42s", "2m05s", "2h01m"]


def test_table_row_has_utc_start_and_delays():
    lines = format_table([inc()]).splitlines()
    assert lines[0].split() == ["KIND", "SEVERITY", "GPUS", "START", "(UTC)", "FIRED",
                                "RESOLVED", "SUMMARY"]
    row = lines[1]
    assert row.startswith("comm_hang  critical  0-2,5")
    assert "2025-11-21 08:00:00" in row
    assert "08:00:42 (+42s)" in row and "10:01:40 (+2h01m)" in row
    assert row.endswith("4 GPUs hung")


def test_table_says_when_not_resolved_or_not_fired():
    row = format_table([inc(resolved=None, fired=None)]).splitlines()[1]
    assert "not fired" in row and "active at end" in row


def test_host_column_only_when_hosts_differ():
    assert "HOST" not in format_table([inc(), inc()])
    two = format_table([inc("nodea"), inc("nodeb")]).splitlines()
    assert two[0].split()[:3] == ["KIND", "SEVERITY", "HOST"]
    assert two[2].split()[2] == "nodeb"
    assert len(HEADERS) == 8


def test_no_incidents_is_one_line():
    assert format_table([]) == "no incidents"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_and_never_with_json():
    assert should_show(False, Tty()) is True
    assert should_show(True, Tty()) is False
    assert should_show(False, io.StringIO()) is False


def test_progress_bar_writes_to_its_stream_only_when_enabled():
    on, off = Tty(), Tty()
    with Progress(100, "log.csv", True, stream=on) as bar:
        bar.update(60)
    with Progress(100, "log.csv", False, stream=off) as bar:
        bar.update(60)
    assert "log.csv" in on.getvalue() and "/100" in on.getvalue()
    assert off.getvalue() == ""


def test_gpu_legend_maps_each_index_to_its_uuid_once():
    a = inc("nodea", ("0", "1"))
    b = inc("nodea", ("1", "10"))
    c = inc("nodeb", ("0",))
    assert gpu_legend([a, b, c]).splitlines() == [
        "  nodea  GPU 0   U0", "  nodea  GPU 1   U1", "  nodea  GPU 10  U10",
        "  nodeb  GPU 0   U0"]
    assert gpu_legend([]) == ""
