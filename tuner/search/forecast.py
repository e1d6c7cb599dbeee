"""What the simulator predicts a trial measures: what ``--plan`` prices and a goodput warm start
ranks.

A trial measures the pairs of its workload (:func:`predicted_pairs`), or in a goodput study
climbs its request-rate steps (:mod:`tuner.trial.traffic`: each step at every temperature, up
until one misses a limit, then once between; :func:`predicted_climb`). Here each pair is the
simulator's noise-free prediction instead of a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from tuner.config.space import SearchSpace
from tuner.config.trial import ServerConfig, TrialConfig, load_draft
from tuner.config.workload import Condition, WorkloadSpec
from tuner.results import TrialResult
from tuner.sim.virtual_time import predict
from tuner.trial.scoring import Limits, score_goodput
from tuner.trial.traffic import climb_pairs

__all__ = [
    "bench_seconds",
    "predicted_climb",
    "predicted_goodput",
    "predicted_pairs",
    "predicted_trial",
]


def predicted_pairs(
    space: SearchSpace, server: ServerConfig, workload: WorkloadSpec, pairs: Iterable[Condition]
) -> list[tuple[Condition, TrialResult]]:
    """Each pair as the simulator predicts it (a goodput step at its rate), noise-free.

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    draft = load_draft(server)
    return [
        (
            pair,
            predict(
                space.hardware,
                space.target,
                draft,
                server,
                pair.sampling_temperature,
                replace(workload, request_rate=pair.request_rate or workload.request_rate),
                pair.concurrency,
            ),
        )
        for pair in pairs
    ]


def predicted_climb(
    space: SearchSpace, server: ServerConfig, workload: WorkloadSpec
) -> list[tuple[Condition, TrialResult]]:
    """The goodput climb a trial of ``server`` would make (:mod:`tuner.trial.traffic`), each
    pair predicted noise-free by the simulator.

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    results: list[TrialResult] = []
    done: list[Condition] = []
    for pair in climb_pairs(workload, Limits.of(space), results, done):
        ((_, result),) = predicted_pairs(space, server, workload, [pair])
        results.append(result)
        done.append(pair)
    return list(zip(done, results, strict=True))


def predicted_goodput(
    space: SearchSpace, server: ServerConfig, workload: WorkloadSpec
) -> tuple[float, float]:
    """(goodput, p95 TTFT at its step) of :func:`predicted_climb`; TTFT inf when no step
    passed.

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    conditions, results = zip(*predicted_climb(space, server, workload), strict=True)
    goodput, ttft = score_goodput(results, conditions, Limits.of(space)).values
    return goodput, ttft if goodput > 0 else math.inf


def predicted_trial(space: SearchSpace, config: TrialConfig) -> list[tuple[Condition, TrialResult]]:
    """The pairs a trial of ``config`` measures, predicted: its workload's, or its climb.

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    server, workload = config.server, config.client.workload
    if space.goodput:
        return predicted_climb(space, server, workload)
    return predicted_pairs(space, server, workload, workload.conditions)


def bench_seconds(workload: WorkloadSpec, pairs: Iterable[tuple[Condition, TrialResult]]) -> float:
    """The seconds a benchmark of ``pairs`` takes, each pair's warm-up requests included."""
    bench = 0.0
    for condition, result in pairs:
        # The warm-up requests take about as long as measured ones, a slot's share each.
        slots = min(condition.concurrency, workload.requests)
        per_request = result.duration_s * slots / max(1, workload.requests)
        bench += result.duration_s + workload.warmup * per_request
    return bench
