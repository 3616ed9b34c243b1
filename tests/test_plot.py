"""The --plot timeline: panels for the signals present, one line per GPU, incidents shaded."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from watchdog.incident import Incident
from watchdog.report.plot import plot_timeline

T0 = 1_763_712_000.0


def frame(gpus: int = 4, ticks: int = 300, memory: bool = True) -> pd.DataFrame:
    """A small replay frame: 1 s ticks, power collapsing to ~100 W at tick 200."""
    parts = []
    for g in range(gpus):
        power = np.where(np.arange(ticks) < 200, 690.0, 100.0) + g
        cols = {"ts": T0 + np.arange(ticks, dtype=float), "uuid": f"GPU-{g}", "index": g,
                "lost": False, "utilization.gpu": 100.0, "power.draw": power,
                "enforced.power.limit": 700.0, "temperature.gpu": 60.0 + g,
                "clocks.sm": 1980.0}
        if memory:
            cols |= {"memory.used": 70000.0, "memory.total": 81559.0}
        parts.append(pd.DataFrame(cols))
    return pd.concat(parts).sort_values(["ts", "index"], kind="stable").reset_index(drop=True)


def hang(resolved: float | None = None) -> Incident:
    return Incident("comm_hang", "critical", "n1", ["0", "1", "2", "3"],
                    [f"GPU-{g}" for g in range(4)], T0 + 200, T0 + 260, resolved,
                    "hang", "4 GPUs hung")


@pytest.mark.slow
def test_png_has_a_panel_per_signal_and_a_line_per_gpu(tmp_path):
    out = tmp_path / "t.png"
    info = plot_timeline(frame(), [hang()], out, title="n1 test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert info.panels == ["utilization", "power", "temperature", "memory used", "SM clock"]
    # 4 GPUs x 5 panels, plus the dashed power limit for each GPU
    assert info.lines == 4 * 5 + 4


def test_missing_signals_get_no_panel(tmp_path):
    f = frame(memory=False).drop(columns=["clocks.sm"])
    f["temperature.gpu"] = np.nan  # present but never reported: no panel either
    info = plot_timeline(f, [], tmp_path / "t.png")
    assert info.panels == ["utilization", "power"]


def test_incident_is_shaded_pending_then_firing_until_end(tmp_path):
    info = plot_timeline(frame(), [hang()], tmp_path / "t.png")
    assert info.spans == [("comm_hang", T0 + 200, T0 + 260, "pending"),
                          ("comm_hang", T0 + 260, T0 + 299, "firing")]
    assert info.labels == ["comm_hang GPU 0-3"]


def test_resolved_incident_shading_stops_at_resolution(tmp_path):
    info = plot_timeline(frame(), [hang(resolved=T0 + 280)], tmp_path / "t.png")
    assert info.spans[-1] == ("comm_hang", T0 + 260, T0 + 280, "firing")


def test_shading_is_visible_in_the_picture(tmp_path):
    """Pixels inside the firing span are tinted red; the same row before it is not."""
    import matplotlib.image as mpimg

    out = tmp_path / "t.png"
    plot_timeline(frame(), [hang()], out)
    img = mpimg.imread(out)[:, :, :3]
    h, w, _ = img.shape
    row = img[int(h * 0.30)]  # a row through the power panel's empty upper part
    # the axes span roughly 7 %..92 % of the width; the incident is ticks 200..299 of 300
    before, pending, firing = row[int(w * 0.30)], row[int(w * 0.72)], row[int(w * 0.89)]
    assert before[0] > 0.95 and before[1] > 0.95  # white background before the incident
    assert pending[0] - pending[1] > 0.03  # light red tint while pending
    assert firing[0] - firing[1] > pending[0] - pending[1] + 0.05  # darker once fired


def test_long_frames_are_reduced_per_gpu(tmp_path):
    info = plot_timeline(frame(gpus=2, ticks=20_000), [], tmp_path / "t.png", max_points=500)
    assert info.lines == 2 * 5 + 2
    assert info.points == 500


def test_empty_frame_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no samples"):
        plot_timeline(frame().iloc[0:0], [], tmp_path / "t.png")
