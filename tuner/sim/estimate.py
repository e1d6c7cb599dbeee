"""``spectune estimate``: the simulator's prediction for one config, nothing launched.

The memory verdict follows the rules of the vLLM version asked for (``tuner.sim.memory``), and
a draft pair that version refuses is refused here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec, check_draft, load_model
from tuner.config.space import NGRAM, NO_DRAFT
from tuner.config.trial import ServerConfig, SpeculativeConfig
from tuner.config.vllm_version import VllmVersion
from tuner.config.workload import WorkloadSpec
from tuner.results import TrialResult
from tuner.sim.engine import SHIPPED, Physics, predict
from tuner.sim.memory import MemoryEstimate, estimate_memory

__all__ = ["Estimate", "estimate"]


@dataclass(frozen=True)
class Estimate:
    """A predicted run; ``result`` is None when the config does not fit in memory."""

    hardware: Hardware
    server: ServerConfig
    memory: MemoryEstimate
    result: TrialResult | None


def estimate(
    hardware: Hardware,
    model: str,
    *,
    draft: str = NO_DRAFT,
    k: int = 4,
    workload: WorkloadSpec,
    temperature: float = 0.2,
    gpu_memory_utilization: float = 0.92,
    max_num_batched_tokens: int = 2048,
    max_model_len: int = 8192,
    concurrency: int = 1,
    physics: Physics = SHIPPED,
    vllm_version: VllmVersion | None = None,
    free_gib: float | None = None,
) -> Estimate:
    """Predicts throughput, TTFT, acceptance and memory for one config on ``hardware``.

    Args:
        physics: the simulator's models: the shipped ones, or a study's fitted twin
            (:class:`tuner.sim.twin.TwinPhysics`).
        vllm_version: whose memory and draft rules apply (None: the newest).
        free_gib: NVML's free memory per GPU, where the caller read it (another process counts).

    Raises:
        ConfigError: an unknown model, or a draft pair ``vllm_version`` refuses.
    """
    target = load_model(model)
    draft_spec: ModelSpec | None = None
    speculative = None
    if draft == NGRAM:
        speculative = SpeculativeConfig("ngram", k, prompt_lookup_max=4, prompt_lookup_min=1)
    elif draft != NO_DRAFT:
        draft_spec = load_model(draft)
        check_draft(target, draft_spec, vllm_version)
        speculative = SpeculativeConfig("draft_model", k, model=draft_spec.hf_id)
    server = ServerConfig(
        model=target.hf_id,
        tensor_parallel_size=hardware.count,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        speculative=speculative,  # no --quantization: vLLM reads it from the checkpoint
    )
    memory = (
        estimate_memory(
            hardware, target, draft_spec, server, version=vllm_version, free_gib=free_gib
        )
        if physics is SHIPPED
        else physics.memory(hardware, target, draft_spec, server)
    )
    result = None
    if memory.fits:
        result = predict(
            hardware, target, draft_spec, server, temperature, workload, concurrency, physics
        )
    return Estimate(hardware, server, memory, result)
