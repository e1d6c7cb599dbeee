"""What the simulator predicts a trial measures: what ``--plan`` prices and a goodput warm start
ranks.

A trial measures the pairs of its workload, or in a goodput study climbs its request-rate steps
(each step at every temperature, up until one misses a limit, then once between): the pairs of
:func:`tuner.trial.traffic.trial_pairs`, which :func:`predicted_traffic` takes too. Here each
pair is the simulator's noise-free prediction (:func:`predicted_pairs`) instead of a
measurement.
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
from tuner.trial.traffic import trial_pairs

__all__ = [
    "bench_seconds",
    "predicted_goodput",
    "predicted_pairs",
    "predicted_traffic",
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
                version=space.version,
            ),
        )
        for pair in pairs
    ]


def predicted_traffic(
    space: SearchSpace, server: ServerConfig, workload: WorkloadSpec
) -> list[tuple[Condition, TrialResult]]:
    """The pairs a trial of ``server`` would measure on ``workload``
    (:func:`~tuner.trial.traffic.trial_pairs`: its workload's, or in a goodput study its
    climb), each predicted noise-free by the simulator.

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    results: list[TrialResult] = []
    done: list[Condition] = []
    for pair in trial_pairs(workload, Limits.of(space), results, done):
        ((_, result),) = predicted_pairs(space, server, workload, [pair])
        results.append(result)
        done.append(pair)
    return list(zip(done, results, strict=True))


def predicted_goodput(
    space: SearchSpace, server: ServerConfig, workload: WorkloadSpec
) -> tuple[float, float]:
    """(goodput, p95 TTFT at its step) of a goodput study's climb (:func:`predicted_traffic`);
    TTFT inf when no step passed.

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    conditions, results = zip(*predicted_traffic(space, server, workload), strict=True)
    goodput, ttft = score_goodput(results, conditions, Limits.of(space)).values
    return goodput, ttft if goodput > 0 else math.inf


def predicted_trial(space: SearchSpace, config: TrialConfig) -> list[tuple[Condition, TrialResult]]:
    """The pairs a trial of ``config`` measures, predicted (:func:`predicted_traffic`).

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    return predicted_traffic(space, config.server, config.client.workload)


def bench_seconds(workload: WorkloadSpec, pairs: Iterable[tuple[Condition, TrialResult]]) -> float:
    """The seconds a benchmark of ``pairs`` takes, each pair's warm-up requests included."""
    bench = 0.0
    for condition, result in pairs:
        # The warm-up requests take about as long as measured ones, a slot's share each.
        slots = min(condition.concurrency, workload.requests)
        per_request = result.duration_s * slots / max(1, workload.requests)
        bench += result.duration_s + workload.warmup * per_request
    return bench
