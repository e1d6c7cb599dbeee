"""Measures one running server at every (concurrency, temperature) pair of the traffic.

The pairs come from the workload (:attr:`~tuner.config.workload.WorkloadSpec.conditions`), level
by level; the temperature is request-side, so the server is never restarted between them.
Measuring stops early once the trial can no longer count: more requests failed than the space
allows, or the server stopped answering (a request that timed out without a token, or a later
pair where nothing succeeded, or where the server died other than out of memory, after earlier
pairs had been served: this config breaks the server under load, which the ``errors``
constraint tells the sampler; a server that fails at the first pair is a fault, a FAIL). Each
pair gets its own seed, so prompts differ from pair to pair.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tuner.bench.loadgen import STALLED
from tuner.config.trial import TrialConfig
from tuner.config.workload import Condition
from tuner.errors import FailureKind, MeasurementError, StartupFailure
from tuner.results import TrialResult
from tuner.trial.backends import Backend
from tuner.trial.scoring import failed_share

__all__ = ["Traffic", "measure_traffic"]

# Seeds of a trial's pairs are this far apart: a trial's seeds never meet the next trial's.
_PAIR_STRIDE = 7919


@dataclass(frozen=True)
class Traffic:
    """What measuring the traffic produced.

    Attributes:
        results: one per measured pair, in the order of ``conditions``.
        conditions: the pairs measured (a prefix of the workload's when measuring stopped).
        broken: why measuring stopped before the last pair; None when every pair ran.
        unrecorded: requests of a pair that produced no result (the server died in it), all
            counted as failed.
    """

    results: tuple[TrialResult, ...]
    conditions: tuple[Condition, ...]
    broken: str | None = None
    unrecorded: int = 0

    @property
    def lost_requests(self) -> bool:
        """Whether any request failed (the server is then not trusted for the next trial)."""
        return self.broken is not None or any(r.errors for r in self.results)


def measure_traffic(
    backend: Backend, config: TrialConfig, seed: int, max_failed_share: float = 0.0
) -> Traffic:
    """Measures the running server at each pair of ``config``'s workload.

    Raises:
        MeasurementError: the first pair produced nothing (an infrastructure fault).
    """
    workload = config.client.workload
    results: list[TrialResult] = []
    done: list[Condition] = []
    for index, condition in enumerate(workload.conditions):
        pair_seed = seed * _PAIR_STRIDE + index
        pair = replace(
            config,
            client=replace(
                config.client,
                temperature=condition.temperature,
                workload=replace(workload, seed=workload.seed + pair_seed),
            ),
        )
        try:
            result = backend.measure(pair, condition.concurrency, pair_seed)
        except (MeasurementError, StartupFailure) as exc:
            if not results or (isinstance(exc, StartupFailure) and exc.kind is FailureKind.OOM):
                raise
            where = f"at concurrency {condition.concurrency}, temperature {condition.temperature:g}"
            return Traffic(tuple(results), tuple(done), f"{where}: {exc}", workload.requests)
        results.append(result)
        done.append(condition)
        if any(STALLED in (q.error or "") for q in result.requests):
            return Traffic(tuple(results), tuple(done), STALLED)
        if failed_share(results) > max_failed_share:
            break  # the trial cannot count any more: measuring on would cost time only
    return Traffic(tuple(results), tuple(done))
