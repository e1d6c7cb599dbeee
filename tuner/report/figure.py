"""What every chart of the report shares: the outcome markers, the palette, the figure and the
:class:`Chart` record each drawing function returns.

Every chart marks each trial by outcome: feasible (filled circle), over the TTFT limit (orange
triangle), out of memory (red cross). Figures are built with :class:`matplotlib.figure.Figure`
and the Agg canvas directly: no pyplot, no global state, no display needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tuner.analysis.trials import Outcome, Point
from tuner.config.trial import SpecMethod

__all__ = [
    "MEASURED",
    "OUTCOME_STYLE",
    "PALETTE",
    "Chart",
    "draft_colors",
    "new_figure",
    "save",
    "scatter_outcomes",
    "short_name",
    "show_empty",
    "throughput_of",
    "ttft_of",
]

OUTCOME_STYLE = {
    Outcome.FEASIBLE: {"marker": "o", "color": "#1f77b4", "label": "feasible"},
    Outcome.OVER_TTFT: {"marker": "^", "color": "#ff7f0e", "label": "over TTFT limit"},
    Outcome.OVER_TPOT: {"marker": "<", "color": "#bcbd22", "label": "over TPOT limit"},
    Outcome.OVER_STREAM: {"marker": "v", "color": "#9467bd", "label": "over stream-gap limit"},
    Outcome.OOM: {"marker": "x", "color": "#d62728", "label": "OOM"},
    Outcome.LOST_REQUESTS: {"marker": "s", "color": "#7f7f7f", "label": "failed requests"},
}
# Measured and scored on their numbers, feasible or over a latency limit.
MEASURED = (Outcome.FEASIBLE, Outcome.OVER_TTFT, Outcome.OVER_TPOT, Outcome.OVER_STREAM)
PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


@dataclass(frozen=True)
class Chart:
    """One written chart."""

    name: str
    title: str
    path: Path
    points: int  # trials (or bars) drawn: 0 means the chart has nothing to show
    caption: str
    # The drawn figure, as saved: what a reader (or a test) of the rendered chart looks at.
    figure: Figure = field(compare=False, repr=False, kw_only=True)


def new_figure(width: float = 7.0, height: float = 4.4) -> tuple[Figure, Axes]:
    figure = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.grid(True, alpha=0.3)
    return figure, axes


def save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def show_empty(axes: Axes, text: str) -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, color="gray")


def draft_colors(points: Sequence[Point]) -> dict[str, str]:
    names = sorted(
        {p.draft for p in points}, key=lambda d: (d != SpecMethod.NONE, d != SpecMethod.NGRAM, d)
    )
    return {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(names)}


def short_name(draft: str) -> str:
    return draft.rstrip("/").rsplit("/", 1)[-1]


def throughput_of(p: Point) -> float:
    return p.throughput or 0.0


def ttft_of(p: Point) -> float:
    return p.p95_ttft_ms or 0.0


def scatter_outcomes(
    axes: Axes, points: Sequence[Point], x: Callable[[Point], float], y: Callable[[Point], float]
) -> None:
    """Every measured trial of ``points`` at (``x``, ``y``), one marker and colour per
    outcome, each labelled with its count."""
    for outcome in MEASURED:
        group = [p for p in points if p.outcome is outcome]
        if group:
            style = OUTCOME_STYLE[outcome]
            axes.scatter(
                [x(p) for p in group],
                [y(p) for p in group],
                marker=style["marker"],
                color=style["color"],
                label=f"{style['label']} ({len(group)})",
                alpha=0.8,
            )
