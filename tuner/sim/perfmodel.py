"""Roofline step times: how long one forward pass of a model takes on the given GPUs.

A pass moves bytes (weights once, plus the KV cache its sequences attend to) and does FLOPs (two a
weight a token, plus attention). Each GPU holds ``1/tp`` of both; the pass takes the longer of
bytes over memory bandwidth and FLOPs over compute, each scaled by the share real kernels reach
(per GPU class; 4-bit and 8-bit kernels reach less, as they dequantize on the way). Tensor
parallelism then adds two all-reduces a layer (after attention and after the MLP); over PCIe
without peer-to-peer, as on GeForce cards, each one costs a large fixed latency, so a small model
split over two 4090s spends most of its time communicating. On top come the engine's per-step
costs (scheduling, sampling, streaming) that grow with the number of sequences; they depend on
the engine generation (:func:`tuner.sim.calibration.engine_generation`): vLLM's V0 engine spent
milliseconds a step in Python, V1 overlaps most of it with the GPU.

A speculative step is K drafter passes plus one target pass that verifies K+1 tokens a sequence,
plus the speculative bookkeeping for each verified token. The drafter is what the method runs
(:func:`drafter`): a draft model (all its layers); an EAGLE or EAGLE-3 head (one decoder layer
plus its LM head over its draft vocabulary, fed the target's hidden states, so no embedding pass
of its own); the target's MTP layers (one target layer and the target's LM head each); nothing
for ngram and suffix decoding, whose proposals are a lookup on the CPU per sequence and step.
Each drafter pass also has a fixed cost beyond its weights (its inputs, launches and sampling):
a small draft model is not bandwidth-bound but launch-bound, which is why a 0.6B draft costs a
third of an 8B target's pass on one H100 (benchmarks/reference_figures.yaml). At one request the
target pass costs what a plain decode costs, so accepted drafts come almost free; at dozens of
requests the verification turns compute-bound, and speculation loses.

Constants live in :mod:`tuner.sim.calibration`, fitted to the public figures that
``benchmarks/simulator_reference.py`` prints next to their predictions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec, load_model, needs_heterogeneous_vocab, spec_from_config
from tuner.catalog.mtp import mtp_layers
from tuner.config.methods import MethodFamily, method_of
from tuner.config.trial import ServerConfig, SpeculativeConfig
from tuner.config.verification import DraftHead
from tuner.config.vllm_runner import ModelRunner, predict_runner
from tuner.config.vllm_version import NEWEST_KNOWN, VllmVersion
from tuner.sim.acceptance import acceptance_probability
from tuner.sim.calibration import SHIPPED_STEPS, StepConstants, engine_generation

__all__ = [
    "ForwardPass",
    "PerfModel",
    "StepShape",
    "StepWork",
    "acceptance_probability",
    "draft_tensor_parallel",
    "drafter",
    "kv_bytes_per_gpu",
    "mtp_module",
    "verifies_adaptively",
]

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
    """What one step schedules, as the step-time model needs it.

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


@dataclass(frozen=True, slots=True)
class StepWork:
    """What one step asks of each GPU.

    Attributes:
        bytes: bytes its passes stream (weights and KV cache).
        flops: floating-point operations they do.
    """

    bytes: float
    flops: float


@dataclass(frozen=True, slots=True)
class _Weights:
    """One model's per-pass constants on its GPUs: the step model prices a pass hundreds of
    thousands of times a study, and these never change within one server config."""

    spec: ModelSpec
    tp: int
    kv_bytes: int  # KV-cache bytes a token of context reads on each GPU
    bandwidth: float  # bytes/s the weights and KV stream at
    attention_flops: float  # FLOPs per unit of ForwardPass.attention
    flops_per_token: float
    flops_per_s: float
    reduced_bytes: int  # bytes each token's all-reduce payload carries, times (tp - 1)
    allreduces: int  # all-reduces per pass
    launch_s: Mapping[bool, float]  # kernel launches of a pass, by graphed


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

    A head the caller did not load (the scheduler passes a draft only for ``draft_model``) is
    loaded here by its id.
    """
    spec = server.speculative
    if spec is None:
        return None
    family = method_of(spec.method).family
    if family is MethodFamily.DRAFT:
        return draft
    if family is MethodFamily.HEAD or (family is MethodFamily.BLOCK and spec.model):
        head = (
            draft
            if draft is not None and draft.hf_id == spec.model
            else load_model(str(spec.model))
        )
        return _quantized_head(head, spec.draft_lm_head_quantization)
    if family is MethodFamily.MTP:
        return mtp_module(target)
    return None  # lookups; a DSpark drafter whose stages ship in the target (DeepSeek-V4)


# Bits per LM-head weight under draft_lm_head_quantization: fp8 one byte, nvfp4 four bits plus
# an fp8 scale per 16 weights.
_HEAD_BITS = {DraftHead.FP8: 8.0, DraftHead.NVFP4: 4.5}


def _quantized_head(head: ModelSpec, quantization: DraftHead) -> ModelSpec:
    """``head`` with its LM head (vocabulary x hidden, 16-bit in the checkpoint) at the bits
    ``quantization`` stores (vLLM 0.33+): fewer bytes to hold and to read each draft pass. The
    acceptance is taken as unchanged: no public figure measures what it costs. MTP layers
    project through the target's LM head and are left as they are."""
    bits = _HEAD_BITS.get(quantization)
    if bits is None:
        return head
    vocab = int(head.config.get("draft_vocab_size") or head.vocab)  # EAGLE-3's own vocabulary
    saved = vocab * head.hidden * 2.0 * (1.0 - bits / 16.0)
    return replace(head, weight_bytes=max(head.weight_bytes - saved, 0.0))


# Model Runner V2 is the default for every architecture from this release (vllm_runner.py).
_V2_DEFAULT = VllmVersion(0, 29, 0)


def _on_v2(
    server: ServerConfig, target: ModelSpec, draft: ModelSpec | None, version: VllmVersion | None
) -> bool:
    """Whether vLLM ``version`` (None: the newest) runs ``server`` on Model Runner V2."""
    release = version or NEWEST_KNOWN
    if release < _V2_DEFAULT:
        return False
    spec = server.speculative
    mixed = (
        spec is not None
        and method_of(spec.method).family is MethodFamily.DRAFT
        and draft is not None
        and needs_heterogeneous_vocab(target, draft)
    )
    return predict_runner(server, release, heterogeneous_vocab=mixed).runner is ModelRunner.V2


def kv_bytes_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV-cache bytes one token takes on each GPU (KV heads split across GPUs, never below one)."""
    heads = math.ceil(model.kv_heads / tp)
    return 2 * model.layers * heads * model.head_dim * 2


def verifies_adaptively(speculative: SpeculativeConfig | None) -> bool:
    """Whether each step's draft length is chosen by adaptive verification
    (``enable_adaptive_verification``; :meth:`PerfModel.adaptive_k`)."""
    return speculative is not None and speculative.enable_adaptive_verification


class PerfModel:
    """Forward-pass and step-overhead times for one server config on one hardware set.

    Args:
        hardware: the GPUs (their catalog figures).
        target: the served model.
        draft: the draft model or EAGLE head (see :func:`drafter`).
        server: tensor-parallel size and the speculative settings come from here.
        version: the vLLM release serving it (None: the newest), which picks the engine.
        steps: the constants (default: the shipped calibration).
    """

    def __init__(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        *,
        version: VllmVersion | None = None,
        steps: StepConstants = SHIPPED_STEPS,
    ) -> None:
        self.hardware = hardware
        self.target = target
        self.draft = drafter(target, draft, server)
        self.tp = server.tensor_parallel_size
        self.k = server.k
        method = server.method
        own = method_of(method)
        spec = server.speculative
        self.ngram = own.family is MethodFamily.LOOKUP  # a lookup, no drafter pass
        # One drafter pass proposes all K tokens: block drafters, and P-EAGLE heads.
        self.parallel = spec is not None and (own.one_pass or spec.parallel_drafting)
        self.adaptive = verifies_adaptively(spec)
        self.version = version or NEWEST_KNOWN
        self.engine = engine_generation(version, method)
        self.costs = steps.engines[self.engine]
        self.steps = steps
        self.runner_saving_s = (
            steps.v2_runner_saving_s if _on_v2(server, target, draft, version) else 0.0
        )
        # Heads and MTP layers run inside the target's worker, split like the target.
        separate = own.family is MethodFamily.DRAFT
        self.draft_tp = draft_tensor_parallel(server) if separate else self.tp
        self._pass_fixed = self.costs.draft_pass_s if separate else self.costs.head_pass_s
        gpu = hardware.gpu
        self.memory = gpu.memory
        self._bandwidth = gpu.bandwidth_gbs * 1e9 * steps.bandwidth[self.memory]
        self._flops = gpu.fp16_tflops * 1e12
        self._ar_latency = steps.allreduce_latency_s[gpu.interconnect]
        self._ar_bandwidth = gpu.link_gbs * 1e9 * steps.allreduce_link[gpu.interconnect]
        self._launch = steps.launch_per_layer_s[self.memory]
        self._target_weights = self._weights(target, self.tp)
        self._draft_weights = self._weights(self.draft, self.draft_tp) if self.draft else None

    @property
    def first_token_s(self) -> float:
        """Speculative set-up before a request's first token streams (0 without speculation)."""
        return self.costs.first_token_s if self.k else 0.0

    def _roofline(self, model: _Weights, batch: ForwardPass) -> tuple[float, float]:
        """Bytes one pass moves and FLOPs it does, on each GPU."""
        # A mixture of experts streams only the experts its tokens are routed to; a sequence's
        # drafted tokens route partly as its first token does.
        drafted = batch.tokens - batch.seqs if batch.graphed else 0
        routed = batch.tokens - drafted * (1.0 - self.steps.moe_draft_routing)
        kv_bytes = batch.context * model.kv_bytes
        bytes_moved = model.spec.weights_read(round(routed)) / model.tp + kv_bytes
        attention_flops = model.attention_flops * batch.attention
        flops = (batch.tokens * model.flops_per_token + attention_flops) / model.tp
        return bytes_moved, flops

    def _forward_s(self, model: _Weights, batch: ForwardPass) -> float:
        if batch.tokens <= 0:
            return 0.0
        bytes_moved, flops = self._roofline(model, batch)
        memory_s = bytes_moved / model.bandwidth
        compute_s = flops / model.flops_per_s
        comm_s = 0.0
        if model.tp > 1:
            # Ring all-reduce: each GPU sends and receives 2(tp-1)/tp of the payload.
            payload = batch.tokens * model.reduced_bytes / model.tp
            per_call = self._ar_latency + payload / self._ar_bandwidth
            comm_s = model.allreduces * per_call
        return max(memory_s, compute_s) + comm_s + model.launch_s[batch.graphed]

    def _weights(self, model: ModelSpec, tp: int) -> _Weights:
        """What a forward pass of ``model`` split over ``tp`` GPUs costs per unit, once."""
        steps = self.steps
        efficiency = steps.quantized_compute if model.quantized else steps.compute
        return _Weights(
            spec=model,
            tp=tp,
            kv_bytes=kv_bytes_per_gpu(model, tp),
            bandwidth=self._bandwidth * (steps.quantized_bandwidth if model.quantized else 1.0),
            attention_flops=4.0 * model.layers * model.heads * model.head_dim,
            flops_per_token=model.flops_per_token,
            flops_per_s=self._flops * efficiency,
            reduced_bytes=model.hidden * _ACT_BYTES * 2 * (tp - 1),
            allreduces=_ALLREDUCES_PER_LAYER * model.layers,
            launch_s={graphed: model.layers * self._launch[graphed] for graphed in (False, True)},
        )

    def target_pass_s(self, batch: ForwardPass) -> float:
        """Seconds for one forward pass of the target model."""
        return self._forward_s(self._target_weights, batch)

    def draft_pass_s(self, batch: ForwardPass) -> float:
        """Seconds for one forward pass of the drafter (0 for lookups and no speculation).

        A DSpark drafter shipped inside the target's checkpoint has no model of its own here:
        its pass costs the fixed and per-sequence parts only.
        """
        if self.ngram or self.k == 0 or batch.tokens <= 0:
            return 0.0
        per_seq = self.costs.drafter_per_seq_s * batch.seqs
        weights = self._forward_s(self._draft_weights, batch) if self._draft_weights else 0.0
        return weights + self._pass_fixed + per_seq

    def step_overhead_s(self, seqs: int, verified: int, ngram: bool) -> float:
        """Seconds the engine spends per step outside the forward passes.

        Args:
            seqs: sequences in the step.
            verified: speculative decodes times K+1, the tokens the target verifies (0: none).
            ngram: whether the proposals come from prompt lookup.
        """
        costs = self.costs
        overhead = max(costs.step_s - self.runner_saving_s, 0.0) + costs.per_seq_s * seqs
        if verified:
            overhead += costs.spec_per_token_s * verified + self.adaptive_step_s(verified)
        if ngram:
            overhead += costs.lookup_per_seq_s * seqs
        return overhead

    def adaptive_step_s(self, verified: int) -> float:
        """Adaptive verification's own work in a step that verifies ``verified`` tokens (its
        confidence scores and per-request budgets; 0 where it is off or nothing is verified):
        part of :meth:`step_overhead_s`, apart so that a twin can scale it on its own."""
        return self.steps.adaptive_step_s if verified and self.adaptive else 0.0

    def adaptive_k(self, decodes: int, context: int, reach: Sequence[float], graphed: bool) -> int:
        """Adaptive verification's budget: the K that verifies the most expected tokens per
        second for a batch of ``decodes`` sequences whose positions are reached with ``reach``.

        vLLM sizes each request's budget from its drafter's confidence; for requests alike, the
        budgets settle where the batch's expected tokens per second peak, which is this K: the
        full K at a few requests, less where verification turns compute-bound.
        """
        best, best_rate = self.k, 0.0
        for k in range(self.k + 1):
            shape = StepShape(decodes, context, (), 0, graphed, k=k)
            rate = (1 + sum(reach[:k])) / self.step_s(shape)
            if rate > best_rate:
                best, best_rate = k, rate
        return best

    def step_s(self, shape: StepShape) -> float:
        """Seconds one step of this shape takes, noise-free.

        The target runs one pass over every decode's 1+K tokens and every prefill chunk; a draft
        model runs K passes over the decodes, its first pass also covering the prefill chunks
        (a block drafter or P-EAGLE head: one pass over K positions a decode).
        """
        k = self.k if shape.k is None else shape.k
        target, drafts = self._passes(shape, k)
        seconds = self.target_pass_s(target)
        if drafts is not None:
            first, later, passes = drafts
            seconds += self.draft_pass_s(first)
            if passes > 1:
                # Every later pass covers the decodes alone, in the same seconds: priced once,
                # added pass by pass as before (the sum's rounding stays the same).
                again = self.draft_pass_s(later)
                for _ in range(passes - 1):
                    seconds += again
        verified = (1 + k) * shape.decodes if k else 0
        seconds += self.step_overhead_s(target.seqs, verified, self.ngram and k > 0)
        if k and shape.first_tokens:
            seconds += self.first_token_s
        return seconds

    def step_work(self, shape: StepShape) -> StepWork:
        """What one step of this shape moves and computes on each GPU (what
        :mod:`tuner.sim.power` draws power from): the bytes its passes stream and the FLOPs
        they do. The step's other seconds (launches, all-reduces, the engine) do neither."""
        k = self.k if shape.k is None else shape.k
        target, drafts = self._passes(shape, k)
        moved, flops = (
            self._roofline(self._target_weights, target) if target.tokens > 0 else (0.0, 0.0)
        )
        drafter = self._draft_weights
        if drafts is not None and drafter is not None and not self.ngram and self.k:
            first, later, passes = drafts
            for batch, times in ((first, 1), (later, passes - 1)):
                if batch.tokens > 0 and times > 0:
                    more_bytes, more_flops = self._roofline(drafter, batch)
                    moved += times * more_bytes
                    flops += times * more_flops
        return StepWork(moved, flops)

    def drafting_passes(self, k: int) -> tuple[int, int]:
        """The drafter's passes in a decode step at ``k``, and the positions each decode
        drafts in a pass: one pass over all K for a block drafter, a P-EAGLE head or parallel
        drafting, else K passes of one."""
        return (1, k) if self.parallel else (k, 1)

    def _passes(
        self, shape: StepShape, k: int
    ) -> tuple[ForwardPass, tuple[ForwardPass, ForwardPass, int] | None]:
        """The target's pass of a step, and the drafter's (its first pass, each later pass
        and how many passes in all; None when nothing drafts)."""
        per_decode = 1 + k
        dec_tokens = per_decode * shape.decodes
        pre_tokens = sum(chunk for _, chunk in shape.chunks)
        pre_context = sum(done + chunk for done, chunk in shape.chunks)
        pre_attention = sum(chunk * (done + chunk / 2) for done, chunk in shape.chunks)
        seqs = shape.decodes + len(shape.chunks)
        target = ForwardPass(
            tokens=dec_tokens + pre_tokens,
            seqs=seqs,
            context=shape.decode_context + pre_context,
            attention=per_decode * shape.decode_context + pre_attention,
            graphed=shape.graphed,
        )
        if not (k or not shape.decodes):
            return target, None
        passes, per_pass = self.drafting_passes(k)
        if not shape.decodes:  # a prefill-only step: one pass over its chunks
            passes = 1
        first = ForwardPass(
            tokens=per_pass * shape.decodes + pre_tokens,
            seqs=seqs,
            context=shape.decode_context + pre_context,
            attention=shape.decode_context + pre_attention,
            graphed=shape.graphed,
        )
        later = ForwardPass(
            tokens=per_pass * shape.decodes,
            seqs=shape.decodes,
            context=shape.decode_context,
            attention=shape.decode_context,
            graphed=shape.graphed,
        )
        return target, (first, later, passes)
