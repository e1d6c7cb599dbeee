"""Held-out truths for the search benchmark: simulators the strategy and its prior never see.

Each :class:`World` is the shipped simulator with some of its physics changed: other GPUs behind
the label the space names, other step-time constants, another acceptance model, another memory
rule, another process holding memory on the GPUs. The benchmark's backend (:class:`WorldBackend`)
measures with the world; the study keeps the shipped models for its prior, pre-screen and twin,
and has to find out from its trials, except what a real host shows before the first server:
the memory other processes hold, which the world reports through NVML's interface
(:meth:`WorldBackend.gpu_monitor`) for the study start to read. Nothing in ``tuner`` imports
this module.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.catalog.gpu_state import GpuState
from tuner.catalog.gpus import CATALOG, Hardware, parse_hardware
from tuner.catalog.models import ModelSpec, load_model
from tuner.config.methods import MethodFamily, method_of
from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace, load_space
from tuner.config.trial import (
    LaunchContext,
    ServerConfig,
    SpecMethod,
    SpeculativeConfig,
    TrialConfig,
    load_draft,
)
from tuner.config.vllm_version import VllmVersion, parse_version
from tuner.errors import MeasurementError
from tuner.launch.failures import startup_failure
from tuner.results import Endpoint, Source, TrialResult
from tuner.sim.acceptance import POSITION_DECAY, shipped_rates
from tuner.sim.answers import simulated_answers
from tuner.sim.memory import MemoryEstimate, adjust_memory, estimate_memory
from tuner.sim.perfmodel import ForwardPass, PerfModel
from tuner.sim.virtual_time import simulate
from tuner.trial.run_facts import RunFacts

__all__ = ["WORLDS", "World", "WorldBackend"]

_MAX_JITTER_GIB = 0.5  # the sim backend's hidden start-up variation, kept in every world


@dataclass(frozen=True)
class World:
    """One truth: how it differs from the shipped simulator.

    Attributes:
        name: how the table names it.
        note: what changed, in a few words.
        gpu: another catalog GPU really sitting behind the space's label (None: the same).
        bandwidth: factor on the GPUs' memory bandwidth reached.
        allreduce: factor on the all-reduce latency.
        draft_cost: factor on each draft pass.
        draft_decay: conditional acceptance decay per position of every drafter but prompt
            lookup and suffix decoding, in place of the shipped model's 0.95 (each method's
            own decay scaled by the ratio; the shipped acceptance model otherwise, its
            verification and drafting options included).
        ngram_decay: a decay per position for prompt lookup and suffix decoding (1: none, as
            shipped).
        ngram_logit: shift of their acceptance logit at every position.
        draft_logit: shift of the acceptance logit at every position of the drafters named
            (a draft model's, head's or DFlash model's id): a drafter the prior ranks first
            that accepts far less here.
        outside_gib: memory outside vLLM's budget beyond the model, which nothing shows
            before a start-up.
        tenant_gib: memory another process holds on each GPU (a desktop), which NVML shows
            at study start (:meth:`WorldBackend.gpu_monitor`).
        inside_gib: memory inside the budget beyond the model.
        memory_rules: the vLLM version whose memory rules hold (None: the newest, as shipped).
        space_hardware: GPUs the space itself names for this world (None: the space's own).
    """

    name: str
    note: str
    gpu: str | None = None
    bandwidth: float = 1.0
    allreduce: float = 1.0
    draft_cost: float = 1.0
    draft_decay: float = POSITION_DECAY
    ngram_decay: float = 1.0
    ngram_logit: float = 0.0
    draft_logit: tuple[tuple[str, float], ...] = ()
    outside_gib: float = 0.0
    tenant_gib: float = 0.0
    inside_gib: float = 0.0
    memory_rules: str | None = None
    space_hardware: str | None = None

    def space(self, name: str) -> SearchSpace:
        """The space a study of this world tunes (the strategy sees this much of the world)."""
        space = load_space(name)
        if self.space_hardware is None:
            return space
        return space.with_hardware(parse_hardware(self.space_hardware))

    def hardware(self, label: Hardware) -> Hardware:
        gpu = label.gpu
        if self.gpu is not None:
            gpu = next(g for g in CATALOG if g.name == self.gpu)
        gpu = gpu.model_copy(update={"bandwidth_gbs": gpu.bandwidth_gbs * self.bandwidth})
        return Hardware(gpu, label.count)

    # -- the Physics protocol -------------------------------------------------------------

    def perf_model(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        version: VllmVersion | None = None,
    ) -> PerfModel:
        return _WorldPerf(hardware, target, draft, server, self, version)

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
        rates = shipped_rates(
            target, draft, method, prompt_set, temperature, k, speculative=speculative
        )
        if method_of(method).family is not MethodFamily.LOOKUP:
            named = speculative.model if speculative is not None else None
            shift = dict(self.draft_logit).get(named or (draft.hf_id if draft else ""), 0.0)
            if shift:
                rates = tuple(1 / (1 + math.exp(-(_logit(r) + shift))) for r in rates)
            # Each position further from the shipped model's: its decay replaced by the world's.
            change = self.draft_decay / POSITION_DECAY
            return tuple(min(rate * change**i, 1.0) for i, rate in enumerate(rates))
        if self.ngram_logit:
            rates = tuple(1 / (1 + math.exp(-(_logit(r) + self.ngram_logit))) for r in rates)
        return tuple(min(rate * self.ngram_decay**i, 1.0) for i, rate in enumerate(rates))

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
        version = parse_version(self.memory_rules) if self.memory_rules else version
        # vLLM finds a tenant's memory in use as it finds its own unmodelled overhead.
        outside = self.outside_gib + self.tenant_gib
        base = estimate_memory(
            hardware, target, draft, server, jitter_gib + outside, version=version
        )
        return adjust_memory(base, target, draft, server, self.inside_gib, outside)


def _logit(rate: float) -> float:
    rate = min(max(rate, 1e-9), 1 - 1e-9)
    return math.log(rate / (1 - rate))


class _WorldPerf(PerfModel):
    def __init__(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        world: World,
        version: VllmVersion | None,
    ) -> None:
        super().__init__(hardware, target, draft, server, version=version)
        self._ar_latency *= world.allreduce  # test equipment may reach inside the model
        self.draft_cost = world.draft_cost

    def draft_pass_s(self, batch: ForwardPass) -> float:
        return super().draft_pass_s(batch) * self.draft_cost


SHIPPED = World("shipped", "the simulator the prior was built from")
WORLDS: tuple[World, ...] = (
    World(
        "acceptance decay",
        "draft acceptance decays 0.86/position, ngram 0.97",
        draft_decay=0.86,
        ngram_decay=0.97,
    ),
    World("bandwidth 0.75x", "kernels reach 3/4 of the modelled bandwidth", bandwidth=0.75),
    World("memory +1.1 GiB", "1.1 GiB more outside vLLM's budget", outside_gib=1.1),
    World(
        "desktop on the GPU",
        "another process (a desktop) holds 2 GiB of each GPU, as NVML shows at study start",
        tenant_gib=2.0,
    ),
    World("draft 2.5x", "each draft pass costs 2.5x the model", draft_cost=2.5),
    World("ngram workload", "outputs repeat the prompt: ngram logit +2.0", ngram_logit=2.0),
    World(
        "favourite accepts less",
        "the drafter the prior ranks first accepts far less, its logit shifted so that the "
        "prior's favourite is a median config: the 0.5B draft by -2.0 (32B spaces), DFlash by "
        "-3.1 (2026 spaces)",
        draft_logit=(
            ("Qwen/Qwen2.5-0.5B-Instruct", -2.0),
            ("z-lab/Qwen3-Coder-30B-A3B-DFlash", -3.1),
        ),
    ),
    World(
        "vLLM 0.20 memory",
        "vLLM 0.20's memory rule (the model: 0.21+): CUDA graphs outside the budget, NCCL inside",
        memory_rules="0.20.0",
    ),
    World(
        "slow interconnect", "all-reduce latency 3x (no P2P, a busy root complex)", allreduce=3.0
    ),
    World(
        "H100 x2",
        "the space on 2 H100s, where kernels reach 90 % of the bandwidth (the model 82 %)",
        bandwidth=0.90 / 0.82,
        space_hardware="h100x2",
    ),
)


class WorldBackend:
    """The sim backend measuring in ``world`` (the backend protocol of ``tuner.trial``)."""

    name = "sim"
    source = Source.SIMULATED

    def __init__(
        self, label: Hardware, world: World, seed: int, version: VllmVersion | None
    ) -> None:
        self.hardware = world.hardware(label)
        self.world = world
        self.seed = seed
        self.version = version
        self._server: ServerConfig | None = None

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        del context
        self._server = None
        target, draft = load_model(server.model), load_draft(server)
        jitter = random.Random(f"{self.seed}:{server!r}").uniform(0.0, _MAX_JITTER_GIB)
        memory = self.world.memory(
            self.hardware, target, draft, server, jitter, version=self.version
        )
        if not memory.fits:
            log = f"ERROR [simulated] {memory.reason}\nRuntimeError: Engine core init failed.\n"
            raise startup_failure(1, log)
        self._server = server
        return Endpoint(f"simulator:{self.world.name}", server.model)

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        server = self._server
        if server is None:
            raise MeasurementError("no simulated server runs")
        return simulate(
            self.hardware,
            load_model(server.model),
            load_draft(server),
            server,
            config.client.sampling_temperature,
            config.client.workload,
            concurrency,
            seed,
            physics=self.world,
            version=self.version,
        )

    def answer(self, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
        """The shipped simulator's answers: no world perturbs a lossy verifier's loss."""
        if self._server is None:
            raise MeasurementError("no simulated server runs")
        return simulated_answers(self._server, requests)

    def stop(self) -> None:
        self._server = None

    def close(self) -> None:
        self._server = None

    def facts(self, space: SearchSpace) -> RunFacts:
        return RunFacts(self.name, str(space.version))

    def gpu_monitor(self) -> WorldGpus:
        """The world's GPUs as NVML shows them before the study's first server starts."""
        return WorldGpus(self.hardware.count, self.world.tenant_gib)


_DESKTOP_PID = 1873  # the tenant's process, as NVML would list it


@dataclass(frozen=True)
class WorldGpus:
    """The :class:`tuner.catalog.nvml.GpuMonitor` of a world's GPUs with no server of the study
    on them: each holds the world's tenant, if any (what a study start reads)."""

    count: int
    tenant_gib: float

    def memory_used_gib(self) -> list[float] | None:
        return [self.tenant_gib] * self.count

    def state(self) -> list[GpuState] | None:
        held = ((_DESKTOP_PID, self.tenant_gib),) if self.tenant_gib else ()
        now = time.monotonic()
        return [GpuState(now, gpu, self.tenant_gib, processes=held) for gpu in range(self.count)]
