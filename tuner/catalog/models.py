"""Models by Hugging Face id or folder, and whether a draft can speculate for a target.

Every :class:`ModelSpec` is read from a ``config.json`` by :mod:`tuner.catalog.hf_config`: the
built-in catalog's (:mod:`tuner.catalog.seed`, offline), a local model folder's, or any Hub
model's through ``huggingface_hub`` (:mod:`tuner.catalog.hub`, cache first).

Draft compatibility follows what vLLM checks, per version (see :func:`check_draft`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tuner.catalog.drafters import block_kind, drafter_params
from tuner.catalog.files import is_file
from tuner.catalog.heads import HEADS, head_kind, head_params, is_head
from tuner.catalog.hf_config import (
    architecture,
    expert_weight_bytes,
    quantization_of,
    weight_bytes,
)
from tuner.catalog.seed import SEED
from tuner.catalog.seed_drafters import DRAFTERS
from tuner.errors import ConfigError, IncompatibleDraftError

__all__ = [
    "CATALOG",
    "ModelSpec",
    "check_draft",
    "load_model",
    "model_from_config",
    "needs_heterogeneous_vocab",
    "spec_from_config",
]

_UNQUANTIZED = frozenset({"bf16", "fp16", "fp32"})


@dataclass(frozen=True)
class ModelSpec:
    """What speed, memory and vLLM's checks depend on, for one checkpoint.

    Attributes:
        params: every parameter, embeddings and all experts included (memory).
        active_params: the parameters one token runs through (compute): all of them for a
            dense model, the routed experts only for a mixture of experts.
        vocab: the ``vocab_size`` of ``config.json`` (embedding rows), which vLLM compares.
        quantization: ``bf16``, ``fp16``, ``awq``, ``gptq-int4``, ``fp8``, ``mxfp4``,
            ``compressed-tensors-w4``, ...
        weight_bytes: bytes of weights in GPU memory, every tensor-parallel shard together.
        config: the ``config.json`` it was read from (what real vLLM would read).
        source: where the numbers came from.
    """

    hf_id: str
    tokenizer_family: str
    params: float
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    quantization: str
    active_params: float
    weight_bytes: float
    experts: int = 0
    active_experts: int = 0
    expert_weight_bytes: float = 0.0  # the routed experts' share of weight_bytes
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    source: str = field(default="", compare=False)

    @property
    def embedding_params(self) -> float:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across all layers (16-bit K and V)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @property
    def flops_per_token(self) -> float:
        """Matmul FLOPs for one token's forward pass: 2 per active weight, input embedding out."""
        lookup = self.vocab * self.hidden * (0 if self.tied_embeddings else 1)
        return 2.0 * (self.active_params - lookup)

    @property
    def quantized(self) -> bool:
        return self.quantization not in _UNQUANTIZED

    def weights_read(self, tokens: int) -> float:
        """Weight bytes one forward pass over ``tokens`` tokens streams from memory.

        A dense model reads all of them; a mixture of experts reads its dense part and only the
        experts its tokens are routed to (uniform routing: each token picks ``active_experts``).
        """
        if not self.experts or tokens <= 0:
            return self.weight_bytes
        untouched = (1 - self.active_experts / self.experts) ** tokens
        return self.weight_bytes - self.expert_weight_bytes * untouched


def spec_from_config(
    hf_id: str,
    config: Mapping[str, Any],
    *,
    family: str,
    params: float | None = None,
    source: str = "",
) -> ModelSpec:
    """Builds a :class:`ModelSpec` from a parsed ``config.json``.

    Args:
        hf_id: the id or path vLLM is given.
        config: the parsed ``config.json``.
        family: the tokenizer family (drafts must share the target's).
        params: a published parameter count, when known (else counted from the shapes).
        source: where ``config`` came from, for messages and ``spectune models``.

    Raises:
        ConfigError: a shape number is missing.
    """
    arch = architecture(config, source or hf_id)
    counted = arch.params
    # A head or a block drafter shares the target's embeddings: its own parameters are fewer
    # than its shapes say.
    own = (
        head_params(config)
        if is_head(config, hf_id)
        else drafter_params(config)
        if block_kind(config, hf_id)
        else counted
    )
    total = params or own
    return ModelSpec(
        hf_id=hf_id,
        tokenizer_family=family,
        params=total,
        layers=arch.layers,
        hidden=arch.hidden,
        intermediate=arch.intermediate,
        heads=arch.heads,
        kv_heads=arch.kv_heads,
        head_dim=arch.head_dim,
        vocab=arch.vocab,
        tied_embeddings=arch.tied_embeddings,
        quantization=quantization_of(config),
        active_params=arch.active_params * total / counted,
        weight_bytes=weight_bytes(config, arch) * total / counted,
        experts=arch.experts,
        active_experts=arch.active_experts if arch.experts else 0,
        expert_weight_bytes=expert_weight_bytes(config, arch) * total / counted,
        config=dict(config),
        source=source,
    )


_FAMILY = {e.hf_id: e.family for e in SEED}
CATALOG: tuple[ModelSpec, ...] = tuple(
    spec_from_config(e.hf_id, e.config, family=e.family, params=e.params, source=e.where)
    for e in SEED
) + tuple(  # heads speak their target's tokenizer
    spec_from_config(h.hf_id, h.config, family=_FAMILY[h.targets[0]], source=h.where)
    for h in (*HEADS, *DRAFTERS)
)

_BY_ID = {m.hf_id.lower(): m for m in CATALOG}


def _family(tokenizer: Mapping[str, Any] | None, config: Mapping[str, Any]) -> str:
    """Names the vocabulary: a fingerprint of tokenizer.json's vocab when there is one."""
    model = tokenizer.get("model") if tokenizer else None
    vocab = model.get("vocab") if isinstance(model, Mapping) else None
    if vocab:
        digest = hashlib.sha256(json.dumps(vocab, sort_keys=True).encode()).hexdigest()[:12]
        return f"tokenizer-{digest}"
    return f"{config.get('model_type', 'unknown')}-vocab{config.get('vocab_size')}"


def model_from_config(directory: Path) -> ModelSpec:
    """Builds a :class:`ModelSpec` from a local Hugging Face model directory's ``config.json``.

    Raises:
        ConfigError: no readable ``config.json`` or a missing shape number.
    """
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text())
        tokenizer_path = directory / "tokenizer.json"
        tokenizer = json.loads(tokenizer_path.read_text()) if tokenizer_path.is_file() else None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"model directory {directory} has no usable config.json ({exc}): point at a Hugging "
            "Face model folder with hidden_size, num_attention_heads, num_hidden_layers, "
            "intermediate_size and vocab_size"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(f"model directory {directory}: config.json is not a JSON object")
    return spec_from_config(
        str(directory), config, family=_family(tokenizer, config), source=str(path)
    )


@cache
def _from_hub(hf_id: str) -> ModelSpec:
    # Here, not at the top: huggingface_hub and its HTTP client take a second to import, and
    # catalog models, local folders and `spectune --help` never need them.
    from tuner.catalog.hub import hub_files

    files = hub_files(hf_id)
    return spec_from_config(
        hf_id,
        files.config,
        family=_family(files.tokenizer, files.config),
        source=f"https://huggingface.co/{hf_id} (config.json via huggingface_hub)",
    )


def load_model(name: str) -> ModelSpec:
    """Finds a model: a catalog id (case-insensitive), a local directory, or any Hub id.

    Raises:
        ConfigError: none of these, in one line (an offline miss, a gated repo, an unknown id).
    """
    found = _BY_ID.get(name.strip().lower())
    if found is not None:
        return found
    directory = Path(name).expanduser()
    if is_file(directory / "config.json"):
        return model_from_config(directory)
    from tuner.catalog.hub import looks_like_hub_id  # see _from_hub

    if looks_like_hub_id(name.strip()):
        return _from_hub(name.strip())
    raise ConfigError(
        f"unknown model {name!r}: use a Hugging Face id (e.g. Qwen/Qwen2.5-32B-Instruct-AWQ; "
        "`spectune models` lists the built-in ones) or a local model directory containing "
        "config.json"
    )


def needs_heterogeneous_vocab(target: ModelSpec, draft: ModelSpec) -> bool:
    """Whether vLLM sees different vocabulary sizes (``config.json``'s ``vocab_size``).

    vLLM 0.32 compares ``ModelConfig.get_vocab_size()`` of both (``vllm/config/speculative.py``,
    ``verify_equal_vocab_size_if_draft_model``) unless ``use_heterogeneous_vocab`` is set.
    """
    return target.vocab != draft.vocab


def check_draft(target: ModelSpec, draft: ModelSpec) -> None:
    """Rejects a draft that cannot speculate for ``target`` on any vLLM release: the
    tokenizers must be the same (or the draft proposes ids that mean other tokens) and the
    draft smaller than the target. Which releases take different vocabulary sizes is the
    draft-model method's rule (:mod:`tuner.config.methods.draft_model`).

    Raises:
        IncompatibleDraftError: one line naming the pair, the reason and the fix.
    """
    if is_head(draft.config, draft.hf_id):
        raise IncompatibleDraftError(
            f"{draft.hf_id} is an EAGLE head, not a draft model: list it under method "
            f"{head_kind(draft.config, draft.hf_id)} (it needs the target's hidden states)"
        )
    if block_kind(draft.config, draft.hf_id):
        raise IncompatibleDraftError(
            f"{draft.hf_id} is a {block_kind(draft.config, draft.hf_id)} drafter, not a draft "
            f"model: list it under method {block_kind(draft.config, draft.hf_id)} (it needs the "
            "target's hidden states)"
        )
    if draft.tokenizer_family != target.tokenizer_family:
        raise IncompatibleDraftError(
            f"draft {draft.hf_id} uses the {draft.tokenizer_family} tokenizer (vocab "
            f"{draft.vocab}) but target {target.hf_id} uses {target.tokenizer_family} (vocab "
            f"{target.vocab}): pick a draft of the target's family"
        )
    if draft.params >= target.params:
        raise IncompatibleDraftError(
            f"draft {draft.hf_id} ({draft.params / 1e9:.1f}B) is not smaller than target "
            f"{target.hf_id} ({target.params / 1e9:.1f}B): pick a smaller draft"
        )
