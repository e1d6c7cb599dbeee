"""The report's energy chart: throughput against GPU joules per output token.

Every measured trial whose GPUs were read is drawn by outcome; the line joins the feasible
configs no other beats on both throughput and energy (fastest at the top), and a star marks
the recommendation. Trials without a reading (the simulator, no NVML) are not drawn: the page
leaves the chart out where none has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tuner.analysis.trials import Outcome, Point
from tuner.report.figure import MEASURED, Chart, new_figure, save, scatter_outcomes, throughput_of

__all__ = ["energy_chart", "energy_front_points"]


def _joules(p: Point) -> float:
    return p.joules_per_token or 0.0


def energy_front_points(points: Sequence[Point]) -> list[Point]:
    """The feasible points no other beats on both throughput and joules per token, from the
    most frugal to the fastest."""
    read = [
        p
        for p in points
        if p.outcome is Outcome.FEASIBLE
        and p.joules_per_token is not None
        and p.throughput is not None
        and p.duplicate_of is None
    ]

    def beaten(p: Point) -> bool:
        return any(
            throughput_of(o) >= throughput_of(p)
            and _joules(o) <= _joules(p)
            and (throughput_of(o) > throughput_of(p) or _joules(o) < _joules(p))
            for o in read
        )

    return sorted((p for p in read if not beaten(p)), key=lambda p: (_joules(p), p.number))


def energy_chart(
    points: Sequence[Point],
    recommended: int | None,
    path: Path,
    label: str = "output tokens/s",
) -> Chart:
    """Throughput against joules per output token, the recommendation (trial number) starred."""
    figure, axes = new_figure()
    read = [
        p
        for p in points
        if p.outcome in MEASURED and p.joules_per_token is not None and p.throughput is not None
    ]
    scatter_outcomes(axes, read, _joules, throughput_of)
    front = energy_front_points(read)
    if len(front) > 1:
        axes.plot(
            [_joules(p) for p in front],
            [throughput_of(p) for p in front],
            color="#1f77b4",
            alpha=0.5,
            label="front: faster or more frugal",
        )
    chosen = next((p for p in read if p.number == recommended), None)
    if chosen is not None:
        axes.scatter(
            [_joules(chosen)],
            [throughput_of(chosen)],
            marker="*",
            s=220,
            color="#2ca02c",
            edgecolors="black",
            zorder=3,
            label=f"recommended (#{chosen.number})",
        )
    for p in front:
        axes.annotate(
            f"#{p.number}",
            (_joules(p), throughput_of(p)),
            xytext=(5, -10),
            fontsize=8,
            textcoords="offset points",
        )
    # Room past the largest values, so the front's ends are not drawn on the frame.
    axes.set_xlim(0, 1.1 * max((_joules(p) for p in read), default=1.0))
    axes.set_ylim(0, 1.1 * max((throughput_of(p) for p in read), default=1.0))
    axes.set_xlabel("GPU energy per output token (J)")
    axes.set_ylabel(label)
    axes.set_title("Throughput against energy per token")
    axes.legend(fontsize=8, loc="best")
    return Chart(
        "energy",
        "Throughput against GPU energy per output token",
        save(figure, path),
        len(read),
        "Each trial whose GPUs were read, by outcome; up is faster, left spends fewer joules "
        "per output token. The line joins the feasible configs no other beats on both; the "
        "star is the recommendation.",
        figure=figure,
    )
