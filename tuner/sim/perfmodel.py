"""Roofline step times: how long one forward pass of a model takes on the given GPUs.

A pass moves bytes (weights once, plus the KV cache its sequences attend to) and does FLOPs (two a
weight a token, plus attention). Each GPU holds ``1/tp`` of both; the pass takes the longer of
bytes over memory bandwidth and FLOPs over compute, each scaled by an efficiency that real kernels
reach. Tensor parallelism then adds two all-reduces a layer (after attention and after the MLP);
over PCIe without peer-to-peer, as on GeForce cards, each one costs a large fixed latency, so a
small model split over two 4090s spends most of its time communicating. On top come the engine's
per-step costs (scheduling, sampling, streaming) that grow with the number of sequences.

A speculative step is K drafter passes plus one target pass that verifies K+1 tokens a sequence,
plus the speculative worker's bookkeeping for each verified token. The drafter is what the method
runs (:func:`drafter`): a draft model (all its layers); an EAGLE or EAGLE-3 head (one decoder
layer plus its LM head over its draft vocabulary, fed the target's hidden states, so no
embedding pass of its own); the target's MTP layers (one target layer and the target's LM head
each); nothing for ngram and suffix decoding, whose proposals are a lookup on the CPU per
sequence and step. At one request the target pass
costs what a plain decode costs, so accepted drafts come almost free; at dozens of requests the
verification turns compute-bound and the bookkeeping grows with the batch, and speculation loses.

Constants below are calibrated against the reference table in BRIEF.md (vLLM 0.7.2, 2x RTX 4090,
Qwen2.5-32B-Instruct-AWQ with a Qwen2.5-0.5B draft); ``tests/sim`` pins the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from tuner.catalog.gpus import Hardware, Interconnect
from tuner.catalog.models import ModelSpec, load_model, spec_from_config
from tuner.catalog.mtp import mtp_layers
from tuner.config.trial import BLOCK_METHODS, HEAD_METHODS, ServerConfig, SpecMethod
from tuner.sim.acceptance import acceptance_probability

__all__ = [
    "ForwardPass",
    "PerfModel",
    "StepShape",
    "acceptance_probability",
    "draft_tensor_parallel",
    "drafter",
    "kv_bytes_per_gpu",
    "mtp_module",
]

# Fraction of datasheet bandwidth a decode pass streams weights and KV at.
MEMORY_EFFICIENCY = 0.66
# Fraction of datasheet FP16 tensor throughput GEMMs reach; 4-bit kernels pay for dequantization.
COMPUTE_EFFICIENCY = 0.62
QUANTIZED_COMPUTE_EFFICIENCY = 0.56
# One all-reduce: a fixed latency plus the payload over the link.
# Infinity Fabric (AMD Instinct) has no public all-reduce figure here yet: NVLink's until a
# measurement says otherwise.
ALLREDUCE_LATENCY_S = {
    Interconnect.PCIE: 125e-6,
    Interconnect.NVLINK: 20e-6,
    Interconnect.INFINITY_FABRIC: 20e-6,
}
ALLREDUCE_LINK_EFFICIENCY = {
    Interconnect.PCIE: 0.8,
    Interconnect.NVLINK: 0.7,
    Interconnect.INFINITY_FABRIC: 0.7,
}
# Kernel launches per layer: a replayed CUDA graph (decode) versus eager launches (prefill).
LAUNCH_PER_LAYER_S = {True: 3e-6, False: 15e-6}
# Engine work per step outside the GPU: scheduler, sampler, detokenizer, output streaming.
STEP_OVERHEAD_S = 3.5e-3
STEP_PER_SEQ_S = 40e-6
# The speculative worker's bookkeeping per verified token (proposals, rejection sampler, KV slot
# juggling: Python objects in vLLM's V0 spec-decode worker). Together with the per-sequence cost
# of each draft pass (input preparation, sampling over the full vocabulary) it grows with the
# batch, which is why speculation loses under load: vLLM measured up to 1.8x slowdowns at high QPS.
SPEC_PER_TOKEN_S = 200e-6
DRAFT_PASS_OVERHEAD_S = 0.45e-3
DRAFT_PASS_PER_SEQ_S = 150e-6
# Prompt lookup on the CPU, per sequence and step (suffix decoding's tree walk is a CPU lookup
# too, in arctic-inference's C++, and is costed the same).
NGRAM_PER_SEQ_S = 60e-6
# A head or MTP pass is part of V1's batched proposer loop: less fixed cost than a separate draft
# model's pass, but input preparation, a launch and a sampling each (fitted with the EAGLE-3
# figure of benchmarks/simulator_reference.py).
HEAD_PASS_OVERHEAD_S = 0.6e-3
HEAD_PASS_PER_SEQ_S = 15e-6
# Extra first-token latency with speculation: the draft's prefill runs eagerly and the speculative
# worker sets up its first proposal before the first token streams out.
SPEC_FIRST_TOKEN_S = 26e-3

_ALLREDUCES_PER_LAYER = 2
_ACT_BYTES = 2  # activations travel as 16-bit values


@dataclass(frozen=True)
class ForwardPass:
    """What one forward pass of one model processes, summed over the sequences in the batch.

    Attributes:
        tokens: query tokens (decode tokens, verification tokens and prefill chunk tokens).
        seqs: sequences in the batch.
        context: KV-cache tokens read (each sequence's context once).
        attention: sum over query tokens of the context each attends to (drives attention FLOPs).
        graphed: a pure decode pass, replayed from a CUDA graph.
    """

    tokens: int
    seqs: int
    context: int
    attention: float
    graphed: bool


@dataclass(frozen=True)
class StepShape:
    """What one engine step schedules, as the step-time model needs it.

    Attributes:
        decodes: decoding sequences (each verifies 1+K tokens under speculation).
        decode_context: sum of their context lengths.
        chunks: ``(tokens already computed, chunk tokens)`` of each prefill chunk.
        first_tokens: prefills that complete in this step and sample a first token.
        graphed: a pure decode step, replayed from CUDA graphs.
        k: the K this step drafts, where a per-batch-size table sets it; None: the server's.
    """

    decodes: int
    decode_context: int
    chunks: tuple[tuple[int, int], ...]
    first_tokens: int
    graphed: bool
    k: int | None = None


def draft_tensor_parallel(server: ServerConfig) -> int:
    """Tensor-parallel size of the draft: the target's unless the server sets it (vLLM V0 flag).

    vLLM splits the draft over the target's GPUs by default; the pass-through flag
    ``speculative-draft-tensor-parallel-size 1`` keeps it on one GPU and saves its communication.
    """
    for name, value in server.extra_flags:
        if name.lstrip("-").replace("_", "-") == "speculative-draft-tensor-parallel-size":
            return max(1, int(value))
    return server.tensor_parallel_size


@cache
def mtp_module(target: ModelSpec) -> ModelSpec:
    """The target's MTP layers as a model of their own: its layers, its shared LM head.

    Raises:
        ValueError: the target carries no MTP layers.
    """
    layers = mtp_layers(target.config)
    if layers < 1:
        raise ValueError(f"{target.hf_id} has no MTP layers")
    config = {**target.config, "num_hidden_layers": layers, "first_k_dense_replace": 0}
    config["mlp_only_layers"] = []
    return spec_from_config(
        f"{target.hf_id} (MTP)", config, family=target.tokenizer_family, source=target.source
    )


def drafter(target: ModelSpec, draft: ModelSpec | None, server: ServerConfig) -> ModelSpec | None:
    """What proposes the tokens: the draft model, the EAGLE head, the MTP layers, or None.

    A head the caller did not load (the engine passes a draft only for ``draft_model``) is
    loaded here by its id.
    """
    spec = server.speculative
    if spec is None:
        return None
    if spec.method == SpecMethod.DRAFT_MODEL:
        return draft
    if spec.method in HEAD_METHODS | BLOCK_METHODS and spec.model:
        return (
            draft
            if draft is not None and draft.hf_id == spec.model
            else load_model(str(spec.model))
        )
    if spec.method == SpecMethod.MTP:
        return mtp_module(target)
    return None


def kv_bytes_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV-cache bytes one token takes on each GPU (KV heads split across GPUs, never below one)."""
    heads = math.ceil(model.kv_heads / tp)
    return 2 * model.layers * heads * model.head_dim * 2


class PerfModel:
    """Forward-pass and step-overhead times for one server config on one hardware set.

    Args:
        hardware: the GPUs (their catalog figures).
        target: the served model.
        draft: the draft model or EAGLE head (see :func:`drafter`).
        server: tensor-parallel size and the speculative settings come from here.
    """

    def __init__(
        self, hardware: Hardware, target: ModelSpec, draft: ModelSpec | None, server: ServerConfig
    ) -> None:
        self.hardware = hardware
        method = server.speculative.method if server.speculative is not None else ""
        self.target = target
        self.draft = drafter(target, draft, server)
        self.tp = server.tensor_parallel_size
        self.k = server.k
        # A lookup, no drafter pass (ngram_gpu on ngram's physics: tuner.sim.acceptance).
        self.ngram = method in (SpecMethod.NGRAM, SpecMethod.NGRAM_GPU, SpecMethod.SUFFIX)
        # Heads and MTP layers run inside the target's worker, split like the target.
        separate = method == SpecMethod.DRAFT_MODEL
        self.draft_tp = draft_tensor_parallel(server) if separate else self.tp
        self._pass_overhead = (
            (DRAFT_PASS_OVERHEAD_S, DRAFT_PASS_PER_SEQ_S)
            if separate
            else (HEAD_PASS_OVERHEAD_S, HEAD_PASS_PER_SEQ_S)
        )
        gpu = hardware.gpu
        self._bandwidth = gpu.bandwidth_gbs * 1e9 * MEMORY_EFFICIENCY
        self._flops = gpu.fp16_tflops * 1e12
        self._ar_latency = ALLREDUCE_LATENCY_S[gpu.interconnect]
        self._ar_bandwidth = gpu.link_gbs * 1e9 * ALLREDUCE_LINK_EFFICIENCY[gpu.interconnect]

    def _forward_s(self, model: ModelSpec, tp: int, batch: ForwardPass) -> float:
        if batch.tokens <= 0:
            return 0.0
        # A mixture of experts streams only the experts its tokens are routed to.
        bytes_moved = model.weights_read(batch.tokens) / tp + batch.context * kv_bytes_per_gpu(
            model, tp
        )
        memory_s = bytes_moved / self._bandwidth
        attention_flops = 4.0 * model.layers * model.heads * model.head_dim * batch.attention
        flops = (batch.tokens * model.flops_per_token + attention_flops) / tp
        efficiency = QUANTIZED_COMPUTE_EFFICIENCY if model.quantized else COMPUTE_EFFICIENCY
        compute_s = flops / (self._flops * efficiency)
        comm_s = 0.0
        if tp > 1:
            # Ring all-reduce: each GPU sends and receives 2(tp-1)/tp of the payload.
            payload = batch.tokens * model.hidden * _ACT_BYTES * 2 * (tp - 1) / tp
            per_call = self._ar_latency + payload / self._ar_bandwidth
            comm_s = _ALLREDUCES_PER_LAYER * model.layers * per_call
        launch_s = model.layers * LAUNCH_PER_LAYER_S[batch.graphed]
        return max(memory_s, compute_s) + comm_s + launch_s

    def target_pass_s(self, batch: ForwardPass) -> float:
        """Seconds for one forward pass of the target model."""
        return self._forward_s(self.target, self.tp, batch)

    def draft_pass_s(self, batch: ForwardPass) -> float:
        """Seconds for one forward pass of the draft model (0 without a draft)."""
        if self.draft is None or batch.tokens <= 0:
            return 0.0
        fixed, per_seq = self._pass_overhead
        return self._forward_s(self.draft, self.draft_tp, batch) + fixed + per_seq * batch.seqs

    @staticmethod
    def step_overhead_s(seqs: int, verified: int, ngram: bool) -> float:
        """Seconds the engine spends per step outside the forward passes.

        Args:
            seqs: sequences in the step.
            verified: speculative decodes times K+1, the tokens the target verifies (0: none).
            ngram: whether the proposals come from prompt lookup.
        """
        overhead = STEP_OVERHEAD_S + STEP_PER_SEQ_S * seqs
        if verified:
            overhead += SPEC_PER_TOKEN_S * verified
        if ngram:
            overhead += NGRAM_PER_SEQ_S * seqs
        return overhead

    def step_s(self, shape: StepShape) -> float:
        """Seconds one engine step of this shape takes, noise-free.

        The target runs one pass over every decode's 1+K tokens and every prefill chunk; a draft
        model runs K passes over the decodes, its first pass also covering the prefill chunks.
        """
        k = self.k if shape.k is None else shape.k
        per_decode = 1 + k
        dec_tokens = per_decode * shape.decodes
        pre_tokens = sum(chunk for _, chunk in shape.chunks)
        pre_context = sum(done + chunk for done, chunk in shape.chunks)
        pre_attention = sum(chunk * (done + chunk / 2) for done, chunk in shape.chunks)
        seqs = shape.decodes + len(shape.chunks)
        seconds = self.target_pass_s(
            ForwardPass(
                tokens=dec_tokens + pre_tokens,
                seqs=seqs,
                context=shape.decode_context + pre_context,
                attention=per_decode * shape.decode_context + pre_attention,
                graphed=shape.graphed,
            )
        )
        if self.draft is not None and (k or not shape.decodes):
            for i in range(k if shape.decodes else 1):
                first = i == 0
                seconds += self.draft_pass_s(
                    ForwardPass(
                        tokens=shape.decodes + (pre_tokens if first else 0),
                        seqs=seqs if first else shape.decodes,
                        context=shape.decode_context + (pre_context if first else 0),
                        attention=shape.decode_context + (pre_attention if first else 0),
                        graphed=shape.graphed,
                    )
                )
        verified = dec_tokens if k else 0
        seconds += self.step_overhead_s(seqs, verified, self.ngram and k > 0)
        if k and shape.first_tokens:
            seconds += SPEC_FIRST_TOKEN_S
        return seconds
