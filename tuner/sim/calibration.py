"""The step-time model's fitted constants, and the two things they are keyed by.

A constant belongs here when a public measurement sets it: what fraction of the datasheet
bandwidth a decode pass streams at, what a step costs the engine outside the GPU, what a drafter
pass costs beyond its weights. ``benchmarks/simulator_reference.py`` fits them on the cited
figures of ``benchmarks/reference_figures.yaml`` and reports each figure's error when its own
source is left out of the fit; the values below are that fit's.

The keys:

- :class:`~tuner.catalog.gpus.MemoryKind`: HBM datacenter parts and GDDR cards (GeForce, and the
  L4/L40/A10 inference cards) reach different shares of their bandwidth and launch kernels at
  different costs. Each catalog entry names its memory (``gpu.memory``), so a GPU added to the
  catalog, or described in a user's file, finds its constants without an edit here.
- :class:`EngineGeneration`: vLLM's V0 engine (the default up to 0.7, and where 0.8-0.10 fell
  back to for a separate draft model) runs its scheduler, sampler and speculative worker in
  Python between steps; the V1 engine (0.8+) overlaps most of that with the GPU and verifies
  drafts in a GPU rejection sampler. :func:`engine_generation` picks it from the version.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from tuner.catalog.gpus import Interconnect, MemoryKind
from tuner.config.methods import MethodFamily, method_of
from tuner.config.trial import SpecMethod
from tuner.config.vllm_version import VllmVersion

__all__ = [
    "SHIPPED_STEPS",
    "EngineCosts",
    "EngineGeneration",
    "StepConstants",
    "engine_generation",
]


class EngineGeneration(enum.StrEnum):
    """vLLM's engine core: the V0 engine or the V1 engine (0.8+)."""

    V0 = "V0"
    V1 = "V1"


# vLLM 0.8.0 made the V1 engine the default; V1 could not run a separate draft model until 0.15,
# and 0.8-0.10 served such a config on the V0 engine instead (V0 was removed in 0.11).
_V1_DEFAULT = VllmVersion(0, 8, 0)
_V0_REMOVED = VllmVersion(0, 11, 0)


def engine_generation(version: VllmVersion | None, method: SpecMethod) -> EngineGeneration:
    """The engine vLLM ``version`` (None: the newest) runs a config of ``method`` on."""
    if version is None:
        return EngineGeneration.V1
    if version < _V1_DEFAULT:
        return EngineGeneration.V0
    if method_of(method).family is MethodFamily.DRAFT and version < _V0_REMOVED:
        return EngineGeneration.V0
    return EngineGeneration.V1


@dataclass(frozen=True)
class EngineCosts:
    """What an engine generation costs outside the forward passes' weights and FLOPs.

    Attributes:
        step_s: fixed work per step: scheduling, sampling, detokenizing, streaming.
        per_seq_s: that work per sequence in the step.
        spec_per_token_s: speculative bookkeeping per verified token (V0's Python spec worker
            and CPU rejection sampler; V1 verifies on the GPU).
        draft_pass_s: fixed cost of one draft-model pass (its inputs, launch and sampling).
        head_pass_s: fixed cost of one EAGLE-head or MTP pass inside the target's runner.
        drafter_per_seq_s: a drafter pass's work per sequence (inputs, sampling over its
            vocabulary: Python objects per sequence in V0's draft worker).
        first_token_s: speculative set-up before a request's first token streams.
        lookup_per_seq_s: prompt lookup (and suffix-tree lookup) on the CPU per sequence.
    """

    step_s: float
    per_seq_s: float
    spec_per_token_s: float
    draft_pass_s: float
    head_pass_s: float
    drafter_per_seq_s: float
    first_token_s: float
    lookup_per_seq_s: float


@dataclass(frozen=True)
class StepConstants:
    """The step-time model's constants (see :class:`tuner.sim.perfmodel.PerfModel`).

    Attributes:
        bandwidth: share of the datasheet bandwidth a 16-bit decode pass streams weights and KV
            at, per GPU class.
        quantized_bandwidth: the share a 4-bit or 8-bit checkpoint's kernels reach, relative to
            the 16-bit one (dequantization in the load path).
        compute: share of the datasheet 16-bit tensor throughput GEMMs reach.
        quantized_compute: the same for quantized kernels.
        allreduce_latency_s: fixed latency of one all-reduce, per link kind.
        allreduce_link: share of the link bandwidth an all-reduce's payload moves at.
        launch_per_layer_s: kernel launches per layer, per GPU class, for a replayed CUDA graph
            (decode) and for eager launches (prefill, ``--enforce-eager``).
        engines: the engine generations' costs.
        v2_runner_saving_s: per-step work Model Runner V2 (the default from vLLM 0.29) saves
            over the V1 runner the ``engines`` costs were measured on; a config V2 does not
            support falls back to V1 (:func:`tuner.config.vllm_runner.predict_runner`).
        adaptive_step_s: adaptive verification's own work per step (confidence scores, the
            acceptance estimator, sizing each request's budget).
        moe_draft_routing: how independently a sequence's drafted tokens pick their experts
            (0: all as its first token does, 1: as if from other sequences); it sets how many
            more experts a verification pass streams than a decode pass.
    """

    bandwidth: Mapping[MemoryKind, float]
    quantized_bandwidth: float
    compute: float
    quantized_compute: float
    allreduce_latency_s: Mapping[Interconnect, float]
    allreduce_link: Mapping[Interconnect, float]
    launch_per_layer_s: Mapping[MemoryKind, Mapping[bool, float]]
    engines: Mapping[EngineGeneration, EngineCosts]
    v2_runner_saving_s: float
    adaptive_step_s: float
    moe_draft_routing: float


SHIPPED_STEPS = StepConstants(
    bandwidth={MemoryKind.HBM: 0.879, MemoryKind.GDDR: 0.795},
    quantized_bandwidth=0.798,
    compute=0.652,
    quantized_compute=0.56,
    # Infinity Fabric (AMD Instinct) has no public all-reduce figure in the reference table:
    # NVLink's values until one says otherwise.
    allreduce_latency_s={
        Interconnect.PCIE: 122e-6,
        Interconnect.NVLINK: 20e-6,
        Interconnect.INFINITY_FABRIC: 20e-6,
    },
    allreduce_link={
        Interconnect.PCIE: 0.8,
        Interconnect.NVLINK: 0.7,
        Interconnect.INFINITY_FABRIC: 0.7,
    },
    launch_per_layer_s={
        MemoryKind.HBM: {True: 3e-6, False: 15e-6},
        MemoryKind.GDDR: {True: 3e-6, False: 15e-6},
    },
    engines={
        EngineGeneration.V0: EngineCosts(
            step_s=2.71e-3,
            per_seq_s=40e-6,
            spec_per_token_s=188e-6,
            draft_pass_s=0.80e-3,
            head_pass_s=0.6e-3,
            # Why speculation loses at dozens of requests on the field notes' rig (BRIEF.md).
            drafter_per_seq_s=200e-6,
            first_token_s=25.2e-3,
            lookup_per_seq_s=60e-6,
        ),
        EngineGeneration.V1: EngineCosts(
            step_s=1.42e-3,
            per_seq_s=23.3e-6,
            spec_per_token_s=5e-6,
            draft_pass_s=1.61e-3,
            head_pass_s=0.583e-3,
            drafter_per_seq_s=7.19e-6,
            first_token_s=2e-3,
            lookup_per_seq_s=4.39e-6,
        ),
    },
    v2_runner_saving_s=0.498e-3,
    adaptive_step_s=1.24e-3,
    moe_draft_routing=0.522,
)
