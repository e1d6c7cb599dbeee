"""The report's Pareto chart: throughput against p95 TTFT, on an axis fitted to the data.

OOM trials measured nothing: they sit at the plot's right edge and say so in the legend. The
TTFT axis spans the measured values; a limit far beyond them (a 60 s limit over 100 ms trials)
is named in the legend instead of squashing every point against the left edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tuner.analysis.confirmed import Confirmed
from tuner.analysis.trials import Outcome, Point
from tuner.report.figure import (
    Chart,
    new_figure,
    save,
    scatter_outcomes,
    show_empty,
    throughput_of,
    ttft_of,
)

__all__ = ["pareto_chart"]


def pareto_chart(
    points: Sequence[Point],
    confirmed: dict[int, Confirmed],
    ttft_limit_ms: float,
    path: Path,
    label: str = "output tokens/s",
) -> Chart:
    """Throughput against p95 TTFT: every trial by outcome, the feasible Pareto front, the
    TTFT limit, and confirmed configs with their 95 % intervals."""
    figure, axes = new_figure()
    measured = [p for p in points if p.throughput is not None and p.p95_ttft_ms is not None]
    scatter_outcomes(axes, measured, ttft_of, throughput_of)
    front = sorted(
        (p for p in measured if p.on_front), key=lambda p: (ttft_of(p), -throughput_of(p))
    )
    if front:
        axes.step(
            [ttft_of(p) for p in front],
            [throughput_of(p) for p in front],
            where="post",
            color="#1f77b4",
            alpha=0.5,
            label="Pareto front",
        )
    left, right = _ttft_range(measured, confirmed, ttft_limit_ms)
    ooms = [p for p in points if p.outcome is Outcome.OOM]
    if ooms:
        axes.scatter(
            [right] * len(ooms),
            [0.0] * len(ooms),
            marker="x",
            color="#d62728",
            s=60,
            label=f"OOM ({len(ooms)}), nothing measured",
            clip_on=False,
        )
    if ttft_limit_ms <= right:
        axes.axvline(ttft_limit_ms, color="gray", linestyle="--", label="TTFT limit")
    else:  # far beyond the data: drawn, it would squash every point against the left edge
        axes.plot([], [], " ", label=f"TTFT limit {ttft_limit_ms:.0f} ms, off the chart")
    for number, record in confirmed.items():
        tok_s, ttft = record.throughput, record.p95_ttft_ms
        if tok_s is None or ttft is None:
            continue
        axes.errorbar(
            ttft.mean,
            tok_s.mean,
            xerr=ttft.half_width or 0.0,
            yerr=tok_s.half_width or 0.0,
            fmt="D",
            color="black",
            capsize=3,
            markersize=5,
        )
        axes.annotate(
            f"#{number}",
            (ttft.mean, tok_s.mean),
            xytext=(5, 5),
            textcoords="offset points",
            fontsize=8,
        )
    if confirmed:
        axes.plot([], [], "D", color="black", label="confirmed mean ± 95 % CI")
    axes.set_xlim(left, right * 1.03)
    axes.set_ylim(bottom=0)
    axes.set_xlabel("p95 time to first token (ms)")
    axes.set_ylabel(label)
    axes.set_title("Throughput against p95 TTFT")
    if not points:
        show_empty(axes, "no completed trials")
    else:
        axes.legend(fontsize=8, loc="best")
    return Chart(
        "pareto",
        "Pareto front: throughput against p95 TTFT",
        save(figure, path),
        len(points),
        "Each trial by outcome; the line is the feasible Pareto front, the dashed line the TTFT "
        "limit (or, far beyond the data, named in the legend); OOM trials sit at the right edge "
        "because they measured nothing.",
        figure=figure,
    )


def _ttft_range(
    measured: Sequence[Point], confirmed: dict[int, Confirmed], ttft_limit_ms: float
) -> tuple[float, float]:
    """The p95 TTFT axis: the measured values (and confirmed intervals) with a margin, and the
    limit only where it lies near them (within a quarter of their span past the largest)."""
    values = [ttft_of(p) for p in measured]
    for record in confirmed.values():
        ttft = record.p95_ttft_ms
        if ttft is not None:
            values += [ttft.mean - (ttft.half_width or 0.0), ttft.mean + (ttft.half_width or 0.0)]
    if not values:
        return 0.0, ttft_limit_ms * 1.08
    low, high = min(values), max(values)
    pad = 0.08 * (high - low) if high > low else 0.1 * high or 1.0
    left, right = max(0.0, low - pad), high + pad
    if ttft_limit_ms <= right + 0.25 * (right - left):
        right = max(right, ttft_limit_ms * 1.02)
        left = min(left, max(0.0, ttft_limit_ms - pad))  # every point over the limit
    return left, right
