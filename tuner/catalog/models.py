"""Model catalog, local model directories, and the draft/target compatibility check.

Architecture numbers come from each model's published ``config.json``. Weight bytes follow how
vLLM loads the checkpoint: 4-bit AWQ/GPTQ linear layers with group-128 scales (about 4.25 bits a
weight) while embeddings and the LM head stay 16-bit.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import ConfigError, IncompatibleDraftError

__all__ = ["CATALOG", "ModelSpec", "check_draft", "load_model", "model_from_config"]

# Bytes a weight takes in memory, by quantization as vLLM loads it.
_BYTES_PER_WEIGHT = {"bf16": 2.0, "fp16": 2.0, "awq": 0.53, "gptq-int4": 0.53}


@dataclass(frozen=True)
class ModelSpec:
    """What speed and memory depend on, for one checkpoint."""

    hf_id: str
    tokenizer_family: str
    params: float  # total parameters, embeddings included
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    quantization: str  # bf16 | fp16 | awq | gptq-int4

    @property
    def bytes_per_weight(self) -> float:
        return _BYTES_PER_WEIGHT[self.quantization]

    @property
    def embedding_params(self) -> float:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights in GPU memory (all tensor-parallel shards together)."""
        linear = self.params - self.embedding_params
        return self.embedding_params * 2.0 + linear * self.bytes_per_weight

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across all layers (16-bit K and V)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @property
    def flops_per_token(self) -> float:
        """Matmul FLOPs for one token's forward pass: 2 per weight, input embedding excluded."""
        return 2.0 * (self.params - self.vocab * self.hidden * (0 if self.tied_embeddings else 1))

    @property
    def quantized(self) -> bool:
        return self.quantization in {"awq", "gptq-int4"}


def _qwen25(
    size: str,
    params: float,
    layers: int,
    hidden: int,
    inter: int,
    heads: int,
    kv: int,
    vocab: int,
    tied: bool,
) -> list[ModelSpec]:
    base = f"Qwen/Qwen2.5-{size}-Instruct"
    head_dim = hidden // heads
    return [
        ModelSpec(
            base + suffix,
            "qwen2.5",
            params,
            layers,
            hidden,
            inter,
            heads,
            kv,
            head_dim,
            vocab,
            tied,
            quant,
        )
        for suffix, quant in (("", "bf16"), ("-AWQ", "awq"), ("-GPTQ-Int4", "gptq-int4"))
    ]


def _single(
    hf_id: str,
    family: str,
    params: float,
    layers: int,
    hidden: int,
    inter: int,
    heads: int,
    kv: int,
    head_dim: int,
    vocab: int,
    tied: bool,
) -> ModelSpec:
    return ModelSpec(
        hf_id, family, params, layers, hidden, inter, heads, kv, head_dim, vocab, tied, "bf16"
    )


# fmt: off
# hf_id, tokenizer family, parameters, layers, hidden, intermediate, heads, KV heads, head dim,
# vocabulary, tied embeddings (from each model's config.json)
CATALOG: tuple[ModelSpec, ...] = (
    *_qwen25("0.5B", 0.494e9, 24, 896, 4864, 14, 2, 151936, True),
    *_qwen25("1.5B", 1.54e9, 28, 1536, 8960, 12, 2, 151936, True),
    *_qwen25("3B", 3.09e9, 36, 2048, 11008, 16, 2, 151936, True),
    *_qwen25("7B", 7.62e9, 28, 3584, 18944, 28, 4, 152064, False),
    *_qwen25("14B", 14.7e9, 48, 5120, 13824, 40, 8, 152064, False),
    *_qwen25("32B", 32.5e9, 64, 5120, 27648, 40, 8, 152064, False),
    *_qwen25("72B", 72.7e9, 80, 8192, 29568, 64, 8, 152064, False),
    _single("meta-llama/Llama-3.2-1B-Instruct", "llama3", 1.24e9, 16, 2048, 8192, 32, 8, 64, 128256, True),  # noqa: E501
    _single("meta-llama/Llama-3.2-3B-Instruct", "llama3", 3.21e9, 28, 3072, 8192, 24, 8, 128, 128256, True),  # noqa: E501
    _single("meta-llama/Llama-3.1-8B-Instruct", "llama3", 8.03e9, 32, 4096, 14336, 32, 8, 128, 128256, False),  # noqa: E501
    _single("meta-llama/Llama-3.1-70B-Instruct", "llama3", 70.6e9, 80, 8192, 28672, 64, 8, 128, 128256, False),  # noqa: E501
    _single("meta-llama/Llama-3.3-70B-Instruct", "llama3", 70.6e9, 80, 8192, 28672, 64, 8, 128, 128256, False),  # noqa: E501
    _single("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-r1-qwen", 1.78e9, 28, 1536, 8960, 12, 2, 128, 151936, False),  # noqa: E501
    _single("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseek-r1-qwen", 7.62e9, 28, 3584, 18944, 28, 4, 128, 152064, False),  # noqa: E501
    _single("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "deepseek-r1-qwen", 14.8e9, 48, 5120, 13824, 40, 8, 128, 152064, False),  # noqa: E501
    _single("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1-qwen", 32.8e9, 64, 5120, 27648, 40, 8, 128, 152064, False),  # noqa: E501
)
# fmt: on

_BY_ID = {m.hf_id.lower(): m for m in CATALOG}


def _tokenizer_family(directory: Path, config: dict[str, object]) -> str:
    """Names the vocabulary: a fingerprint of tokenizer.json's vocab when present."""
    tokenizer = directory / "tokenizer.json"
    if tokenizer.is_file():
        vocab = json.loads(tokenizer.read_text()).get("model", {}).get("vocab", {})
        digest = hashlib.sha256(json.dumps(vocab, sort_keys=True).encode()).hexdigest()[:12]
        return f"tokenizer-{digest}"
    return f"{config.get('model_type', 'unknown')}-vocab{config.get('vocab_size')}"


def model_from_config(directory: Path) -> ModelSpec:
    """Builds a :class:`ModelSpec` from a local Hugging Face model directory's ``config.json``."""
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text())
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        layers = int(config["num_hidden_layers"])
        inter = int(config["intermediate_size"])
        vocab = int(config["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"model directory {directory} has no usable config.json ({exc}): point at a Hugging "
            "Face model folder with hidden_size, num_attention_heads, num_hidden_layers, "
            "intermediate_size and vocab_size"
        ) from None
    kv_heads = int(config.get("num_key_value_heads", heads))
    head_dim = int(config.get("head_dim") or hidden // heads)
    tied = bool(config.get("tie_word_embeddings", False))
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    per_layer = attention + 3 * hidden * inter
    params = layers * per_layer + vocab * hidden * (1 if tied else 2)
    quant_cfg = config.get("quantization_config") or {}
    method = str(quant_cfg.get("quant_method", "")).lower() if isinstance(quant_cfg, dict) else ""
    quantization = {"awq": "awq", "gptq": "gptq-int4"}.get(method, "bf16")
    return ModelSpec(
        str(directory),
        _tokenizer_family(directory, config),
        float(params),
        layers,
        hidden,
        inter,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tied,
        quantization,
    )


def load_model(name: str) -> ModelSpec:
    """Finds a model by Hugging Face id (case-insensitive) or as a local directory.

    Raises:
        ConfigError: neither a catalog id nor a directory with a ``config.json``.
    """
    found = _BY_ID.get(name.strip().lower())
    if found is not None:
        return found
    directory = Path(name).expanduser()
    if (directory / "config.json").is_file():
        return model_from_config(directory)
    raise ConfigError(
        f"unknown model {name!r}: use a Hugging Face id from the catalog (e.g. "
        "Qwen/Qwen2.5-32B-Instruct-AWQ; `spectune models` lists them) or a local model directory "
        "containing config.json"
    )


def check_draft(target: ModelSpec, draft: ModelSpec) -> None:
    """Rejects a draft that cannot speculate for ``target``.

    A draft proposes token ids that the target verifies, so both must use the same tokenizer;
    otherwise vLLM garbles output or fails at start-up. Embedding sizes may differ (Qwen2.5's
    small models pad to 151936, the large ones to 152064) while the vocabulary is the same.

    Raises:
        IncompatibleDraftError: the tokenizers differ, or the draft is not smaller.
    """
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
