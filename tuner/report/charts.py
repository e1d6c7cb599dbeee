"""The report's charts, drawn with matplotlib into PNG files.

Every chart marks each trial by outcome: feasible (filled circle), over the TTFT limit (orange
triangle), out of memory (red cross). OOM trials measured nothing, so where an axis needs a
measurement they sit on the zero line or the plot's edge and say so in the legend. Each
function returns a :class:`Chart` that says how many trials it drew, so a test (or a reader)
can tell an empty chart from a full one.

Figures are built with :class:`matplotlib.figure.Figure` and the Agg canvas directly: no
pyplot, no global state, no display needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tuner.analysis.confirmed import Confirmed
from tuner.analysis.levels import LevelChoice
from tuner.analysis.trials import Outcome, Point
from tuner.config.trial import SpecMethod

__all__ = [
    "Chart",
    "acceptance_chart",
    "importance_chart",
    "k_chart",
    "levels_chart",
    "memory_chart",
    "pareto_chart",
]

_STYLE = {
    Outcome.FEASIBLE: {"marker": "o", "color": "#1f77b4", "label": "feasible"},
    Outcome.OVER_TTFT: {"marker": "^", "color": "#ff7f0e", "label": "over TTFT limit"},
    Outcome.OVER_TPOT: {"marker": "<", "color": "#bcbd22", "label": "over TPOT limit"},
    Outcome.OVER_STREAM: {"marker": "v", "color": "#9467bd", "label": "over stream-gap limit"},
    Outcome.OOM: {"marker": "x", "color": "#d62728", "label": "OOM"},
    Outcome.LOST_REQUESTS: {"marker": "s", "color": "#7f7f7f", "label": "failed requests"},
}
# Measured and scored on their numbers, feasible or over a latency limit.
_MEASURED = (Outcome.FEASIBLE, Outcome.OVER_TTFT, Outcome.OVER_TPOT, Outcome.OVER_STREAM)
_PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


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


def _figure(width: float = 7.0, height: float = 4.4) -> tuple[Figure, Axes]:
    figure = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.grid(True, alpha=0.3)
    return figure, axes


def _save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def _empty(axes: Axes, text: str) -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, color="gray")


def _drafts(points: Sequence[Point]) -> dict[str, str]:
    names = sorted(
        {p.draft for p in points}, key=lambda d: (d != SpecMethod.NONE, d != SpecMethod.NGRAM, d)
    )
    return {d: _PALETTE[i % len(_PALETTE)] for i, d in enumerate(names)}


def _label(draft: str) -> str:
    return draft.rstrip("/").rsplit("/", 1)[-1]


def pareto_chart(
    points: Sequence[Point],
    confirmed: dict[int, Confirmed],
    ttft_limit_ms: float,
    path: Path,
    label: str = "output tokens/s",
) -> Chart:
    """Throughput against p95 TTFT: every trial by outcome, the feasible Pareto front, the
    TTFT limit, and confirmed configs with their 95 % intervals."""
    figure, axes = _figure()
    measured = [p for p in points if p.throughput is not None and p.p95_ttft_ms is not None]
    for outcome in _MEASURED:
        group = [p for p in measured if p.outcome is outcome]
        if group:
            style = _STYLE[outcome]
            axes.scatter(
                [_ttft(p) for p in group],
                [_tok(p) for p in group],
                marker=style["marker"],
                color=style["color"],
                label=f"{style['label']} ({len(group)})",
                alpha=0.8,
            )
    front = sorted((p for p in measured if p.on_front), key=lambda p: (_ttft(p), -_tok(p)))
    if front:
        axes.step(
            [_ttft(p) for p in front],
            [_tok(p) for p in front],
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
        _empty(axes, "no completed trials")
    else:
        axes.legend(fontsize=8, loc="best")
    return Chart(
        "pareto",
        "Pareto front: throughput against p95 TTFT",
        _save(figure, path),
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
    values = [_ttft(p) for p in measured]
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


def _tok(p: Point) -> float:
    return p.throughput or 0.0


def _ttft(p: Point) -> float:
    return p.p95_ttft_ms or 0.0


def k_chart(points: Sequence[Point], path: Path, label: str = "output tokens/s") -> Chart:
    """Throughput against K, one colour per draft (K = 0: no speculation)."""
    figure, axes = _figure()
    measured = [p for p in points if p.throughput is not None]
    colors = _drafts(measured)
    for draft, color in colors.items():
        group = [p for p in measured if p.draft == draft]
        axes.scatter(
            [p.k for p in group],
            [_tok(p) for p in group],
            color=color,
            alpha=0.6,
            label=_label(draft),
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
        _empty(axes, "no measured trials")
    return Chart(
        "k",
        "Throughput against K per draft",
        _save(figure, path),
        len(measured),
        "Every measured trial; lines join the best throughput at each K.",
        figure=figure,
    )


def acceptance_chart(points: Sequence[Point], path: Path) -> Chart:
    """Draft acceptance rate against sampling temperature, one colour per draft."""
    figure, axes = _figure()
    spec = [p for p in points if p.acceptance_rate is not None]
    colors = _drafts(spec)
    for draft, color in colors.items():
        pairs = [pair for p in spec if p.draft == draft for pair in _acceptance(p)]
        axes.scatter(
            [temperature for temperature, _ in pairs],
            [100.0 * rate for _, rate in pairs],
            color=color,
            alpha=0.7,
            label=_label(draft),
        )
    axes.set_xlabel("sampling temperature")
    axes.set_ylabel("draft acceptance (%)")
    axes.set_ylim(0, 100)
    axes.set_title("Acceptance against temperature")
    if spec:
        axes.legend(fontsize=8)
    else:
        _empty(axes, "no speculative trials measured")
    return Chart(
        "acceptance",
        "Acceptance against temperature",
        _save(figure, path),
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
    figure, axes = _figure()
    for outcome in _MEASURED:
        group = [p for p in points if p.outcome is outcome]
        if group:
            style = _STYLE[outcome]
            axes.scatter(
                [p.gpu_memory_utilization for p in group],
                [p.throughput or 0.0 for p in group],
                marker=style["marker"],
                color=style["color"],
                label=f"{style['label']} ({len(group)})",
                alpha=0.8,
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
    top = max((_tok(p) for p in points), default=1.0)
    axes.set_ylim(bottom=-0.04 * top)  # OOM markers on the zero line stay visible
    axes.set_xlabel("--gpu-memory-utilization")
    axes.set_ylabel(label)
    axes.set_title("Throughput against gpu-memory-utilization")
    if points:
        axes.legend(fontsize=8, loc="best")
    else:
        _empty(axes, "no completed trials")
    return Chart(
        "memory",
        "Throughput against gpu-memory-utilization",
        _save(figure, path),
        len(points),
        "OOM trials on the zero line; the shaded band starts at the lowest setting that ran "
        "out of memory (the boundary also depends on the draft and batch size).",
        figure=figure,
    )


def importance_chart(importances: dict[str, dict[str, float]], measured: int, path: Path) -> Chart:
    """Horizontal bars: each parameter's importance for throughput and for p95 TTFT, over the
    ``measured`` trials it was computed on."""
    figure, axes = _figure(7.0, 3.8)
    names = sorted({n for values in importances.values() for n in values})
    height = 0.8 / max(1, len(importances))
    for index, (target, values) in enumerate(importances.items()):
        axes.barh(
            [i + index * height for i in range(len(names))],
            [values.get(n, 0.0) for n in names],
            height=height,
            color=_PALETTE[index],
            label=target,
        )
    axes.set_yticks([i + height * (len(importances) - 1) / 2 for i in range(len(names))], names)
    axes.set_xlabel("importance (PED-ANOVA, sums to 1 per objective)")
    axes.set_title("Parameter importances")
    if importances:
        axes.legend(fontsize=8)
    else:
        _empty(axes, "too few trials for importances")
    return Chart(
        "importance",
        "Parameter importances",
        _save(figure, path),
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
    figure, axes = _figure()
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
            color="black" if k == 0 else _PALETTE[index % len(_PALETTE)],
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
    axes.set_title(f"Speculation per load level ({_label(draft)})")
    if by_k:
        axes.legend(fontsize=8, ncol=2)
    else:
        _empty(axes, "one concurrency level only")
    return Chart(
        "levels",
        "Speculation per load level",
        _save(figure, path),
        sum(len(s) for s in by_k.values()),
        "Best throughput measured with each K at each concurrency level.",
        figure=figure,
    )
