"""The report's charts, drawn with matplotlib into PNG files.

Every chart marks each trial by outcome (:mod:`tuner.report.figure`). OOM trials measured
nothing, so where an axis needs a measurement they sit on the zero line or the plot's edge and
say so in the legend. Each function returns a :class:`Chart` that says how many trials it drew,
so a test (or a reader) can tell an empty chart from a full one, and holds the drawn figure.
The Pareto chart lives in :mod:`tuner.report.pareto`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from tuner.analysis.levels import LevelChoice
from tuner.analysis.trials import Outcome, Point
from tuner.config.trial import SpecMethod
from tuner.report.figure import (
    PALETTE,
    Chart,
    draft_colors,
    new_figure,
    save,
    scatter_outcomes,
    short_name,
    show_empty,
    throughput_of,
)
from tuner.report.pareto import pareto_chart

__all__ = [
    "Chart",
    "acceptance_chart",
    "importance_chart",
    "k_chart",
    "levels_chart",
    "memory_chart",
    "pareto_chart",
]


def k_chart(points: Sequence[Point], path: Path, label: str = "output tokens/s") -> Chart:
    """Throughput against K, one colour per draft (K = 0: no speculation)."""
    figure, axes = new_figure()
    measured = [p for p in points if p.throughput is not None]
    colors = draft_colors(measured)
    for draft, color in colors.items():
        group = [p for p in measured if p.draft == draft]
        axes.scatter(
            [p.k for p in group],
            [throughput_of(p) for p in group],
            color=color,
            alpha=0.6,
            label=short_name(draft),
        )
        best: dict[int, float] = {}
        for p in group:
            best[p.k] = max(best.get(p.k, 0.0), p.throughput or 0.0)
        if len(best) > 1:
            ks = sorted(best)
            axes.plot(ks, [best[k] for k in ks], color=color, alpha=0.7)
        elif draft == SpecMethod.NONE and best:
            axes.axhline(best[0], color=color, linestyle=":", label="best without speculation")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # K counts tokens
    axes.set_xlabel("speculative tokens K (0 = no speculation)")
    axes.set_ylabel(label)
    axes.set_title("Throughput against K, per draft")
    if measured:
        axes.legend(fontsize=8)
    else:
        show_empty(axes, "no measured trials")
    return Chart(
        "k",
        "Throughput against K per draft",
        save(figure, path),
        len(measured),
        "Every measured trial; lines join the best throughput at each K.",
        figure=figure,
    )


def acceptance_chart(points: Sequence[Point], path: Path) -> Chart:
    """Draft acceptance rate against sampling temperature, one colour per draft."""
    figure, axes = new_figure()
    spec = [p for p in points if p.acceptance_rate is not None]
    colors = draft_colors(spec)
    for draft, color in colors.items():
        pairs = [pair for p in spec if p.draft == draft for pair in _acceptance(p)]
        axes.scatter(
            [temperature for temperature, _ in pairs],
            [100.0 * rate for _, rate in pairs],
            color=color,
            alpha=0.7,
            label=short_name(draft),
        )
    axes.set_xlabel("sampling temperature")
    axes.set_ylabel("draft acceptance (%)")
    axes.set_ylim(0, 100)
    axes.set_title("Acceptance against temperature")
    if spec:
        axes.legend(fontsize=8)
    else:
        show_empty(axes, "no speculative trials measured")
    return Chart(
        "acceptance",
        "Acceptance against temperature",
        save(figure, path),
        len(spec),
        "Accepted draft tokens over drafted ones, for trials that speculated: one point per "
        "trial and temperature it was measured at.",
        figure=figure,
    )


def _acceptance(p: Point) -> tuple[tuple[float, float], ...]:
    """A trial's (temperature, acceptance) points: one per temperature it was measured at."""
    if p.acceptance_by_temperature:
        return p.acceptance_by_temperature
    return ((p.temperature, p.acceptance_rate or 0.0),)  # a study that stored no pairs


def memory_chart(points: Sequence[Point], path: Path, label: str = "output tokens/s") -> Chart:
    """Throughput against gpu-memory-utilization, with OOM trials and the OOM boundary."""
    figure, axes = new_figure()
    scatter_outcomes(
        axes, points, lambda p: p.gpu_memory_utilization, lambda p: p.throughput or 0.0
    )
    ooms = [p for p in points if p.outcome is Outcome.OOM]
    for predicted, kind in ((True, "OOM predicted"), (False, "OOM at start-up")):
        group = [p for p in ooms if p.oom_predicted is predicted]
        if group:
            axes.scatter(
                [p.gpu_memory_utilization for p in group],
                [0.0] * len(group),
                marker="x" if not predicted else "+",
                color="#d62728",
                s=70,
                label=f"{kind} ({len(group)})",
                clip_on=False,
            )
    ran = [p.gpu_memory_utilization for p in points if p.outcome is not Outcome.OOM]
    if ooms:
        boundary = min(p.gpu_memory_utilization for p in ooms)
        right = max([*ran, *(p.gpu_memory_utilization for p in ooms)]) + 0.01
        axes.axvspan(boundary, right, color="#d62728", alpha=0.08)
        axes.axvline(boundary, color="#d62728", linestyle="--", label=f"lowest OOM: {boundary:.2f}")
    top = max((throughput_of(p) for p in points), default=1.0)
    axes.set_ylim(bottom=-0.04 * top)  # OOM markers on the zero line stay visible
    axes.set_xlabel("--gpu-memory-utilization")
    axes.set_ylabel(label)
    axes.set_title("Throughput against gpu-memory-utilization")
    if points:
        axes.legend(fontsize=8, loc="best")
    else:
        show_empty(axes, "no completed trials")
    return Chart(
        "memory",
        "Throughput against gpu-memory-utilization",
        save(figure, path),
        len(points),
        "OOM trials on the zero line; the shaded band starts at the lowest setting that ran "
        "out of memory (the boundary also depends on the draft and batch size).",
        figure=figure,
    )


def importance_chart(importances: dict[str, dict[str, float]], measured: int, path: Path) -> Chart:
    """Horizontal bars: each parameter's importance for throughput and for p95 TTFT, over the
    ``measured`` trials it was computed on."""
    figure, axes = new_figure(7.0, 3.8)
    names = sorted({n for values in importances.values() for n in values})
    height = 0.8 / max(1, len(importances))
    for index, (target, values) in enumerate(importances.items()):
        axes.barh(
            [i + index * height for i in range(len(names))],
            [values.get(n, 0.0) for n in names],
            height=height,
            color=PALETTE[index],
            label=target,
        )
    axes.set_yticks([i + height * (len(importances) - 1) / 2 for i in range(len(names))], names)
    axes.set_xlabel("importance (PED-ANOVA, sums to 1 per objective)")
    axes.set_title("Parameter importances")
    if importances:
        axes.legend(fontsize=8)
    else:
        show_empty(axes, "too few trials for importances")
    return Chart(
        "importance",
        "Parameter importances",
        save(figure, path),
        sum(len(v) for v in importances.values()),
        "How much each parameter decides whether a trial is among the best 10 % "
        f"(Optuna's PED-ANOVA), over the {measured} trials that measured something: "
        "OOM trials (observed or predicted) and repeats of earlier trials are left out; only "
        "the parameters the space tunes are ranked.",
        figure=figure,
    )


def levels_chart(
    points: Sequence[Point], choices: Sequence[LevelChoice], draft: str, path: Path
) -> Chart:
    """Best throughput per K at each concurrency level, for one draft and without speculation."""
    figure, axes = new_figure()
    by_k: dict[int, list[tuple[int, float]]] = {}
    for choice in choices:
        for k, tok_s in choice.by_k:
            by_k.setdefault(k, []).append((choice.concurrency, tok_s))
    for index, (k, series) in enumerate(sorted(by_k.items())):
        label = "no speculation" if k == 0 else f"K={k}"
        axes.plot(
            [c for c, _ in series],
            [v for _, v in series],
            marker="o",
            color="black" if k == 0 else PALETTE[index % len(PALETTE)],
            linestyle="--" if k == 0 else "-",
            label=label,
        )
    axes.set_xscale("log", base=2)
    levels = [c.concurrency for c in choices]
    if levels:
        axes.set_xticks(levels, [str(c) for c in levels])
        axes.minorticks_off()
    axes.set_xlabel("concurrent requests")
    axes.set_ylabel("best output tokens/s")
    axes.set_title(f"Speculation per load level ({short_name(draft)})")
    if by_k:
        axes.legend(fontsize=8, ncol=2)
    else:
        show_empty(axes, "one concurrency level only")
    return Chart(
        "levels",
        "Speculation per load level",
        save(figure, path),
        sum(len(s) for s in by_k.values()),
        "Best throughput measured with each K at each concurrency level.",
        figure=figure,
    )
