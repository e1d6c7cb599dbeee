"""The per-GPU memory budget: does a server config fit, and how much KV cache is left?

vLLM asks for ``gpu_memory_utilization`` of each GPU. Inside that budget it loads the target and
draft weights, profiles one forward pass of ``max-num-batched-tokens`` tokens (the activation
peak, the sampler's logits included), keeps its cuBLAS workspace, and gives everything left to
the KV cache of target and draft (``--kv-cache-dtype`` sets its bytes per value). An EAGLE head
or the target's MTP layers count like a small draft inside the same budget: their weights (the
MTP layers without the embeddings and LM head they share with the target), their activations
and their own KV cache; ngram and suffix decoding hold no GPU memory of their own. What lies
inside and outside the budget changed with vLLM's releases; :func:`memory_rules` names the two
rule sets and the versions each encodes:

``0.21+`` (read in vLLM 0.32's source; the release it began with is BRIEF.md's):
    the CUDA-graph memory is profiled and counted inside the budget
    (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` subtracts
    ``profile_cudagraph_memory()``; ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1 in
    ``vllm/envs.py``). The CUDA context and NCCL's buffers exist before the start-up snapshot
    (``init_device`` runs ``init_worker_distributed_environment`` before ``MemorySnapshot``) and
    so sit outside it. Start-up refuses unless the free memory is at least utilization x total
    (``vllm/v1/worker/utils.py`` ``request_memory``: "Free memory on device ... on startup is
    less than desired GPU memory utilization"); the free memory is NVML's where known, so
    another process on the GPU counts. The KV-cache checks are
    ``vllm/v1/core/kv_cache_utils.py`` ``_check_enough_kv_cache_memory``.
A drafter that samples its proposals (``draft_sample_method: probabilistic``) keeps their
logits for the rejection sampler: a ``max_num_seqs x K x vocabulary`` buffer in the model's dtype
on every GPU, allocated with the drafter before the profile and so taken from the KV cache
(vLLM 0.32's ``vllm/v1/worker/gpu/spec_decode/speculator.py``, ``draft_logits``).

``0.34+`` (read in vLLM 0.34.0's source: ``vllm/config/cache.py``,
``vllm/v1/worker/extensible_kv_cache.py``, ``vllm/v1/worker/utils.py``):
    the extensible KV cache (on by default on CUDA) reserves the cache's address range,
    captures CUDA graphs, then commits the cache from the memory measured free after warm-up
    (``measure_kv_cache_bytes``): the budget (``gpu_memory_utilization``, unset: 1.0) is only a
    cap, there is no start-up free-memory check (``request_memory`` skips it with the
    extensible cache), and the cache gets ``min(budget - what vLLM holds, free - margin) -
    transient peak``, the margin ``max(1 GiB, 0.75 x transient peak)``
    (``KV_CACHE_MARGIN_FLOOR_BYTES``, ``KV_CACHE_MARGIN_FRACTION``). Memory other processes
    hold when vLLM measures is therefore seen and left alone; only what they take later is not,
    which is what a cap below 1.0 is for. Blocks hold 64 tokens (``CacheConfig.
    DEFAULT_BLOCK_SIZE``, 16 before).

``0.6-0.20`` (the rules this model was first calibrated on, BRIEF.md's reference run on 0.7.2):
    the CUDA context and the CUDA graphs captured after the KV cache is allocated sit outside
    the budget, cuBLAS and NCCL workspaces inside. 0.98 of a 24 GB card then fails while
    capturing graphs, and 0.92 leaves ~2 GB for them. No start-up free-memory check; memory
    other processes hold also lies outside the budget and must fit next to it.

The failure causes follow vLLM's start-up messages in the order vLLM meets them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.methods import MethodFamily, method_of
from tuner.config.trial import ServerConfig
from tuner.config.vllm_args import measured_kv_cache
from tuner.config.vllm_version import NEWEST_KNOWN, VllmVersion
from tuner.errors import ConfigError
from tuner.sim.acceptance import samples_drafts
from tuner.sim.perfmodel import draft_tensor_parallel, drafter, kv_bytes_per_gpu

__all__ = [
    "BLOCK_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "MemoryEstimate",
    "MemoryRules",
    "adjust_memory",
    "draft_logits_gib",
    "effective_batched_tokens",
    "estimate_memory",
    "kv_cache_bytes_per_value",
    "max_num_seqs",
    "memory_rules",
]

GIB = 1024**3
BLOCK_TOKENS = 16  # vLLM's KV-cache block size

# CUDA context, torch and library code objects, per process and GPU.
CUDA_CONTEXT_GIB = 0.42
# Captured CUDA graphs: a fixed part plus a per-layer part for vLLM's ~35 captured batch sizes.
GRAPH_BASE_GIB = 0.08
GRAPH_PER_LAYER_GIB = 0.0065
# Workspaces inside the budget: cuBLAS, and NCCL buffers when GPUs talk to each other.
CUBLAS_WORKSPACE_GIB = 0.12
# vLLM's --max-num-seqs when the server does not set it.
DEFAULT_MAX_NUM_SEQS = 256
_LOGIT_BYTES = 2  # the draft logits buffer holds the model's 16-bit dtype
NCCL_WORKSPACE_GIB = 0.25
# Activation peak per batched token, as a multiple of the widest layer's 16-bit output; the
# caching allocator's fragmentation and residual copies make it several times the bare tensor.
ACTIVATION_FACTOR = 3.0
# The profile run samples logits for max_num_seqs sequences in fp32, plus softmax/sort copies.
SAMPLER_SEQS = 256
SAMPLER_COPIES = 3

_BUDGETED_GRAPHS = VllmVersion(0, 21, 0)
# The extensible cache's margin below measured free memory: max(floor, fraction x transient).
_MARGIN_FLOOR_GIB = 1.0
_MARGIN_FRACTION = 0.75
# --kv-cache-dtype: bytes per cached value (auto/bf16/fp16 keep the model's 16 bits).
_KV_DTYPE_BYTES = (("fp8", 1.0), ("int8", 1.0), ("int4", 0.5), ("nvfp4", 0.5625))


@dataclass(frozen=True)
class MemoryRules:
    """What one range of vLLM releases counts inside ``gpu_memory_utilization``.

    Attributes:
        versions: the releases these rules encode, e.g. ``"0.21+"``.
        graphs_in_budget: CUDA-graph memory comes out of the KV cache (else it lies outside).
        nccl_in_budget: NCCL buffers come out of the KV cache (else they lie outside).
        free_memory_check: start-up needs free memory >= utilization x total.
        measured_kv_cache: the KV cache is sized from memory measured free after warm-up (the
            extensible KV cache), the budget only a cap.
        block_tokens: tokens per KV-cache block.
    """

    versions: str
    graphs_in_budget: bool
    nccl_in_budget: bool
    free_memory_check: bool
    measured_kv_cache: bool = False
    block_tokens: int = BLOCK_TOKENS


def memory_rules(version: VllmVersion | None) -> MemoryRules:
    """The rules of ``version`` (None: the newest known release)."""
    release = version or NEWEST_KNOWN
    if measured_kv_cache(release):
        return MemoryRules(
            "0.34+",
            graphs_in_budget=True,
            nccl_in_budget=False,
            free_memory_check=False,
            measured_kv_cache=True,
            block_tokens=64,
        )
    if release >= _BUDGETED_GRAPHS:
        return MemoryRules(
            "0.21+", graphs_in_budget=True, nccl_in_budget=False, free_memory_check=True
        )
    return MemoryRules(
        "0.6-0.20", graphs_in_budget=False, nccl_in_budget=True, free_memory_check=False
    )


def kv_cache_bytes_per_value(server: ServerConfig) -> float:
    """Bytes a cached K or V value takes under the server's ``--kv-cache-dtype``."""
    for name, value in server.extra_flags:
        if name.lstrip("-").replace("_", "-") == "kv-cache-dtype":
            text = str(value).lower()
            return next((size for prefix, size in _KV_DTYPE_BYTES if text.startswith(prefix)), 2.0)
    return 2.0


@dataclass(frozen=True)
class MemoryEstimate:
    """Where one GPU's memory goes under a server config; every figure in GiB, per GPU.

    ``weights_gib + draft_gib + activation_gib + kv_cache_gib`` plus the part of ``overhead_gib``
    inside the budget (workspaces; from 0.21 the CUDA graphs too) fill ``budget_gib``; the rest
    of ``overhead_gib`` (CUDA context; graphs before 0.21, NCCL from 0.21) lies outside it and
    must fit in what the budget leaves of ``gpu_total_gib``.

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
        rules: the vLLM releases whose rules produced the estimate (``"0.21+"``).
        block_tokens: tokens per KV-cache block under those rules.
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
    rules: str = "0.21+"
    block_tokens: int = BLOCK_TOKENS

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


def _drafter_bytes(draft: ModelSpec, server: ServerConfig) -> float:
    """Weight bytes the drafter adds: MTP layers share the target's embeddings and LM head."""
    if method_of(server.method).family is MethodFamily.MTP:
        return max(draft.weight_bytes - draft.embedding_params * 2.0, 0.0)
    return draft.weight_bytes


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
    *,
    version: VllmVersion | None = None,
    free_gib: float | None = None,
    inside_gib: float = 0.0,
) -> MemoryEstimate:
    """Predicts one GPU's memory use under ``server`` and whether vLLM ``version`` would start.

    Args:
        hardware: the GPUs; tensor parallelism uses ``server.tensor_parallel_size`` of them.
        target: the served model.
        draft: the draft model or EAGLE head (MTP layers come from the target).
        server: memory utilization, batched tokens, max model length, speculation, KV dtype.
        jitter_gib: hidden extra memory outside the budget (the simulated launcher's seeded
            variation, so borderline configs can still fail at launch); predictions use 0.
        version: whose memory rules apply (:func:`memory_rules`; None: the newest).
        free_gib: NVML's free memory on the fullest GPU before vLLM starts, where NVML is
            present; memory other processes hold then counts against the start-up.
        inside_gib: extra memory inside the budget, taken from the KV cache (negative: less
            than modelled); :func:`tuner.sim.oom_screen.memory_slacks` probes with it.

    Returns:
        The estimate; ``fits`` is False with vLLM's cause in ``reason`` when it would not start.

    Raises:
        ConfigError: the tensor-parallel size does not match the hardware or the model.
    """
    tp = server.tensor_parallel_size
    _check_parallel(hardware, target, tp)
    draft = drafter(target, draft, server)
    separate = method_of(server.method).family is MethodFamily.DRAFT
    rules = memory_rules(version)
    total = hardware.gpu.vram_gib
    budget = server.gpu_memory_utilization * total
    others = max(total - free_gib, 0.0) if free_gib is not None else 0.0
    tokens = effective_batched_tokens(server)
    weights = target.weight_bytes / tp / GIB
    activation = _activation_bytes(target, tp, tokens, sampler=True)
    nccl = NCCL_WORKSPACE_GIB if tp > 1 else 0.0
    graphs = _graphs_gib(target)
    draft_weights = 0.0
    dtype_scale = kv_cache_bytes_per_value(server) / 2.0
    per_token = kv_bytes_per_gpu(target, tp) * dtype_scale
    if draft is not None:
        # A draft on one GPU (draft TP 1) puts all of it on GPU 0, the GPU reported here; heads
        # and MTP layers are split like the target.
        draft_tp = draft_tensor_parallel(server) if separate else tp
        draft_weights = _drafter_bytes(draft, server) / draft_tp / GIB
        # The draft's profile pass runs after the target's; only its own activations add up.
        activation += _activation_bytes(draft, draft_tp, tokens, sampler=False)
        graphs += _graphs_gib(draft)
        per_token += kv_bytes_per_gpu(draft, draft_tp) * dtype_scale
    activation /= GIB
    inside = CUBLAS_WORKSPACE_GIB + (nccl if rules.nccl_in_budget else 0.0)
    inside += draft_logits_gib(target, server)
    inside += graphs if rules.graphs_in_budget else 0.0
    inside += inside_gib
    outside = CUDA_CONTEXT_GIB + (0.0 if rules.nccl_in_budget else nccl)
    outside += 0.0 if rules.graphs_in_budget else graphs
    kv_cache = budget - weights - draft_weights - activation - inside
    if rules.measured_kv_cache:
        kv_cache = _measured_kv_cache(
            budget - weights - draft_weights - inside,
            free=total - CUDA_CONTEXT_GIB - nccl - others - jitter_gib,
            held=weights + draft_weights + inside,
            transient=activation,
        )
    blocks = math.floor(kv_cache * GIB / per_token / rules.block_tokens) if kv_cache > 0 else 0
    kv_tokens = blocks * rules.block_tokens
    # Memory vLLM finds taken when it starts: its own context (and NCCL from 0.21), others'.
    held = CUDA_CONTEXT_GIB + (0.0 if rules.nccl_in_budget else nccl) + others + jitter_gib
    reason = _failure(
        rules,
        server,
        total=total,
        budget=budget,
        held=held,
        weights=weights + draft_weights,
        activation=activation,
        kv_cache=kv_cache,
        kv_tokens=kv_tokens,
        per_token=per_token,
        late=outside - CUDA_CONTEXT_GIB,
        workspace=CUBLAS_WORKSPACE_GIB + (nccl if rules.nccl_in_budget else 0.0),
    )
    return MemoryEstimate(
        gpu_total_gib=total,
        budget_gib=budget,
        weights_gib=weights,
        draft_gib=draft_weights,
        activation_gib=activation,
        overhead_gib=inside + outside,
        kv_cache_gib=kv_cache,
        kv_tokens=kv_tokens,
        fits=not reason,
        reason=reason,
        rules=rules.versions,
        block_tokens=rules.block_tokens,
    )


def _measured_kv_cache(in_budget: float, *, free: float, held: float, transient: float) -> float:
    """vLLM 0.34's ``measure_kv_cache_bytes``: what the budget leaves after what vLLM holds,
    capped by the memory free after warm-up less a margin, less the transient peak kept free."""
    margin = max(_MARGIN_FLOOR_GIB, _MARGIN_FRACTION * transient)
    return min(in_budget, free - held - margin) - transient


def max_num_seqs(server: ServerConfig) -> int:
    """The server's ``--max-num-seqs`` (a pass-through flag), else vLLM's default."""
    for key, value in server.extra_flags:
        if key.lstrip("-").replace("_", "-") == "max-num-seqs":
            return int(value)
    return DEFAULT_MAX_NUM_SEQS


def draft_logits_gib(target: ModelSpec, server: ServerConfig) -> float:
    """The buffer a sampling drafter keeps its proposals' logits in, per GPU (0: greedy)."""
    spec = server.speculative
    if spec is None or not samples_drafts(spec):
        return 0.0
    values = max_num_seqs(server) * spec.num_speculative_tokens * target.vocab
    return values * _LOGIT_BYTES / GIB


def _failure(  # noqa: PLR0913  (one keyword per memory term)
    rules: MemoryRules,
    server: ServerConfig,
    *,
    total: float,
    budget: float,
    held: float,
    weights: float,
    activation: float,
    kv_cache: float,
    kv_tokens: int,
    per_token: float,
    late: float,
    workspace: float,
) -> str:
    """vLLM's root-cause line for the first check that fails, in the order vLLM runs them."""
    util = server.gpu_memory_utilization
    free = total - held
    if rules.free_memory_check and free < budget:
        # vllm/v1/worker/utils.py request_memory, before anything is loaded.
        return (
            f"ValueError: Free memory on device cuda:0 ({free:.2f}/{total:.2f} GiB) on startup "
            f"is less than desired GPU memory utilization ({util}, {budget:.2f} GiB). Decrease "
            "GPU memory utilization or reduce GPU memory used by other processes."
        )
    if weights + workspace + held > total:
        return (
            "torch.OutOfMemoryError: CUDA out of memory while loading the model weights: "
            f"{weights:.2f} GiB of weights on a GPU with {total:.2f} GiB total capacity. Use "
            "more GPUs (tensor parallelism) or a quantized model."
        )
    if kv_cache <= 0:
        return (
            "ValueError: No available memory for the cache blocks. Try increasing "
            f"`gpu_memory_utilization` when initializing the engine (budget {budget:.2f} GiB, "
            f"weights {weights:.2f} GiB, activations {activation:.2f} GiB)."
        )
    if kv_tokens < server.max_model_len:
        needed = server.max_model_len * per_token / GIB
        return (
            f"ValueError: To serve at least one request with the model's max seq len "
            f"({server.max_model_len}), ({needed:.2f} GiB KV cache is needed, which is larger "
            f"than the available KV cache memory ({kv_cache:.2f} GiB). Based on the available "
            f"memory, the estimated maximum model length is {kv_tokens}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    if not rules.graphs_in_budget and budget + late + held > total:
        free_mib = max(total - budget - held, 0.0) * 1024
        return (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {late * 1024:.0f} "
            f"MiB. GPU 0 has a total capacity of {total:.2f} GiB of which {free_mib:.0f} MiB is "
            "free (while capturing CUDA graphs). Try lowering `gpu_memory_utilization`."
        )
    return ""


def adjust_memory(
    base: MemoryEstimate,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    inside_gib: float,
    outside_gib: float,
) -> MemoryEstimate:
    """``base`` with ``inside_gib`` more taken from the KV cache and ``outside_gib`` more held.

    ``base`` already checked the outside memory (it is the memory model's hidden overhead); this
    re-checks the KV cache and books both in the peak, as NVML would see them.
    """
    if not inside_gib and not outside_gib:
        return base
    per_token = kv_bytes_per_gpu(target, server.tensor_parallel_size)
    if (
        draft is not None
        and server.speculative
        and method_of(server.speculative.method).family is MethodFamily.DRAFT
    ):
        per_token += kv_bytes_per_gpu(draft, draft_tensor_parallel(server))
    kv = base.kv_cache_gib - inside_gib
    block = base.block_tokens
    tokens = math.floor(kv * GIB / per_token / block) * block if kv > 0 else 0
    reason = base.reason
    if not reason and tokens < server.max_model_len:
        reason = (
            f"ValueError: To serve at least one request with the models's max seq len "
            f"({server.max_model_len}), more KV cache is needed than the available KV cache "
            f"memory ({max(kv, 0.0):.2f} GiB). Try increasing `gpu_memory_utilization`."
        )
    return replace(
        base,
        overhead_gib=base.overhead_gib + inside_gib + outside_gib,
        kv_cache_gib=kv,
        kv_tokens=tokens,
        fits=not reason,
        reason=reason,
    )
