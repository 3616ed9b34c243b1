"""The post-mortem picture: one panel per signal, one thin line per GPU, incidents shaded.

Panels (only those the recording has): utilization (%), power (W, the enforced limit
dashed), GPU temperature (C), memory used (% of total) and SM clock (MHz). Panels per
signal read better than panels per GPU for an 8-GPU node: a hung job is eight lines
dropping together, a straggler is one line apart from seven.

Each incident is shaded across all panels: lighter from ``started_at`` to ``fired_at``
(the condition held but the rule's ``for:`` had not passed), darker from ``fired_at`` to
``resolved_at`` (or the end of the recording), and labelled with its kind and GPUs.
The job's own console lines near an incident (``notes``: a W&B run's checkpoint, error
or exit) are drawn as dotted lines across the panels and listed under them, numbered.
Long recordings are reduced to at most ``max_points`` per GPU by bucket means so a
one-million-row log plots in about a second; time axis in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.incident import KIND_LIST, Incident
from watchdog.report.table import gpu_list

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# (panel title, column or derived name, unit)
PANELS: tuple[tuple[str, str, str], ...] = (
    ("utilization", "utilization.gpu", "%"),
    ("power", "power.draw", "W"),
    ("temperature", "temperature.gpu", "°C"),
    ("memory used", "memory.pct", "% of total"),
    ("SM clock", "clocks.sm", "MHz"),
)
# Fixed y ranges where the scale is absolute: autoscaling 97-100 % makes noise look like
# an event. None = autoscale that end.
YLIMS: dict[str, tuple[float | None, float | None]] = {
    "utilization.gpu": (-3.0, 105.0), "memory.pct": (-3.0, 105.0),
    "power.draw": (0.0, None), "clocks.sm": (0.0, None),
}

KIND_COLOURS: dict[str, str] = {k.name: k.colour for k in KIND_LIST}


@dataclass
class PlotInfo:
    """What :func:`plot_timeline` drew: panel names, GPU lines per panel, shaded spans.

    ``spans`` holds ``(kind, start, end, phase)`` with times in POSIX s and ``phase``
    ``"pending"`` (started -> fired) or ``"firing"`` (fired -> resolved or end).
    """

    panels: list[str] = field(default_factory=list)
    lines: int = 0
    points: int = 0  # most points drawn on one line (after reduction)
    spans: list[tuple[str, float, float, str]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # console lines listed under the plot


def _reduce(g: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """Bucket means of one GPU's rows (ts and values) down to ``max_points`` rows."""
    if len(g) <= max_points:
        return g
    import numpy as np

    bucket = np.arange(len(g)) * max_points // len(g)
    return g.groupby(bucket).mean(numeric_only=True)


def _series(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns the panels need, with ``memory.pct`` derived from used / total."""
    cols = ["ts", "uuid", "index"] + [c for c in ("utilization.gpu", "power.draw",
                                                  "enforced.power.limit", "temperature.gpu",
                                                  "clocks.sm") if c in frame.columns]
    out = frame[cols].copy()
    if "memory.used" in frame.columns and "memory.total" in frame.columns:
        out["memory.pct"] = frame["memory.used"] / frame["memory.total"] * 100.0
    return out


#: Console lines drawn under a timeline, and the characters kept of each.
MAX_NOTES, NOTE_CHARS = 12, 110


def plot_timeline(frame: pd.DataFrame, incidents: Sequence[Incident], path: str | Path,
                  title: str = "", max_points: int = 3000,
                  notes: Sequence[tuple[float, str]] = ()) -> PlotInfo:
    """Draw the timeline of ``frame`` (the replay frame contract) to ``path`` (PNG).
    ``notes``: ``(time, text)`` of the job's console lines to mark (at most
    :data:`MAX_NOTES`, each cut to :data:`NOTE_CHARS` characters).

    Returns what was drawn. Uses the Agg backend: no display is needed. An empty frame
    is an error the caller reports (there is no time axis to draw).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    import pandas as pd

    if len(frame) == 0:
        raise ValueError("nothing to plot: the recording has no samples")
    info = PlotInfo()
    data = _series(frame)
    panels = [p for p in PANELS if p[1] in data.columns and data[p[1]].notna().any()]
    if not panels:
        panels = [PANELS[0]]
    gpus = sorted(data.groupby("uuid", sort=False)["index"].first().items(),
                  key=lambda kv: (kv[1], kv[0]))
    cmap = plt.get_cmap("tab10" if len(gpus) <= 10 else "tab20")
    tmin, tmax = float(frame["ts"].min()), float(frame["ts"].max())
    notes = [n for n in notes if tmin - 3600 <= n[0] <= tmax + 3600][:MAX_NOTES]
    tmax = max([tmax, *(n[0] for n in notes)])  # a crash's last words come after the data
    tmin = min([tmin, *(n[0] for n in notes)])
    fig, axes = plt.subplots(len(panels), 1, sharex=True, squeeze=False,
                             figsize=(13, 1.9 * len(panels) + 1.2 + 0.17 * len(notes)))
    axes = axes[:, 0]

    def when(ts):  # POSIX s (a number or an array) -> matplotlib's dates
        return pd.to_datetime(ts, unit="s", utc=True)

    by_uuid = {u: g for u, g in data.groupby("uuid", sort=False)}
    for n, (uuid, index) in enumerate(gpus):
        g = _reduce(by_uuid[uuid].drop(columns=["uuid"]), max_points)
        colour = cmap(n % cmap.N)
        x = when(g["ts"])
        info.points = max(info.points, len(g))
        for ax, (_name, col, _unit) in zip(axes, panels, strict=True):
            if col in g.columns:
                ax.plot(x, g[col], lw=0.8, color=colour, label=f"GPU {int(index)}")
                info.lines += 1
            if col == "power.draw" and "enforced.power.limit" in g.columns:
                ax.plot(x, g["enforced.power.limit"], lw=0.8, ls="--", color=colour,
                        alpha=0.6)
                info.lines += 1
    for ax, (name, _col, unit) in zip(axes, panels, strict=True):
        ax.set_ylabel(f"{name}\n({unit})", fontsize=9)
        lo, hi = YLIMS.get(_col, (None, None))
        ax.set_ylim(bottom=lo, top=hi)
        ax.grid(True, alpha=0.25)
        ax.tick_params(labelsize=8)
    _shade(list(axes), incidents, tmin, tmax, when, info)
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    days = f"{when(tmin):%Y-%m-%d}"
    if f"{when(tmax):%Y-%m-%d}" != days:  # a log over several days: dates on the axis
        days += f" .. {when(tmax):%Y-%m-%d}"
        axes[-1].xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M", tz="UTC"))
    else:
        axes[-1].xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz="UTC"))
    axes[-1].set_xlabel(f"time (UTC), {days}", fontsize=9)
    axes[-1].set_xlim(when(tmin), when(tmax))
    _notes(fig, list(axes), notes, when, info)
    n = len(incidents)
    fig.suptitle(f"{title}  —  {n} incident{'s' if n != 1 else ''}".strip(" —"), fontsize=11)
    if notes:  # room for the numbered console lines under the axes
        fig.tight_layout(rect=(0, 0.17 * len(notes) / fig.get_figheight() + 0.01, 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    info.panels = [p[0] for p in panels]
    return info


def _shade(axes: Sequence[Axes], incidents: Sequence[Incident], tmin: float, tmax: float,
           when: Callable[[float], float], info: PlotInfo) -> None:
    """Shade every incident on every panel; label it once on the top panel."""
    top = axes[0]
    for k, inc in enumerate(incidents):
        colour = KIND_COLOURS[inc.kind]
        fired = inc.fired_at if inc.fired_at is not None else inc.resolved_at or tmax
        end = inc.resolved_at if inc.resolved_at is not None else tmax
        start = max(inc.started_at, tmin)
        for ax in axes:
            if fired > start:
                ax.axvspan(when(start), when(fired), color=colour, alpha=0.10, lw=0)
            if inc.fired_at is not None and end > fired:
                ax.axvspan(when(fired), when(end), color=colour, alpha=0.25, lw=0)
        if fired > start:
            info.spans.append((inc.kind, start, fired, "pending"))
        if inc.fired_at is not None and end > fired:
            info.spans.append((inc.kind, fired, end, "firing"))
        label = f"{inc.kind} GPU {gpu_list(inc.gpus)}"
        info.labels.append(label)
        late = tmax > tmin and (start - tmin) / (tmax - tmin) > 0.7  # label to the left
        top.annotate(label, xy=(when(start), 1.0), xycoords=("data", "axes fraction"),
                     xytext=(-2 if late else 2, -10 - 10 * (k % 4)),
                     textcoords="offset points", ha="right" if late else "left",
                     fontsize=7.5, color=colour, fontweight="bold", va="top",
                     bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                           "alpha": 0.8})


def _notes(fig: Figure, axes: Sequence[Axes], notes: list[tuple[float, str]],
           when: Callable[[float], float],
           info: PlotInfo) -> None:
    """Mark each console line: a numbered dotted line on every panel, the text below."""
    from datetime import UTC, datetime

    for k, (ts, text) in enumerate(notes, start=1):
        for ax in axes:
            ax.axvline(when(ts), color="#444444", ls=":", lw=0.9)
        axes[0].annotate(str(k), xy=(when(ts), 1.0), xycoords=("data", "axes fraction"),
                         xytext=(1, 2), textcoords="offset points", fontsize=7,
                         color="#444444")
        short = text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS - 1] + "…"
        line = f"{k}. {datetime.fromtimestamp(ts, tz=UTC):%H:%M:%S}  {short}"
        info.notes.append(line)
        fig.text(0.01, 0.17 * (len(notes) - k + 0.6) / fig.get_figheight(), line,
                 fontsize=7.5, family="monospace", color="#333333")
