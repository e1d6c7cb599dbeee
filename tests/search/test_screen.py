"""The screen both the warm start and the twin predict on: its grid, filter, order and traffic."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import cast

import optuna
import pytest

from tuner.config.space import load_space
from tuner.search.screen import Screen, Setting, screened_traffic
from tuner.search.strategy import _StagedScreen
from tuner.search.twin_screen import TwinScreen

_ROOT = Path(__file__).parents[2]
# Searches the temperature, and K only where there is a draft.
SPACE_32B = load_space(str(_ROOT / "benchmarks" / "held_out_space.yaml"))
# Scored on a mix of 1, 8 and 32 requests in flight.
SPACE_MIXED = load_space(str(_ROOT / "tests" / "sim" / "twin" / "spaces" / "mixed-14b-4090x1.yaml"))


def test_every_point_is_the_config_its_params_suggest() -> None:
    # The params a screen enqueues must make the very config it predicted, or a trial would
    # measure another point than the one ranked.
    screen = Screen(SPACE_32B)
    assert len(screen.temperatures) > 1
    assert list(screen.temperatures) == sorted(screen.temperatures)
    assert screen.tail_prompt > SPACE_32B.workload.input_tokens
    for point in itertools.islice(screen.points(), 0, None, 97):
        params = screen.params(*point)
        trial = cast(optuna.Trial, optuna.trial.FixedTrial(params))
        assert SPACE_32B.suggest(trial) == screen.config(*point)


def test_both_screens_screen_the_same_grid() -> None:
    grid = Screen(SPACE_MIXED)
    for screen in (TwinScreen(SPACE_MIXED), _StagedScreen(SPACE_MIXED)):
        assert screen.arms == grid.arms
        assert sorted(screen.settings) == sorted(grid.settings)  # the twin's in its own order
        assert screen.temperatures == grid.temperatures
        assert screen.tail_prompt == grid.tail_prompt


def test_the_memory_filter_keeps_the_margin_in_grid_order() -> None:
    screen = Screen(SPACE_MIXED)

    def headroom(setting: Setting) -> float:  # more memory to spare at a lower utilization
        return 1.0 - setting[0]

    safe = screen.settings_leaving(headroom, 0.1)
    assert safe
    assert list(safe) == [s for s in screen.settings if 1.0 - s[0] >= 0.1]
    assert all(room == pytest.approx(1.0 - s[0]) for s, room in safe.items())
    assert screen.settings_leaving(headroom, 1.0) == {}


def test_best_first_puts_the_ttft_limit_before_speed() -> None:
    screen = Screen(SPACE_MIXED)
    limit = SPACE_MIXED.ttft_limit_ms
    # (throughput, p95 TTFT, tail prompt's p95 TTFT, GiB to spare)
    over = (900.0, limit + 1, limit + 1, 5.0)
    tail_over = (800.0, limit - 1, limit + 1, 5.0)
    slow = (100.0, limit - 1, limit - 1, 5.0)
    fast_late = (200.0, limit - 1, limit - 1, 5.0)
    fast_soon = (200.0, limit - 1, limit / 2, 1.0)
    fast_soon_safer = (200.0, limit - 1, limit / 2, 2.0)
    points = [over, tail_over, slow, fast_late, fast_soon, fast_soon_safer]
    ranked = screen.best_first(points, lambda p: p)
    assert ranked == [fast_soon_safer, fast_soon, fast_late, slow, tail_over, over]


def test_screened_traffic_is_the_trials_pairs_and_stops_when_asked() -> None:
    screen = Screen(SPACE_MIXED)
    arm = next(a for a in screen.arms if a.draft != "none")
    config = screen.config(arm, screen.settings[0], screen.temperatures[0])
    draft = SPACE_MIXED.draft_model(arm.draft)
    workload = config.client.workload
    assert len(workload.conditions) > 1
    first = next(screened_traffic(SPACE_MIXED, config, draft))  # predicts the first pair only
    assert first[0] == workload.conditions[0]
    traffic = list(screened_traffic(SPACE_MIXED, config, draft))
    assert [c for c, _ in traffic] == list(workload.conditions)
    assert [r.concurrency for _, r in traffic] == [c.concurrency for c in workload.conditions]
    assert sum(c.weight for c, _ in traffic) == pytest.approx(1.0)
    assert all(r.output_tok_s > 0 for _, r in traffic)
