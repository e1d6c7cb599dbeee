"""Speculation per load level: best K per concurrency, and vLLM's batch-size table."""

from __future__ import annotations

from dataclasses import replace

from tests.testbed.results import StudyCopy
from tuner.analysis.levels import (
    LevelChoice,
    batch_size_table,
    best_by_draft,
    measured_levels,
    speculation_by_level,
)
from tuner.analysis.trials import Outcome, Point, points
from tuner.config.vllm_args import has_per_batch_size, parse_version

DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"


def _point(number: int, draft: str, k: int, levels: dict[int, float], **kw: object) -> Point:
    base = Point(
        number=number,
        outcome=Outcome.FEASIBLE,
        draft=draft,
        k=k,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        temperature=0.1,
        source="simulated",  # type: ignore[arg-type]  # the str a study stores; Source is a StrEnum
        throughput=levels[min(levels)],
        p95_ttft_ms=200.0,
        acceptance_rate=0.7 if k else None,
        levels=tuple(sorted(levels.items())),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


POINTS = [
    _point(0, "none", 0, {1: 28.0, 8: 190.0, 32: 490.0}),
    _point(1, DRAFT, 4, {1: 60.0, 8: 285.0, 32: 440.0}),
    _point(2, DRAFT, 2, {1: 50.0, 8: 290.0, 32: 470.0}),
    _point(3, "ngram", 5, {1: 45.0, 8: 200.0, 32: 300.0}),
    # Ran out of memory: measured nothing, whatever it would have done.
    _point(4, DRAFT, 8, {1: 99.0, 8: 999.0, 32: 999.0}, outcome=Outcome.OOM, throughput=None),
]


def test_best_k_per_level_switches_speculation_off_where_it_loses() -> None:
    choices = speculation_by_level(POINTS, DRAFT)
    assert [(c.concurrency, c.k, c.trial) for c in choices] == [(1, 4, 1), (8, 2, 2), (32, 0, 0)]
    assert choices[2].baseline_tok_s == 490.0
    assert dict(choices[0].by_k) == {0: 28.0, 2: 50.0, 4: 60.0}  # the OOM trial is left out
    assert measured_levels(POINTS) == [1, 8, 32]


def test_without_a_draft_there_is_nothing_to_switch_on() -> None:
    assert {c.k for c in speculation_by_level(POINTS, "none")} == {0}


def test_best_by_draft_lists_every_draft_per_level() -> None:
    table = best_by_draft(POINTS)
    assert table[32] == {"none": (0, 490.0, 0), DRAFT: (2, 470.0, 2), "ngram": (5, 300.0, 3)}


def _choice(concurrency: int, k: int) -> LevelChoice:
    return LevelChoice(concurrency, k, 1.0, 0, ())


def test_batch_size_table_splits_at_geometric_means_and_merges_equal_k() -> None:
    assert batch_size_table([_choice(1, 4), _choice(8, 2), _choice(32, 0)]) == [
        (1, 2, 4),
        (3, 16, 2),
        (17, 32, 0),
    ]
    assert batch_size_table([_choice(1, 4), _choice(8, 4), _choice(32, 0)]) == [
        (1, 16, 4),
        (17, 32, 0),
    ]
    # Neighbouring levels: the lower one keeps its own batch size.
    assert batch_size_table([_choice(2, 3), _choice(3, 0)]) == [(1, 2, 3), (3, 3, 0)]
    # A first level above 1 still starts the table at batch size 1, as vLLM requires.
    assert batch_size_table([_choice(4, 3), _choice(64, 0)])[0] == (1, 16, 3)
    assert batch_size_table([]) == []


def test_per_batch_size_exists_from_vllm_0_24() -> None:
    assert not has_per_batch_size(parse_version("0.23.1"))
    assert has_per_batch_size(parse_version("0.24.0"))
    assert has_per_batch_size(parse_version("0.32.0+cpu"))
    assert has_per_batch_size(parse_version("latest"))


def test_the_simulated_study_loses_with_speculation_at_128_requests(levels: StudyCopy) -> None:
    study, _ = levels.open()
    found = points(study)
    assert {p.outcome for p in found} >= {Outcome.FEASIBLE, Outcome.OOM}
    choices = speculation_by_level(found, DRAFT)
    assert [c.concurrency for c in choices] == [1, 8, 128]
    assert choices[0].k > 0  # one request: speculation wins, as in the reference table
    assert choices[-1].k == 0  # 128 requests: the compute is used, speculation loses
    assert choices[-1].output_tok_s > max(v for k, v in choices[-1].by_k if k > 0)
