"""Any CSV through a column mapping; absurd values; a mapping naming a missing column."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from watchdog.errors import InputError
from watchdog.sources.replay import open_log

LOGS = Path(__file__).parent / "fixtures" / "logs"
MAP = {"timestamp": "when", "index": "gpu_id", "power.draw": "board_watts",
       "temperature.gpu": "core_temp", "utilization.gpu": "busy_pct"}


def test_mapping_reads_custom_columns_and_ignores_the_rest() -> None:
    rec = open_log(LOGS / "custom_logger.csv", mapping=MAP, host="n9")
    f = rec.frame
    assert rec.format == "mapped_csv"
    assert f["power.draw"].iloc[0] == 250.5 and f["temperature.gpu"].tolist() == [61, 60, 62, 61]
    assert f["uuid"].unique().tolist() == ["n9/gpu0", "n9/gpu1"]
    assert any("ignored unknown column(s): note" in w for w in rec.warnings)


def test_absurd_values_become_missing_with_a_warning_naming_the_line() -> None:
    rec = open_log(LOGS / "custom_logger.csv", mapping=MAP)
    f = rec.frame
    # -12 W (line 3) and 1e12 W (line 4) are sensor nonsense: missing, never kept or zeroed
    assert math.isnan(f["power.draw"].iloc[1]) and math.isnan(f["power.draw"].iloc[2])
    assert f["power.draw"].iloc[3] == 248.0
    assert math.isnan(f["utilization.gpu"].iloc[1])  # 150 %
    power_w = [w for w in rec.warnings if "'power.draw'" in w]
    assert len(power_w) == 1 and "custom_logger.csv:3:" in power_w[0] and "2 absurd" in power_w[0]
    assert any("custom_logger.csv:3:" in w and "'utilization.gpu'" in w for w in rec.warnings)


def test_mapping_aliases_are_canonicalised() -> None:
    m = dict(MAP)
    m["power.draw [W]"] = m.pop("power.draw")
    assert "power.draw" in open_log(LOGS / "custom_logger.csv", mapping=m).metrics


def test_mapping_naming_a_missing_column_is_one_line_error() -> None:
    with pytest.raises(InputError) as e:
        open_log(LOGS / "custom_logger.csv", mapping={**MAP, "power.draw": "watts"})
    msg = str(e.value)
    assert "custom_logger.csv:1" in msg and "'watts'" in msg and "board_watts" in msg
    assert "\n" not in msg


def test_mapping_with_unknown_metric_is_an_error() -> None:
    with pytest.raises(InputError, match="unknown metric 'flux'"):
        open_log(LOGS / "custom_logger.csv", mapping={**MAP, "flux": "note"})


def test_csv_without_known_columns_asks_for_a_mapping() -> None:
    with pytest.raises(InputError, match=r"custom_logger\.csv:1: no known metric column"):
        open_log(LOGS / "custom_logger.csv")
