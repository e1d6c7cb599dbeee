"""The report's charts, read back from what they drew (matplotlib's artists after saving):
labels, axis ranges that fit the data, integer ticks for integers, acceptance per temperature,
importances over tuned parameters only. Each test pins one bug issue 23 found in a real report.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.lines import Line2D
from optuna.trial import TrialState

from tuner.analysis.trials import Outcome, Point, point
from tuner.config.space import SearchSpace, load_space
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.report import charts
from tuner.report.importance import param_importances
from tuner.results import Source
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
BASE = Point(
    number=0,
    outcome=Outcome.FEASIBLE,
    draft=DRAFT,
    k=4,
    gpu_memory_utilization=0.9,
    max_num_batched_tokens=2048,
    temperature=0.38,
    source=Source.SIMULATED,
    throughput=50.0,
    p95_ttft_ms=100.0,
    acceptance_rate=0.7,
    levels=((1, 50.0),),
)


def _axes(chart: charts.Chart) -> Axes:
    (axes,) = chart.figure.axes
    return axes


def _markers(axes: Axes) -> list[tuple[float, float]]:
    """Every (x, y) of the scatter markers the axes drew."""
    return [
        (round(x, 6), round(y, 6))
        for artist in axes.collections
        if isinstance(artist, PathCollection)
        for x, y in np.asarray(artist.get_offsets(), dtype=float).tolist()
    ]


def _legend(axes: Axes) -> list[str]:
    legend = axes.get_legend()
    assert legend is not None
    return [t.get_text() for t in legend.get_texts()]


def _xdata(line: Line2D) -> list[float]:
    return [float(x) for x in np.asarray(line.get_xdata(), dtype=float).tolist()]


def _varied(count: int, **fields: Any) -> list[Point]:
    """``count`` feasible points with K, memory, batch and throughput varied."""
    return [
        replace(
            BASE,
            number=i,
            k=1 + i % 8,
            gpu_memory_utilization=0.80 + 0.02 * (i % 9),
            max_num_batched_tokens=(1024, 2048, 4096)[i % 3],
            throughput=40.0 + (i * 7) % 23,
            p95_ttft_ms=90.0 + (i * 5) % 31,
            **fields,
        )
        for i in range(count)
    ]


def test_the_memory_chart_keeps_its_y_label_when_it_draws_oom_trials(tmp_path: Path) -> None:
    oom = replace(BASE, outcome=Outcome.OOM, throughput=None, p95_ttft_ms=None)
    drawn = [
        BASE,
        replace(oom, number=1, gpu_memory_utilization=0.98, oom_predicted=True),
        replace(oom, number=2, gpu_memory_utilization=0.96),
    ]
    chart = charts.memory_chart(drawn, tmp_path / "memory.png", "goodput req/s")
    axes = _axes(chart)
    assert axes.get_ylabel() == "goodput req/s"  # was "OOM at start-up", the loop's last label
    legend = _legend(axes)
    assert "OOM predicted (1)" in legend and "OOM at start-up (1)" in legend


def test_the_pareto_axis_fits_the_data_not_a_far_ttft_limit(tmp_path: Path) -> None:
    drawn = _varied(12)  # p95 TTFT 90-120 ms
    far = _axes(charts.pareto_chart(drawn, {}, 60_000.0, tmp_path / "far.png"))
    left, right = far.get_xlim()
    assert 0 <= left < 90 and 120 < right < 150  # the points spread over the axis
    assert "TTFT limit 60000 ms, off the chart" in _legend(far)
    assert not [line for line in far.get_lines() if _xdata(line) == [60_000.0] * 2]

    near = _axes(charts.pareto_chart(drawn, {}, 125.0, tmp_path / "near.png"))
    assert near.get_xlim()[1] > 125.0  # a limit beside the data is drawn where it is
    limit = [line for line in near.get_lines() if _xdata(line) == [125.0, 125.0]]
    assert limit and limit[0].get_linestyle() == "--"


def test_k_ticks_are_whole_numbers(tmp_path: Path) -> None:
    # Two adjacent K values: matplotlib's own ticks would read 2.0, 2.2, 2.4, ...
    chart = charts.k_chart([replace(p, k=2 + p.number % 2) for p in _varied(6)], tmp_path / "k.png")
    ticks = [t for t in _axes(chart).get_xticklabels() if t.get_text()]
    lo, hi = _axes(chart).get_xlim()
    shown = [t for t in ticks if lo <= t.get_position()[0] <= hi]
    assert len(shown) >= 2
    for tick in shown:
        assert float(tick.get_position()[0]).is_integer(), tick.get_text()
        int(tick.get_text().replace("\N{MINUS SIGN}", "-"))  # "2", never "2.5"


def _mixed_record(number: int, accept_02: float, accept_08: float) -> TrialRecord:
    """A trial measured on the default space's temperature mix (0.2: 70 %, 0.8: 30 %)."""
    server = ServerConfig(
        "Qwen/Qwen2.5-32B-Instruct-AWQ",
        2,
        8192,
        0.9,
        2048,
        SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, DRAFT),
    )
    levels = tuple(
        {"concurrency": c, "temperature": t, "weight": w * share, "acceptance_rate": a}
        for c, share in ((1, 0.5), (8, 0.5))
        for t, w, a in ((0.2, 0.7, accept_02), (0.8, 0.3, accept_08))
    )
    return TrialRecord(
        number=number,
        state=TrialState.COMPLETE,
        server=server,
        trial_temperature=0.38,  # the mix's mean, which the old chart drew every point at
        status=TrialStatus.OK,
        source=Source.SIMULATED,
        values=(100.0, 200.0),
        constraints={"oom": -1.0, "ttft_slo": -1.0, "errors": -1.0},
        summary=levels[0],
        levels=levels,
        temperature_mix=((0.2, 0.7), (0.8, 0.3)),
    )


def test_acceptance_is_drawn_at_each_temperature_measured(tmp_path: Path) -> None:
    drawn = [p for p in (point(_mixed_record(n, 0.8 - n / 20, 0.4)) for n in range(3)) if p]
    axes = _axes(charts.acceptance_chart(drawn, tmp_path / "acceptance.png"))
    drawn_at = _markers(axes)
    assert {x for x, _ in drawn_at} == {0.2, 0.8}  # was every point at 0.38
    assert sorted(y for _, y in drawn_at) == sorted([40.0] * 3 + [80.0, 75.0, 70.0])


def _default_space() -> SearchSpace:
    return load_space("default")  # a temperature mix: the study does not tune it


def test_importances_rank_only_what_the_space_tunes(tmp_path: Path) -> None:
    space = _default_space()
    assert not space.tunes_temperature
    drawn = _varied(12, draft=DRAFT) + [
        replace(p, number=100 + p.number, draft="none", k=0, throughput=30.0) for p in _varied(4)
    ]
    chart = charts.importance_chart(
        param_importances(drawn, space), len(drawn), tmp_path / "importance.png"
    )
    names = {t.get_text() for t in _axes(chart).get_yticklabels()}
    assert names == {"draft", "K", "gpu_memory_utilization", "max_num_batched_tokens"}
    fixed = replace(space, max_num_batched_tokens=(2048,))  # one value: nothing to rank
    assert set(next(iter(param_importances(drawn, fixed).values()))) == {
        "draft",
        "K",
        "gpu_memory_utilization",
    }
