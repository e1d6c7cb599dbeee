"""The per-GPU memory budget: does a server config fit, and how much KV cache is left?

vLLM asks for ``gpu_memory_utilization`` of each GPU. Inside that budget it loads the target and
draft weights, profiles one forward pass of ``max-num-batched-tokens`` tokens (the activation
peak), keeps its cuBLAS/NCCL workspaces, and gives everything left to the KV cache. Two things
sit *outside* the budget: the CUDA context, there before vLLM measures anything, and the CUDA
graphs captured after the KV cache is allocated. That is why 0.98 of a 24 GB card fails while
0.92 leaves ~2 GB for them (BRIEF.md): the budget plus what lies outside must fit the card.

The failure causes follow vLLM's start-up messages, in the order vLLM meets them: weights that do
not fit at all, no memory left for cache blocks, a cache too small for one request of
``max-model-len`` tokens, and finally the CUDA OOM while capturing graphs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.trial import ServerConfig
from tuner.errors import ConfigError
from tuner.sim.perfmodel import draft_tensor_parallel, kv_bytes_per_gpu

__all__ = ["BLOCK_TOKENS", "MemoryEstimate", "effective_batched_tokens", "estimate_memory"]

GIB = 1024**3
BLOCK_TOKENS = 16  # vLLM's KV-cache block size

# CUDA context, torch and library code objects, per process and GPU.
CUDA_CONTEXT_GIB = 0.42
# Captured CUDA graphs: a fixed part plus a per-layer part for vLLM's ~35 captured batch sizes.
GRAPH_BASE_GIB = 0.08
GRAPH_PER_LAYER_GIB = 0.0065
# Workspaces inside the budget: cuBLAS, and NCCL buffers when GPUs talk to each other.
CUBLAS_WORKSPACE_GIB = 0.12
NCCL_WORKSPACE_GIB = 0.25
# Activation peak per batched token, as a multiple of the widest layer's 16-bit output; the
# caching allocator's fragmentation and residual copies make it several times the bare tensor.
ACTIVATION_FACTOR = 3.0
# The profile run samples logits for max_num_seqs sequences in fp32, plus softmax/sort copies.
SAMPLER_SEQS = 256
SAMPLER_COPIES = 3


@dataclass(frozen=True)
class MemoryEstimate:
    """Where one GPU's memory goes under a server config; every figure in GiB, per GPU.

    ``weights_gib + draft_gib + activation_gib + kv_cache_gib`` plus the workspace part of
    ``overhead_gib`` fill ``budget_gib``; the rest of ``overhead_gib`` (CUDA context and graphs)
    lies outside it and must fit in what the budget leaves of ``gpu_total_gib``.

    Attributes:
        gpu_total_gib: the card's memory.
        budget_gib: ``gpu_memory_utilization`` times the total.
        weights_gib: the target's weights on this GPU.
        draft_gib: the draft's weights on this GPU (0 without one).
        activation_gib: the profiled activation peak for ``max-num-batched-tokens``.
        overhead_gib: CUDA context, cuBLAS/NCCL workspaces, CUDA-graph reserve.
        kv_cache_gib: what remains for the KV cache (may be <= 0).
        kv_tokens: tokens of context the KV cache holds (target and draft KV per token).
        fits: whether the server would start.
        reason: "" when it fits; else the cause in vLLM's words.
    """

    gpu_total_gib: float
    budget_gib: float
    weights_gib: float
    draft_gib: float
    activation_gib: float
    overhead_gib: float
    kv_cache_gib: float
    kv_tokens: int
    fits: bool
    reason: str

    @property
    def peak_gib(self) -> float:
        """Memory a running server holds on this GPU, as NVML would report it."""
        used = self.weights_gib + self.draft_gib + self.activation_gib + self.overhead_gib
        return used + max(self.kv_cache_gib, 0.0)


def effective_batched_tokens(server: ServerConfig) -> int:
    """Tokens one step may process: without chunked prefill a whole prompt must fit in a step."""
    if server.enable_chunked_prefill:
        return server.max_num_batched_tokens
    return max(server.max_num_batched_tokens, server.max_model_len)


def _activation_bytes(model: ModelSpec, tp: int, tokens: int, sampler: bool) -> float:
    widest = model.hidden + 3 * model.intermediate / tp  # MLP input, gate/up output, activation
    logits = SAMPLER_SEQS * model.vocab * 4 * SAMPLER_COPIES if sampler else 0.0
    return tokens * widest * 2 * ACTIVATION_FACTOR + logits


def _graphs_gib(model: ModelSpec) -> float:
    return GRAPH_BASE_GIB + GRAPH_PER_LAYER_GIB * model.layers


def _check_parallel(hardware: Hardware, target: ModelSpec, tp: int) -> None:
    if tp < 1 or tp > hardware.count:
        raise ConfigError(
            f"tensor-parallel size {tp} needs {tp} GPUs but the hardware is {hardware.label}: use "
            f"a size from 1 to {hardware.count}"
        )
    if target.heads % tp:
        raise ConfigError(
            f"{target.hf_id} has {target.heads} attention heads, not divisible by tensor-parallel "
            f"size {tp}: pick a size that divides {target.heads}"
        )


def estimate_memory(
    hardware: Hardware,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    jitter_gib: float = 0.0,
) -> MemoryEstimate:
    """Predicts one GPU's memory use under ``server`` and whether vLLM would start.

    Args:
        hardware: the GPUs; tensor parallelism uses ``server.tensor_parallel_size`` of them.
        target: the served model.
        draft: the draft model; ignored unless the server speculates with ``draft_model``.
        server: memory utilization, batched tokens, max model length and speculation.
        jitter_gib: hidden extra memory outside the budget (the simulated launcher's seeded
            variation, so borderline configs can still fail at launch); predictions use 0.

    Returns:
        The estimate; ``fits`` is False with vLLM's cause in ``reason`` when it would not start.

    Raises:
        ConfigError: the tensor-parallel size does not match the hardware or the model.
    """
    tp = server.tensor_parallel_size
    _check_parallel(hardware, target, tp)
    if server.speculative is None or server.speculative.method != "draft_model":
        draft = None  # only a draft-model server loads the draft
    total = hardware.gpu.vram_gib
    budget = server.gpu_memory_utilization * total
    tokens = effective_batched_tokens(server)
    weights = target.weight_bytes / tp / GIB
    activation = _activation_bytes(target, tp, tokens, sampler=True)
    workspace = CUBLAS_WORKSPACE_GIB + (NCCL_WORKSPACE_GIB if tp > 1 else 0.0)
    outside = CUDA_CONTEXT_GIB + _graphs_gib(target)
    draft_weights = 0.0
    per_token = kv_bytes_per_gpu(target, tp)
    if draft is not None:
        # A draft on one GPU (draft TP 1) puts all of it on GPU 0, the GPU reported here.
        draft_tp = draft_tensor_parallel(server)
        draft_weights = draft.weight_bytes / draft_tp / GIB
        # The draft's profile pass runs after the target's; only its own activations add up.
        activation += _activation_bytes(draft, draft_tp, tokens, sampler=False)
        outside += _graphs_gib(draft)
        per_token += kv_bytes_per_gpu(draft, draft_tp)
    activation /= GIB
    kv_cache = budget - weights - draft_weights - activation - workspace
    blocks = math.floor(kv_cache * GIB / per_token / BLOCK_TOKENS) if kv_cache > 0 else 0
    kv_tokens = blocks * BLOCK_TOKENS
    reason = ""
    loaded = weights + draft_weights + workspace + CUDA_CONTEXT_GIB + jitter_gib
    if loaded > total:
        reason = (
            "torch.OutOfMemoryError: CUDA out of memory while loading the model weights: "
            f"{weights + draft_weights:.2f} GiB of weights on a GPU with {total:.2f} GiB total "
            "capacity. Use more GPUs (tensor parallelism) or a quantized model."
        )
    elif kv_cache <= 0:
        reason = (
            "ValueError: No available memory for the cache blocks. Try increasing "
            f"`gpu_memory_utilization` when initializing the engine (budget {budget:.2f} GiB, "
            f"weights {weights + draft_weights:.2f} GiB, activations {activation:.2f} GiB)."
        )
    elif kv_tokens < server.max_model_len:
        needed = server.max_model_len * per_token / GIB
        reason = (
            f"ValueError: To serve at least one request with the models's max seq len "
            f"({server.max_model_len}), ({needed:.2f} GiB KV cache is needed, which is larger "
            f"than the available KV cache memory ({kv_cache:.2f} GiB). Based on the available "
            f"memory, the estimated maximum model length is {kv_tokens}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    elif budget + outside + jitter_gib > total:
        free_mib = max(total - budget - CUDA_CONTEXT_GIB - jitter_gib, 0.0) * 1024
        wanted_mib = (outside - CUDA_CONTEXT_GIB) * 1024
        reason = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {wanted_mib:.0f} MiB. "
            f"GPU 0 has a total capacity of {total:.2f} GiB of which {free_mib:.0f} MiB is free "
            "(while capturing CUDA graphs). Try lowering `gpu_memory_utilization`."
        )
    return MemoryEstimate(
        gpu_total_gib=total,
        budget_gib=budget,
        weights_gib=weights,
        draft_gib=draft_weights,
        activation_gib=activation,
        overhead_gib=workspace + outside,
        kv_cache_gib=kv_cache,
        kv_tokens=kv_tokens,
        fits=not reason,
        reason=reason,
    )
