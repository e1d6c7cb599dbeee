"""vLLM 0.22-0.28 run Model Runner V2 by default only for some targets: each release's rule as
read in its wheel (``vllm/config/vllm.py``, ``_is_default_v2_model_runner_model`` and
``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``; tuner/config/vllm_runner_defaults.py cites each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from tuner.config.runner_report import v1_warning
from tuner.config.space import space_from_dict
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_args import parse_version
from tuner.config.vllm_runner import ModelRunner, RunnerForecast, predict_runner
from tuner.config.vllm_runner_defaults import default_v2_target

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # LlamaForCausalLM, dense, 16-bit
QWEN3 = "Qwen/Qwen3-8B"  # Qwen3ForCausalLM, dense, 16-bit
QWEN3_FP8 = "Qwen/Qwen3-8B-FP8"  # the same with a quantization_config
QWEN25_AWQ = "Qwen/Qwen2.5-32B-Instruct-AWQ"  # Qwen2ForCausalLM, quantized
QWEN3_MOE = "Qwen/Qwen3-30B-A3B"  # Qwen3MoeForCausalLM, 128 experts
QWEN3_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"  # hybrid (linear attention) and MoE
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def _eagle(target: str) -> ServerConfig:
    return ServerConfig(
        target, 1, 8192, 0.9, 2048, SpeculativeConfig(SpecMethod.EAGLE3, 3, model=EAGLE3)
    )


def _plain(target: str) -> ServerConfig:
    return ServerConfig(target, 1, 8192, 0.9, 2048)


# (target, version, runner): the default-V2 targets change release by release.
@pytest.mark.parametrize(
    ("target", "version", "runner"),
    [
        # 0.22: Qwen3ForCausalLM only, unquantized and dense.
        (QWEN3, "0.22.0", ModelRunner.V2),
        (QWEN3_FP8, "0.22.0", ModelRunner.V1),
        (LLAMA, "0.22.0", ModelRunner.V1),
        # 0.23: Llama, Mistral and Qwen3, still unquantized and dense.
        (LLAMA, "0.23.0", ModelRunner.V2),
        (QWEN3_FP8, "0.23.0", ModelRunner.V1),
        (QWEN25_AWQ, "0.23.0", ModelRunner.V1),
        # 0.24: the list grows by three MoE architectures and drops the unquantized rule.
        (QWEN3_FP8, "0.24.0", ModelRunner.V2),
        (QWEN25_AWQ, "0.24.0", ModelRunner.V1),
        (QWEN3_MOE, "0.24.0", ModelRunner.V1),
        # 0.25-0.28: every dense target, no hybrid; MoE only when listed.
        (QWEN25_AWQ, "0.25.0", ModelRunner.V2),
        (QWEN3_MOE, "0.25.0", ModelRunner.V1),
        (QWEN3_NEXT, "0.26.0", ModelRunner.V1),
        (QWEN25_AWQ, "0.27.1", ModelRunner.V2),
        (QWEN3_MOE, "0.28.0", ModelRunner.V1),
        (QWEN3_NEXT, "0.28.0", ModelRunner.V1),
        # 0.29: every target.
        (QWEN3_MOE, "0.29.0", ModelRunner.V2),
        (QWEN3_NEXT, "0.29.0", ModelRunner.V2),
        # 0.21: V2 is opt-in, whatever the target.
        (QWEN3, "0.21.0", ModelRunner.V1),
    ],
)
def test_each_release_defaults_its_own_targets_to_v2(
    target: str, version: str, runner: ModelRunner
) -> None:
    for server in (_plain(target), _eagle(target)):
        forecast = predict_runner(server, parse_version(version))
        assert forecast.runner is runner, (target, version, forecast)
        if runner is ModelRunner.V1:
            # Off by default: vLLM never tries V2, so no "does not yet support" reason.
            assert forecast.reasons == ()
            assert forecast.off_by_default


def test_a_default_v2_target_still_falls_back_for_an_unsupported_method() -> None:
    server = ServerConfig(LLAMA, 1, 8192, 0.9, 2048, SpeculativeConfig(SpecMethod.NGRAM, 3))
    forecast = predict_runner(server, parse_version("0.25.0"))
    assert forecast == RunnerForecast(ModelRunner.V1, ("ngram/ngram_gpu speculative decoding",))
    # Off by default comes first: vLLM 0.22 never reaches the unsupported-features list for Llama.
    old = predict_runner(server, parse_version("0.22.0"))
    assert old.reasons == () and "Qwen3ForCausalLM" not in old.off_by_default
    assert "LlamaForCausalLM is not in its default-V2 list" in old.describe()


def test_parallel_drafting_was_refused_for_every_method_before_0_24() -> None:
    server = ServerConfig(
        LLAMA,
        1,
        8192,
        0.9,
        2048,
        SpeculativeConfig(SpecMethod.EAGLE3, 3, model=EAGLE3, parallel_drafting=True),
    )
    assert predict_runner(server, parse_version("0.23.0")).reasons == (
        "parallel drafting for speculative decoding",
    )
    assert predict_runner(server, parse_version("0.24.0")).reasons == (
        "parallel drafting for EAGLE speculative decoding",
    )


def _folder(tmp_path: Path, name: str, config: dict[str, Any]) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


_DENSE = {
    "model_type": "x",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}


def test_a_listed_hybrid_target_defaults_to_v2_from_0_27(tmp_path: Path) -> None:
    # KimiK3 is in the list from 0.27; Qwen3.5 (dense, hybrid) never is.
    qwen35 = {"architectures": ["Qwen3_5ForConditionalGeneration"], **_DENSE}
    assert default_v2_target(parse_version("0.25.0"), qwen35) == (
        False,
        "Qwen3_5ForConditionalGeneration is a hybrid model",
    )
    assert default_v2_target(parse_version("0.28.0"), qwen35)[0] is False
    # 0.24 checks no hybrid rule, but Qwen3.5 is not in its list either.
    assert default_v2_target(parse_version("0.24.0"), qwen35)[0] is False
    # A hybrid class whose layers are all attention (Granite-4.0-micro) counts as dense.
    micro = {
        "architectures": ["GraniteMoeHybridForCausalLM"],
        "layer_types": ["attention", "attention"],
        **_DENSE,
    }
    assert default_v2_target(parse_version("0.25.0"), micro) == (True, "a dense target")
    hybrid = {**micro, "layer_types": ["mamba", "attention"]}
    assert default_v2_target(parse_version("0.25.0"), hybrid)[0] is False
    mamba = {"architectures": ["MambaForCausalLM"], **_DENSE}
    assert default_v2_target(parse_version("0.26.0"), mamba)[0] is False
    kimi = {"architectures": ["KimiK3ForConditionalGeneration"], "n_routed_experts": 8, **_DENSE}
    assert default_v2_target(parse_version("0.26.0"), kimi)[0] is False
    assert default_v2_target(parse_version("0.27.0"), kimi)[0] is True
    deepseek_v4 = {"architectures": ["DeepseekV4ForCausalLM"], "n_routed_experts": 8, **_DENSE}
    assert default_v2_target(parse_version("0.27.0"), deepseek_v4)[0] is False
    assert default_v2_target(parse_version("0.28.0"), deepseek_v4)[0] is True
    with pytest.raises(ValueError, match="no per-target default"):
        default_v2_target(parse_version("0.29.0"), kimi)


def test_a_dflash_drafter_that_needs_v2_forces_it_on_any_target(tmp_path: Path) -> None:
    moe = _folder(
        tmp_path, "moe", {"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8, **_DENSE}
    )
    mixed = _folder(
        tmp_path,
        "mixed",
        {
            "architectures": ["DFlashDraftModel"],
            "layer_types": ["sliding_attention", "full_attention"],
            **_DENSE,
        },
    )
    full = _folder(tmp_path, "full", {"architectures": ["DFlash2DraftModel"], **_DENSE})

    def runner(draft: str, version: str) -> ModelRunner | None:
        spec = SpeculativeConfig(SpecMethod.DFLASH, 8, model=draft)
        return predict_runner(
            ServerConfig(moe, 1, 8192, 0.9, 2048, spec), parse_version(version)
        ).runner

    assert runner(mixed, "0.25.0") is ModelRunner.V1  # the MoE target is off by default
    assert runner(mixed, "0.26.0") is ModelRunner.V2  # several KV-cache groups: V2 only
    assert runner(full, "0.27.0") is ModelRunner.V1
    assert runner(full, "0.28.0") is ModelRunner.V2  # DFlash2: V1 would run it as DFlash1


def test_an_unreadable_target_is_not_predicted_before_0_29() -> None:
    server = _plain("/nonexistent/model")
    forecast = predict_runner(server, parse_version("0.26.0"))
    assert forecast.runner is None
    assert "cannot read /nonexistent/model's config.json" in forecast.describe()
    assert predict_runner(server, parse_version("0.29.0")).runner is ModelRunner.V2


def test_a_forecast_round_trips_through_the_trial_record() -> None:
    forecast = predict_runner(_plain(QWEN3_MOE), parse_version("0.25.0"))
    stored = TypeAdapter(RunnerForecast)  # how TrialRecord writes and reads it
    assert stored.validate_json(stored.dump_json(forecast)) == forecast
    # A record from before off_by_default existed still reads.
    assert stored.validate_python({"runner": "V1", "reasons": ["x"]}).off_by_default == ""


def test_the_space_warning_names_the_release_rule() -> None:
    raw = {
        "hardware": "h100",
        "target": QWEN3_MOE,
        "vllm": {"version": "0.26.0"},
        "search": {"methods": [{"method": "none"}, {"method": "ngram"}]},
    }
    warning = v1_warning(space_from_dict(raw, "test space"))
    assert warning is not None
    assert "2 configs of this space run on vLLM 0.26.0's V1 model runner (that release" in warning
    assert "so the study measures V1, not the runner later releases use:" in warning
    assert (
        "none, ngram: vLLM 0.26.0 runs V2 by default only for some targets: "
        "Qwen3MoeForCausalLM is not in its default-V2 list; use vLLM 0.29.0 or later" in warning
    )


def test_a_release_that_runs_everything_on_v1_gets_no_warning() -> None:
    raw = {
        "hardware": "h100",
        "target": QWEN3_MOE,
        "vllm": {"version": "0.21.0"},
        "search": {"methods": [{"method": "none"}, {"method": "ngram"}]},
    }
    space = space_from_dict(raw, "test space")
    assert v1_warning(space) is None  # V1 is neither deprecated nor compared with V2 there
    assert predict_runner(_plain(QWEN3_MOE), parse_version("0.11.0")).describe() == (
        "V1 (vLLM 0.11.0 has no Model Runner V2, which came in 0.12)"
    )
