"""Benchmark runs in virtual time: the simulator's answer to the load generator.

:func:`simulate` plays the benchmark a real trial runs (warm-up requests, then the measured ones,
closed loop or Poisson arrivals) against the :class:`~tuner.sim.scheduler.Scheduler`, moving a
virtual clock by each step's duration, so a 30-trial study takes seconds. It returns the same
:class:`~tuner.results.TrialResult` as a measured run, with per-request timelines, speculative
counters (deltas over the measured window, as from /metrics), peak KV usage and preemptions.
:func:`predict` runs the same scheduler without noise, every draft accepting its expected share.

Both take a :class:`Physics`: the step-time, acceptance and memory models the run obeys. The
default is the shipped one (:class:`Calibrated` with the shipped constants); a study's fitted
twin (:mod:`tuner.sim.twin`), the reference benchmark's refit or a benchmark's perturbed truth
passes its own. Both also take the vLLM version that serves (None: the newest): its vLLM
engine generation (V0 or V1) sets the per-step costs.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.methods import MethodFamily, method_of
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_version import VllmVersion
from tuner.config.workload import WorkloadSpec
from tuner.errors import FailureKind, StartupFailure
from tuner.results import RequestRecord, Source, SpecDecodeStats, TrialResult
from tuner.sim.acceptance import SHIPPED_ACCEPTANCE, AcceptanceConstants, shipped_rates
from tuner.sim.calibration import SHIPPED_STEPS, StepConstants
from tuner.sim.memory import MemoryEstimate, estimate_memory
from tuner.sim.perfmodel import PerfModel
from tuner.sim.power import EnergyMeter, PowerModel
from tuner.sim.scheduler import Scheduler, StepResult

__all__ = [
    "API_IN_S",
    "API_OUT_S",
    "SHIPPED",
    "Calibrated",
    "Physics",
    "Scheduler",
    "StepResult",
    "predict",
    "simulate",
]

# Client to scheduler: HTTP, chat template, tokenization. Back: detokenize, SSE frame.
API_IN_S = 0.004
API_OUT_S = 0.002
API_JITTER_S = 0.002  # seeded runs: the network and the API server's event loop vary
# Prompts of a seeded run vary this much (uniformly, relative) around the workload's mean.
INPUT_SPREAD = 0.1


class Physics(Protocol):
    """The models a simulated run obeys: step times, acceptance, memory."""

    def perf_model(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        version: VllmVersion | None = None,
    ) -> PerfModel:
        """The step-time model of ``server`` (``draft`` only when it speculates with one)."""
        ...

    def position_rates(
        self,
        target: ModelSpec,
        draft: ModelSpec | None,
        method: SpecMethod,
        prompt_set: str,
        temperature: float,
        k: int,
        *,
        speculative: SpeculativeConfig | None = None,
    ) -> tuple[float, ...]:
        """Conditional acceptance of each of the ``k`` drafted positions (``speculative``: the
        server's drafting and verification options)."""
        ...

    def memory(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        jitter_gib: float = 0.0,
        *,
        version: VllmVersion | None = None,
    ) -> MemoryEstimate:
        """One GPU's memory under ``server`` on vLLM ``version`` (None: the newest known; see
        :func:`tuner.sim.memory.estimate_memory`)."""
        ...


@dataclass(frozen=True)
class Calibrated:
    """The simulator's own models under a set of constants (default: the shipped ones)."""

    steps: StepConstants = SHIPPED_STEPS
    acceptance: AcceptanceConstants = SHIPPED_ACCEPTANCE

    def perf_model(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        version: VllmVersion | None = None,
    ) -> PerfModel:
        return PerfModel(hardware, target, draft, server, version=version, steps=self.steps)

    def position_rates(
        self,
        target: ModelSpec,
        draft: ModelSpec | None,
        method: SpecMethod,
        prompt_set: str,
        temperature: float,
        k: int,
        *,
        speculative: SpeculativeConfig | None = None,
    ) -> tuple[float, ...]:
        return shipped_rates(
            target,
            draft,
            method,
            prompt_set,
            temperature,
            k,
            self.acceptance,
            speculative=speculative,
        )

    def memory(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        jitter_gib: float = 0.0,
        *,
        version: VllmVersion | None = None,
    ) -> MemoryEstimate:
        return estimate_memory(hardware, target, draft, server, jitter_gib, version=version)


SHIPPED: Physics = Calibrated()


@dataclass
class _Request:
    prompt: int
    start: float = 0.0
    chunks: list[float] = field(default_factory=list)
    tokens: int = 0
    end: float | None = None
    error: str | None = None

    def record(self) -> RequestRecord:
        ok = self.error is None
        return RequestRecord(
            start=self.start,
            first_token=self.chunks[0] if self.chunks else None,
            end=self.end,
            chunk_times=tuple(self.chunks),
            prompt_tokens=self.prompt,
            completion_tokens=self.tokens if ok else None,
            error=self.error,
        )


class _Run:
    """The client side: sends requests, tracks the virtual clock, drives the scheduler."""

    def __init__(
        self,
        scheduler: Scheduler,
        workload: WorkloadSpec,
        temperature: float,
        concurrency: int,
        rng: random.Random | None,
    ) -> None:
        self.scheduler = scheduler
        self.workload = workload
        self.temperature = temperature
        self.concurrency = max(1, concurrency)
        self.rng = rng
        self.now = 0.0
        self.sent = 0  # requests sent so far: the next request's id in the scheduler
        self.peak_kv = 0.0
        self.meter: EnergyMeter | None = None  # set for the measured phase where power is asked

    def _prompt_tokens(self) -> int:
        mean = self.workload.input_tokens
        if self.rng is None:
            return mean
        return max(1, round(mean * self.rng.uniform(1 - INPUT_SPREAD, 1 + INPUT_SPREAD)))

    def _latency(self, base: float) -> float:
        return base + (self.rng.uniform(0.0, API_JITTER_S) if self.rng else 0.0)

    def phase(self, count: int, rate: float | None) -> list[_Request]:
        """Runs ``count`` requests to completion; returns them in sending order."""
        t0 = self.now
        ready = [t0] * count  # earliest send time of each request
        if rate is not None and rate > 0:
            t = t0
            for i in range(count):
                ready[i] = t
                t += self.rng.expovariate(rate) if self.rng else 1.0 / rate
        batch = [_Request(self._prompt_tokens()) for _ in range(count)]
        first_id = self.sent
        self.sent += count
        slots = [t0] * self.concurrency  # when each client slot is next free
        arrivals: list[tuple[float, int]] = []
        next_index = 0

        def send() -> None:
            nonlocal next_index
            while next_index < count and slots:
                request = batch[next_index]
                request.start = max(ready[next_index], heapq.heappop(slots))
                heapq.heappush(arrivals, (request.start + self._latency(API_IN_S), next_index))
                next_index += 1

        def finish(index: int, at: float) -> None:
            batch[index].end = at
            heapq.heappush(slots, at)
            send()

        send()
        while True:
            while arrivals and arrivals[0][0] <= self.now:
                arrived, index = heapq.heappop(arrivals)
                request = batch[index]
                try:
                    self.scheduler.add_request(
                        first_id + index,
                        request.prompt,
                        self.workload.output_tokens,
                        self.temperature,
                        self.workload.prompt_set,
                    )
                except ValueError as exc:  # the API server answers HTTP 400 at once
                    request.error = str(exc)
                    finish(index, arrived + self._latency(API_OUT_S))
            if self.scheduler.has_work:
                self._step(batch, first_id, finish)
            elif arrivals:
                self.now = max(self.now, arrivals[0][0])
            else:
                return batch

    def _step(
        self, batch: list[_Request], first_id: int, finish: Callable[[int, float], None]
    ) -> None:
        result = self.scheduler.step()
        self.now += result.duration_s
        self.peak_kv = max(self.peak_kv, result.kv_usage)
        if self.meter is not None and result.shape is not None:
            self.meter.add(self.scheduler.model.step_work(result.shape), result.duration_s)
        for rid, tokens in result.emitted.items():
            request = batch[rid - first_id]
            request.chunks.append(self.now + self._latency(API_OUT_S))
            request.tokens += tokens
        for rid in result.finished:
            finish(rid - first_id, batch[rid - first_id].chunks[-1])


def _delta(after: SpecDecodeStats | None, before: SpecDecodeStats | None) -> SpecDecodeStats | None:
    if after is None or before is None:
        return None
    return SpecDecodeStats(
        drafts=after.drafts - before.drafts,
        draft_tokens=after.draft_tokens - before.draft_tokens,
        accepted_tokens=after.accepted_tokens - before.accepted_tokens,
        accepted_per_position=tuple(
            a - b
            for a, b in zip(after.accepted_per_position, before.accepted_per_position, strict=True)
        ),
    )


def _run(  # noqa: PLR0913  (the simulated step takes each cost term)
    hardware: Hardware,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    temperature: float,
    workload: WorkloadSpec,
    concurrency: int,
    seed: int | None,
    physics: Physics,
    version: VllmVersion | None,
    power: PowerModel | None,
) -> TrialResult:
    memory = physics.memory(hardware, target, draft, server, version=version)
    if not memory.fits:
        raise StartupFailure(FailureKind.OOM, memory.reason, log_tail=memory.reason)
    uses_draft = method_of(server.method).family is MethodFamily.DRAFT
    scheduler = Scheduler(
        hardware,
        target,
        draft,
        server,
        kv_tokens=memory.kv_tokens,
        seed=seed,
        perf=physics.perf_model(hardware, target, draft if uses_draft else None, server, version),
        rates=physics.position_rates,
    )
    rng = random.Random(f"client-{seed}") if seed is not None else None
    run = _Run(scheduler, workload, temperature, concurrency, rng)
    if workload.warmup > 0:
        run.phase(workload.warmup, None)
    before, preempted = scheduler.spec_stats(), scheduler.preemptions
    run.peak_kv = 0.0
    if power is not None:
        run.meter = EnergyMeter(power, server.tensor_parallel_size)
    measured = run.phase(workload.requests, workload.request_rate)
    ends = [r.end for r in measured if r.end is not None]
    start = min((r.start for r in measured), default=run.now)
    duration = max(ends, default=start) - start
    return TrialResult(
        source=Source.SIMULATED if seed is not None else Source.PREDICTED,
        concurrency=concurrency,
        duration_s=duration,
        requests=tuple(r.record() for r in measured),
        spec_decode=_delta(scheduler.spec_stats(), before),
        kv_cache_usage=run.peak_kv,
        preemptions=float(scheduler.preemptions - preempted),
        peak_memory_gib=(round(memory.peak_gib, 3),) * server.tensor_parallel_size,
        gpu=None if run.meter is None else run.meter.window(duration),
    )


def simulate(  # noqa: PLR0913  (the simulated step takes each cost term)
    hardware: Hardware,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    temperature: float,
    workload: WorkloadSpec,
    concurrency: int,
    seed: int,
    physics: Physics = SHIPPED,
    version: VllmVersion | None = None,
    power: PowerModel | None = None,
) -> TrialResult:
    """Runs the workload against the simulated server in virtual time, with seeded noise.

    Args:
        hardware: the GPUs.
        target: the served model.
        draft: the draft model when the server speculates with one, else None.
        server: the server config under test.
        temperature: sampling temperature of every request.
        workload: prompt set, lengths, request counts, warm-up and arrival rate (None: closed
            loop with ``concurrency`` requests in flight; a rate: Poisson arrivals, at most
            ``concurrency`` in flight).
        concurrency: requests in flight.
        seed: the same seed gives the same result, to the last digit.
        physics: the models the run obeys (default: the shipped ones).
        version: the vLLM release serving (None: the newest); it picks vLLM's V0 or V1 step costs.
        power: each GPU's power model (:func:`tuner.sim.power.power_model`); given, the result
            carries the measured window's modelled energy (``result.gpu``); None: no energy.

    Returns:
        A ``Source.SIMULATED`` result over the measured requests (warm-up excluded).

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    return _run(
        hardware,
        target,
        draft,
        server,
        temperature,
        workload,
        concurrency,
        seed,
        physics,
        version,
        power,
    )


def predict(  # noqa: PLR0913  (the simulated step takes each cost term)
    hardware: Hardware,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    temperature: float,
    workload: WorkloadSpec,
    concurrency: int,
    physics: Physics = SHIPPED,
    version: VllmVersion | None = None,
    power: PowerModel | None = None,
) -> TrialResult:
    """Like :func:`simulate` without noise: expected acceptance, mean prompt length, exact steps.

    Returns:
        A ``Source.PREDICTED`` result.

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    return _run(
        hardware,
        target,
        draft,
        server,
        temperature,
        workload,
        concurrency,
        None,
        physics,
        version,
        power,
    )
