"""Runs one trial: memory pre-screen, (re)start the server if its config changed, measure.

The pre-screen runs before any launch on every backend: a config predicted not to fit, by more
than the memory model's error or by what this runner's own start-ups showed
(:class:`tuner.sim.oom_screen.OomScreen`), is recorded as "OOM predicted" and costs nothing.
The running server is reused while the next trial's ServerConfig is equal, so request-side
changes (temperature, workload) never restart; a server that failed requests is never reused
(it may be dead or broken).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from tuner.bench.quality import QualityCheck, check_requests, compare
from tuner.catalog.gpus import Hardware
from tuner.catalog.models import load_model
from tuner.config.prompts import PromptRequest
from tuner.config.schema import QualityModel
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig, load_draft
from tuner.config.verification import Verification
from tuner.config.vllm_args import heterogeneous_vocab
from tuner.config.vllm_runner import RunnerForecast, predict_runner
from tuner.config.vllm_version import NEWEST_KNOWN, VllmVersion
from tuner.config.workload import Condition
from tuner.errors import ConfigError, FailureKind, MeasurementError, StartupFailure
from tuner.launch.served import ServedFacts, read_served
from tuner.results import Endpoint, Source, TrialResult
from tuner.sim.memory import MemoryEstimate, estimate_memory
from tuner.sim.oom_screen import OomScreen, memory_slacks
from tuner.trial.backends import Backend
from tuner.trial.race import Race
from tuner.trial.rounds import PairMeasure
from tuner.trial.scoring import (
    Limits,
    Score,
    TrialStatus,
    score,
    score_goodput,
    with_quality,
)
from tuner.trial.traffic import measure_traffic

__all__ = ["PowerSetter", "TrialOutcome", "TrialRunner", "predict_memory"]


class PowerSetter(Protocol):
    """Sets every GPU's power limit (:class:`tuner.study.power_limit.PowerLimits`)."""

    def apply(self, watts: float) -> None: ...


@dataclass(frozen=True)
class TrialOutcome:
    """Everything a trial produced; scoring, storage and the live table read from it."""

    config: TrialConfig
    memory: MemoryEstimate  # predicted, before launch
    score: Score
    results: tuple[TrialResult, ...] = ()  # one per measured (level, temperature) pair
    restarted: bool = False
    # Seconds its server took to start until ready; None: reused, failed or simulated.
    startup_s: float | None = None
    failure: str | None = None  # why it is not scored: a start-up OOM, failed requests
    conditions: tuple[Condition, ...] = ()  # the pair each result was measured at
    log_tail: str = ""
    log_path: Path | None = None
    served: ServedFacts | None = None  # what the server's log says it runs
    runner: RunnerForecast | None = None  # the model runner predicted before launch
    measures: tuple[PairMeasure, ...] = ()  # how much each result was measured, its interval
    pruned: str | None = None  # why it cannot reach the incumbent (measuring stopped early)
    quality: QualityCheck | None = None  # a lossy verifier's answers against the target's own

    @property
    def status(self) -> TrialStatus:
        return self.score.status

    @property
    def primary(self) -> TrialResult | None:
        return self.results[0] if self.results else None


def predict_memory(
    hardware: Hardware,
    server: ServerConfig,
    version: VllmVersion | None = None,
    held_gib: float = 0.0,
) -> MemoryEstimate:
    """The pre-screen: will this server config fit on these GPUs under ``version``'s rules,
    with ``held_gib`` per GPU taken by other processes?"""
    draft = load_draft(server)
    free = hardware.gpu.vram_gib - held_gib if held_gib else None
    return estimate_memory(
        hardware, load_model(server.model), draft, server, version=version, free_gib=free
    )


class TrialRunner:
    """Owns the one running server of a study worker and runs trials against it."""

    def __init__(
        self,
        backend: Backend,
        hardware: Hardware,
        limits: Limits,
        *,
        version: VllmVersion | None = None,
        quality: QualityModel | None = None,
        held_gib: float = 0.0,
        power: PowerSetter | None = None,
    ) -> None:
        self.backend = backend
        self.power = power  # sets the GPUs' power limit a trial asks for (None: never set)
        self.hardware = hardware
        self.version = version  # the study's vLLM: its memory rules (None: the newest)
        self.limits = limits
        self.quality = quality  # the check a lossy verifier's trials get (None: none offered)
        self.held_gib = held_gib  # per GPU, other processes' when the study started (NVML)
        # Standard verification's answers to the check's prompts, from the first server asked.
        self._reference: tuple[str, ...] | None = None
        self._running: ServerConfig | None = None
        self._endpoint: Endpoint | None = None
        self._served: ServedFacts | None = None
        self.oom_screen = OomScreen()  # learns from every start-up this runner makes

    @classmethod
    def for_space(
        cls,
        backend: Backend,
        space: SearchSpace,
        ttft_limit_ms: float | None = None,
        held_gib: float = 0.0,
        power: PowerSetter | None = None,
    ) -> TrialRunner:
        """A runner that scores against ``space``'s limits and memory rules (``ttft_limit_ms``
        in place of its TTFT limit, where given), on GPUs where other processes hold
        ``held_gib`` (:func:`tuner.study.host.held_elsewhere`)."""
        limits = Limits.of(space, ttft_limit_ms)
        return cls(
            backend,
            space.hardware,
            limits,
            version=space.version,
            quality=space.quality,
            held_gib=held_gib,
            power=power,
        )

    def run(
        self, config: TrialConfig, context: LaunchContext, seed: int, race: Race | None = None
    ) -> TrialOutcome:
        """Runs one trial; its outcome carries the model runner predicted for its config.

        With ``race``, each pair is measured in rounds and the trial stops once it cannot
        reach the incumbent (:mod:`tuner.trial.traffic`); without, at the workload's count.

        Raises:
            StartupFailure: the server failed for a reason other than memory (a FAIL trial).
            MeasurementError: the benchmark produced nothing (a FAIL trial).
        """
        version = self.version or NEWEST_KNOWN
        mixed = heterogeneous_vocab(config.server, version)
        runner = predict_runner(config.server, version, heterogeneous_vocab=mixed)
        outcome = self._run(config, context, seed, race)
        return replace(self._checked(outcome, context), runner=runner)

    def _checked(self, outcome: TrialOutcome, context: LaunchContext) -> TrialOutcome:
        """``outcome`` with its quality constraint; a lossy verifier's measured trial gets its
        answers compared with standard verification's, while its server still runs."""
        spec = outcome.config.server.speculative
        lossy = spec is not None and spec.rejection_sample_method.lossy
        measured = outcome.status.measured and not outcome.pruned and self._endpoint is not None
        if self.quality is None or not lossy or not measured:
            return replace(outcome, score=with_quality(outcome.score, self.limits, None))
        requests = self._check_requests(outcome.config)
        answers = self.backend.answer(requests)
        if self._reference is None:  # a server of the same config, verifying exactly
            assert spec is not None  # lossy
            exact = replace(spec, rejection_sample_method=Verification.STANDARD)
            self._ensure_server(replace(outcome.config.server, speculative=exact), context)
            self._reference = self.backend.answer(requests)
        check = compare(self._reference, answers)
        return replace(
            outcome,
            score=with_quality(outcome.score, self.limits, check.similarity),
            quality=check,
        )

    def _run(
        self, config: TrialConfig, context: LaunchContext, seed: int, race: Race | None
    ) -> TrialOutcome:
        memory = predict_memory(self.hardware, config.server, self.version, self.held_gib)
        server = config.server
        outside, inside = memory_slacks(
            self.hardware, load_model(server.model), load_draft(server), server, self.version
        )
        room = (outside - self.held_gib, inside)  # what other processes hold is not ours
        if not self.oom_screen.launches(room):
            return TrialOutcome(
                config,
                memory,
                self._unmeasured(TrialStatus.OOM_PREDICTED),
                failure=self.oom_screen.why_skipped(room)
                + (f" ({memory.reason})" if memory.reason else ""),
            )
        self._take_reference(config)
        self._set_power_limit(config)
        try:
            endpoint, restarted, startup_s = self._ensure_server(config.server, context)
            if restarted:
                self.oom_screen.record(room, oom=False)
        except StartupFailure as failure:
            if failure.kind is FailureKind.OOM:
                self.oom_screen.record(room, oom=True)
            if failure.kind is FailureKind.BAD_ARGUMENT:  # every trial would fail the same way
                raise ConfigError(f"{failure} (check the flags for this vLLM version)") from None
            if failure.kind is not FailureKind.OOM:
                raise
            return TrialOutcome(
                config,
                memory,
                self._unmeasured(TrialStatus.OOM),
                restarted=True,
                failure=str(failure),
                log_tail=failure.log_tail,
            )
        try:
            traffic = measure_traffic(self.backend, config, seed, self.limits, race)
        except StartupFailure as died:  # the server ended mid-benchmark, read like a start-up
            self._stop_server()
            if died.kind is not FailureKind.OOM:
                raise
            oom = self._unmeasured(TrialStatus.OOM)
            return TrialOutcome(
                config,
                memory,
                oom,
                restarted=restarted,
                startup_s=startup_s,
                failure=str(died),
                log_tail=died.log_tail,
            )
        except MeasurementError:
            self._stop_server()  # the server may be broken: the next trial starts a fresh one
            raise
        if traffic.lost_requests:
            self._stop_server()  # it failed requests: dead, hung or broken, never reused
        broken, unrecorded = traffic.broken, traffic.unrecorded
        scored = (
            score_goodput(
                traffic.results,
                traffic.conditions,
                self.limits,
                broken=broken,
                unrecorded=unrecorded,
            )
            if self.limits.goodput
            else score(
                traffic.results,
                self.limits,
                weights=[c.weight for c in traffic.conditions],
                broken=broken,
                unrecorded=unrecorded,
            )
        )
        return TrialOutcome(
            config,
            memory,
            scored,
            traffic.results,
            restarted=restarted,
            startup_s=startup_s,
            failure=scored.reason,
            log_path=endpoint.log_path,
            conditions=traffic.conditions,
            served=self._served,
            measures=traffic.measures,
            pruned=traffic.pruned,
        )

    def _set_power_limit(self, config: TrialConfig) -> None:
        """The trial's power limit in force before its server starts (or is reused).

        Raises:
            ConfigError: the trial asks for a limit and nothing here may set it.
        """
        if config.power_limit_w is None:
            return
        if self.power is None:
            raise ConfigError(
                f"the config ran at a power limit of {config.power_limit_w} W and this command "
                "does not set the GPUs' power limit: only spectune optimize --allow-power-limit "
                "does"
            )
        self.power.apply(config.power_limit_w)

    def _take_reference(self, config: TrialConfig) -> None:
        """Asks the running server for the quality check's reference answers when a lossy
        trial is about to replace it and it verifies exactly (no extra start-up then)."""
        spec = config.server.speculative
        running = self._running
        if (
            self.quality is None
            or self._reference is not None
            or spec is None
            or not spec.rejection_sample_method.lossy
            or running is None
            or running == config.server
        ):
            return
        if running.speculative is not None and running.speculative.rejection_sample_method.lossy:
            return
        self._reference = self.backend.answer(self._check_requests(config))

    def _check_requests(self, config: TrialConfig) -> list[PromptRequest]:
        """The quality check's prompts from ``config``'s workload, at the check's length."""
        assert self.quality is not None  # only a space that offers a lossy verifier checks
        return check_requests(config.client.workload, self.quality.prompts, self.quality.max_tokens)

    def _unmeasured(self, oom: TrialStatus) -> Score:
        return score(None, self.limits, oom=oom)

    def _ensure_server(
        self, server: ServerConfig, context: LaunchContext
    ) -> tuple[Endpoint, bool, float | None]:
        """The running endpoint for ``server``, whether it was started now, and the seconds
        its start took (None: reused, or the simulator's start, whose wall time here is this
        CPU's, not a GPU host's)."""
        if self._endpoint is not None and server == self._running:
            return self._endpoint, False, None
        self._stop_server()
        began = time.monotonic()
        endpoint = self.backend.start(server, context)
        took = None if self.backend.source is Source.SIMULATED else time.monotonic() - began
        self._running, self._endpoint = server, endpoint
        log = endpoint.log_path
        self._served = (
            read_served(log.read_text(errors="replace")) if log and log.exists() else None
        )
        return endpoint, True, took

    def _stop_server(self) -> None:
        self._running, self._endpoint = None, None
        self.backend.stop()

    def close(self) -> None:
        """Stops the running server and releases everything the backend holds."""
        self._running, self._endpoint = None, None
        self.backend.close()
