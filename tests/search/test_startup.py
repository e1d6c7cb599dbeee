"""Start-up prices per config family: the median of a study's own start-ups, else the prior."""

from __future__ import annotations

from dataclasses import replace

import pytest
from optuna.trial import TrialState

from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.results import Source
from tuner.search.startup import (
    LOAD_GB_PER_S,
    REUSE_FLOOR,
    REUSE_SHARE,
    START_PRIOR_S,
    Family,
    StartupPrices,
    reuse_share,
    start_prior_s,
)
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

TARGET = "Qwen/Qwen2.5-32B-Instruct-AWQ"
DRAFT = ServerConfig(
    TARGET,
    2,
    8192,
    0.9,
    2048,
    SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, "Qwen/Qwen2.5-0.5B-Instruct"),
)
NGRAM = replace(DRAFT, speculative=SpeculativeConfig(SpecMethod.NGRAM, 4, None, 4, 2))


def _record(number: int, server: ServerConfig, startup_s: float | None) -> TrialRecord:
    return TrialRecord(
        number=number,
        state=TrialState.COMPLETE,
        server=server,
        trial_temperature=0.0,
        status=TrialStatus.OK,
        source=Source.MEASURED,
        restarted=startup_s is not None,
        startup_s=startup_s,
    )


def test_a_family_is_its_target_tp_size_and_method() -> None:
    assert Family.of(DRAFT) == Family(TARGET, 2, SpecMethod.DRAFT_MODEL)
    # K, memory settings and the batch size leave the family as it is; TP and method do not.
    same = replace(DRAFT, gpu_memory_utilization=0.8, max_num_batched_tokens=1024)
    assert Family.of(same) == Family.of(DRAFT)
    assert Family.of(replace(DRAFT, tensor_parallel_size=1)) != Family.of(DRAFT)
    assert Family.of(NGRAM) != Family.of(DRAFT)


def test_each_family_is_priced_by_the_median_of_its_own_start_ups() -> None:
    found = [
        _record(0, DRAFT, 300.0),
        _record(1, DRAFT, 120.0),
        _record(2, replace(DRAFT, gpu_memory_utilization=0.8), 900.0),  # a cold first start
        _record(3, DRAFT, None),  # reused the running server: no start-up
        _record(4, NGRAM, 80.0),
        _record(5, NGRAM, 100.0),
    ]
    prices = StartupPrices.of(found)
    assert prices.medians() == {Family.of(DRAFT): 300.0, Family.of(NGRAM): 90.0}
    draft = prices.price(DRAFT)
    assert (draft.seconds, draft.trials, draft.source) == (300.0, 3, Source.MEASURED)
    assert draft.describe() == "measured, median of 3 start-ups"
    # A family the study never started is priced by the prior: the engine, then the weights.
    other = replace(DRAFT, tensor_parallel_size=1)
    prior = prices.price(other)
    assert not prior.measured and prior.describe() == "prior"
    assert prior.seconds == pytest.approx(start_prior_s(other))
    assert prior.seconds > START_PRIOR_S  # 32B of weights at LOAD_GB_PER_S on one GPU
    assert start_prior_s(DRAFT) < start_prior_s(other)  # two GPUs load half each
    assert LOAD_GB_PER_S > 0


def test_a_study_without_timed_start_ups_is_priced_by_the_prior() -> None:
    simulated = [replace(_record(0, DRAFT, None), source=Source.SIMULATED, restarted=True)]
    prices = StartupPrices.of(simulated)
    assert prices.medians() == {}
    assert prices.price(DRAFT).seconds == pytest.approx(start_prior_s(DRAFT))


def test_a_change_that_reuses_the_server_may_fall_further_short_the_dearer_a_start_up() -> None:
    # No start-up to save: the share a trial on a new server must reach.
    assert reuse_share(0.0, 300.0) == pytest.approx(REUSE_SHARE)
    # A start-up as long as the benchmark: twice the shortfall for the same GPU time.
    assert reuse_share(300.0, 300.0) == pytest.approx(1 - 2 * (1 - REUSE_SHARE))
    assert reuse_share(600.0, 300.0) < reuse_share(300.0, 300.0)
    assert reuse_share(3600.0, 60.0) == REUSE_FLOOR  # never further than the floor
