"""Lengths held to the served model's context, as vLLM holds them when a server starts.

vLLM refuses a ``--max-model-len`` above what the model's ``config.json`` allows (the smallest
of its length keys, times a RoPE scaling factor), and refuses a request whose prompt plus
``max_tokens`` is longer than ``--max-model-len``. Refused at load instead, no trial is spent
learning it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.catalog.models import ModelSpec
from tuner.errors import ConfigError

__all__ = ["check_lengths", "model_context"]

# The keys vLLM reads a model's longest sequence from (vllm/config/model.py), smallest wins.
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# Scalings whose factor is already in max_position_embeddings.
_SCALED_ALREADY = frozenset({"su", "longrope", "llama3"})


def model_context(model: ModelSpec) -> int | None:
    """The longest sequence vLLM serves ``model`` at; None when its config names none."""
    config: Mapping[str, Any] = model.config.get("text_config") or model.config
    lengths = [int(config[key]) for key in _LENGTH_KEYS if isinstance(config.get(key), int)]
    if not lengths:
        return None
    context = min(lengths)
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type") or scaling.get("type") if isinstance(scaling, dict) else None
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if isinstance(factor, int | float) and factor > 1 and kind not in _SCALED_ALREADY:
        base = scaling.get("original_max_position_embeddings") if kind == "yarn" else None
        context = int((base if isinstance(base, int) else context) * factor)
    return context


def check_lengths(
    model: ModelSpec,
    max_model_len: int,
    input_tokens: int,
    output_tokens: int,
    names: tuple[str, str, str] = ("max_model_len", "input_tokens", "output_tokens"),
) -> None:
    """Refuses a server or workload length the model or the server cannot hold.

    Args:
        names: how the user wrote the three lengths (keys of a space, or flags).

    Raises:
        ConfigError: one line naming the length, the limit and where it comes from.
    """
    max_name, input_name, output_name = names
    context = model_context(model)
    if context is not None and max_model_len > context:
        raise ConfigError(
            f"{max_name} = {max_model_len}: {model.hf_id} serves at most {context} tokens (its "
            f"config.json), and vLLM refuses a longer max_model_len; set {max_name} <= {context}"
        )
    if input_tokens + output_tokens > max_model_len:
        raise ConfigError(
            f"{input_name} + {output_name} = {input_tokens} + {output_tokens}: more than "
            f"{max_name} {max_model_len}, and vLLM refuses a request whose prompt and reply do "
            f"not fit; lower them or raise {max_name}"
        )
