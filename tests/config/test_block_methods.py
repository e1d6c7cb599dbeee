"""vLLM 0.32's newer speculation in the search space: block drafters (DFlash, DSpark), P-EAGLE,
ngram_gpu, and the verification options, each searched where the method allows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.catalog.models import load_model
from tuner.config.space import SearchSpace, space_from_dict
from tuner.config.trial import ServerConfig, SpecMethod
from tuner.config.verification import Verification
from tuner.config.vllm_args import parse_version, server_argv
from tuner.errors import ConfigError

QWEN3 = "Qwen/Qwen3-8B"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
V034 = parse_version("0.34.0")
# The numbers of z-lab/Qwen3-8B-DFlash-b16's config.json (see tuner/catalog/drafters.py).
DFLASH_CONFIG: dict[str, Any] = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "block_size": 16,
    "num_target_layers": 36,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 5,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


def _folder(root: Path, name: str, config: dict[str, Any]) -> str:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _space(search: dict[str, Any], target: str = QWEN3, version: str = "0.32.0") -> SearchSpace:
    raw = {"hardware": "h100", "target": target, "vllm": {"version": version}, "search": search}
    return space_from_dict(raw, "test space")


def test_a_dflash_drafter_takes_the_k_it_was_trained_for(tmp_path: Path) -> None:
    drafter = _folder(tmp_path, "qwen3-8b-dflash-b16", DFLASH_CONFIG)
    space = _space({"methods": ["none", {"method": "dflash", "model": drafter}]})
    assert space.drafts == ("none", f"dflash:{drafter}")
    assert space.k_range(f"dflash:{drafter}") == range(15, 16)  # block_size 16: 15 drafted
    spec = space.speculative(f"dflash:{drafter}", 15)
    assert spec is not None and spec.method is SpecMethod.DFLASH and spec.model == drafter
    argv = server_argv(
        space.config(spec, 0.9, 2048, 0.0).server, parse_version("0.32.0"), host="h", port=1
    )
    written = json.loads(argv[argv.index("--speculative-config") + 1])
    assert written == {"method": "dflash", "model": drafter, "num_speculative_tokens": 15}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"num_speculative_tokens": 16}, "K 16 is above the 15 tokens it was trained to draft"),
        ({"dflash_config": {"target_layer_ids": [1, 9]}}, "names no mask token"),
        ({"hidden_size": 2560}, "width 2560 but Qwen/Qwen3-8B has 4096"),
        ({"dflash_config": {"mask_token_id": 1, "target_layer_ids": [1, 40]}}, "layers [1, 40]"),
        ({"block_size": None}, "has no block_size"),
    ],
)
def test_a_block_drafters_checkpoint_rules_are_one_line(
    tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    k = change.pop("num_speculative_tokens", None)
    drafter = _folder(tmp_path, "drafter-dflash", {**DFLASH_CONFIG, **change})
    method: dict[str, Any] = {"method": "dflash", "model": drafter}
    if k is not None:
        method["num_speculative_tokens"] = k
    with pytest.raises(ConfigError, match=match.replace("[", r"\[").replace("]", r"\]")) as info:
        _space({"methods": [method]})
    assert "\n" not in str(info.value) and drafter in str(info.value)


@pytest.mark.parametrize(
    ("method", "match"),
    [
        (
            {"method": "ngram", "rejection_sample_method": "synthetic"},
            "synthetic forces an acceptance rate or length: a benchmarking tool, not a serving",
        ),
        (
            {"method": "ngram", "rejection_sample_method": ["standard", "fly"]},
            "no rejection_sample_method 'fly'",  # 0.32's; from 0.33 a lossy opt-in (test_vllm_034)
        ),
        ({"method": "qwen3_5_mtp"}, "runs every per-model MTP name as mtp"),
        ({"method": "dflash", "dspark_draft_topk": 8}, "dspark_draft_topk belongs to method"),
    ],
)
def test_settings_no_server_should_run_are_refused(method: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _space({"methods": [method]})


def _p_eagle(root: Path) -> str:
    """An EAGLE-3 head of Llama-3.1-8B trained for parallel drafting: it names its mask token."""
    return _folder(root, "p-eagle3", {**load_model(EAGLE3).config, "mask_token_id": 128002})


def test_parallel_drafting_needs_a_head_trained_for_it() -> None:
    with pytest.raises(ConfigError, match="parallel_drafting needs a head trained for it"):
        _space(
            {"methods": [{"method": "eagle3", "model": EAGLE3, "parallel_drafting": True}]},
            target=LLAMA,
        )


def test_each_option_is_asked_only_where_it_is_searched(tmp_path: Path) -> None:
    head = _p_eagle(tmp_path)
    space = _space(
        {
            "methods": [
                {
                    "method": "eagle3",
                    "model": head,
                    "parallel_drafting": [False, True],
                    "rejection_sample_method": ["block", "standard"],
                    "enable_adaptive_verification": [False, True],
                },
                {"method": "ngram_gpu", "rejection_sample_method": "block"},
            ]
        },
        target=LLAMA,
    )
    assert space.choice(f"eagle3:{head}").options == (
        ("parallel_drafting", (False, True)),
        ("draft_sample_method", ("greedy",)),
        ("rejection_sample_method", ("standard", "block")),  # the enum's order, each once
        ("enable_adaptive_verification", (False, True)),
        ("draft_lm_head_quantization", ("none",)),
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    seen: set[tuple[bool, str, bool]] = set()
    for _ in range(80):
        trial = study.ask()
        spec = space.suggest(trial).server.speculative
        assert spec is not None
        if spec.method is SpecMethod.NGRAM_GPU:
            assert spec.rejection_sample_method is Verification.BLOCK
            assert "rejection_sample_method" not in trial.params  # one value: fixed
        else:
            combo = (
                spec.parallel_drafting,
                str(spec.rejection_sample_method),
                spec.enable_adaptive_verification,
            )
            seen.add(combo)
            # P-EAGLE lands on the V1 runner: block and adaptive are not asked for it.
            asked = {"rejection_sample_method", "enable_adaptive_verification"} & set(trial.params)
            assert asked == (set() if spec.parallel_drafting else asked)
        study.tell(trial, 1.0)
    assert (True, "standard", False) in seen
    assert not any(
        parallel and (block == "block" or adaptive) for parallel, block, adaptive in seen
    )
    assert {(False, "block", True), (False, "standard", False)} <= seen


def test_the_screens_design_covers_each_searched_value_once(tmp_path: Path) -> None:
    head = _p_eagle(tmp_path)
    space = _space(
        {
            "methods": [
                {
                    "method": "eagle3",
                    "model": head,
                    "parallel_drafting": [False, True],
                    "enable_adaptive_verification": [False, True],
                }
            ]
        },
        target=LLAMA,
    )
    variants = space.choice(f"eagle3:{head}").design()
    plain = {"draft_sample_method": "greedy", "rejection_sample_method": "standard"}
    head_bits = {"draft_lm_head_quantization": "none"}
    assert variants == (
        {"parallel_drafting": False, **plain, "enable_adaptive_verification": False, **head_bits},
        {"parallel_drafting": True, **plain, "enable_adaptive_verification": False, **head_bits},
        {"parallel_drafting": False, **plain, "enable_adaptive_verification": True, **head_bits},
    )
    params = space.choice(f"eagle3:{head}").params(3, variants[1])
    assert params == {"num_speculative_tokens": 3, "parallel_drafting": True}


def test_dspark_draft_topk_is_checked_against_the_drafter_and_the_parallelism() -> None:
    dspark = {"method": "dspark", "model": "deepseek-ai/dspark_qwen3_8b_block7"}
    space = _space({"methods": [{**dspark, "dspark_draft_topk": {"low": 32, "high": 256}}]})
    choice = space.choice("dspark:deepseek-ai/dspark_qwen3_8b_block7")
    assert space.k_range(choice.label) == range(7, 8)  # its block of 7
    assert "dspark_draft_topk" in choice.tuned
    with pytest.raises(ConfigError, match="above its draft vocabulary"):
        _space({"methods": [{**dspark, "dspark_draft_topk": 200000}]})
    raw = {
        "hardware": "4090x2",
        "target": QWEN3,
        "vllm": {"version": "0.32.0"},
        "search": {"methods": [{**dspark, "dspark_draft_topk": 64}]},
    }
    with pytest.raises(ConfigError, match="requires draft tensor parallel size 1"):
        space_from_dict(raw, "test space")
    with pytest.raises(ConfigError, match="trained for Qwen/Qwen3-8B"):
        _space({"methods": [dspark]}, target=LLAMA)


def test_an_xpress_drafter_is_a_dflash_variant_from_0_33(tmp_path: Path) -> None:
    # vLLM 0.34's model registry picks the variant from the architecture, under method dflash
    # (vllm/model_executor/models/registry.py:687-717); 0.32 does not know it.
    xpress = _folder(
        tmp_path, "qwen3-8b-xpress", {**DFLASH_CONFIG, "architectures": ["Qwen3XPressModel"]}
    )
    method = {"method": "dflash", "model": xpress}
    assert _space({"methods": [method]}, version="0.33.0").k_range(f"dflash:{xpress}") == range(
        15, 16
    )
    with pytest.raises(ConfigError, match=r"a DFlash variant vLLM runs from 0\.33\.0"):
        _space({"methods": [method]})


def _xpress_space(drafter: str, topc: Any, version: str = "0.34.0") -> SearchSpace:
    entry = {"method": "dflash", "model": drafter, "xpress_topc": topc}
    return _space({"methods": ["none", entry]}, version=version)


def test_xpress_topc_is_an_xpress_drafters_setting(tmp_path: Path) -> None:
    # vLLM 0.34.0 speculative.py:694-698; xpress/config.py:14-29 bounds it by the draft
    # vocabulary; only Qwen3XPressModel checkpoints accept it.
    xpress = _folder(tmp_path, "xpress", {**DFLASH_CONFIG, "architectures": ["Qwen3XPressModel"]})
    space = _xpress_space(xpress, {"low": 256, "high": 1024})
    choice = space.choices[1]
    assert "xpress_topc" in choice.tuned
    spec = choice.speculative(15, {"xpress_topc": 512})
    assert spec is not None
    written = server_argv(ServerConfig(QWEN3, 1, 8192, 0.9, 2048, spec), V034, host="h", port=1)
    assert '"xpress_topc": 512' in written[written.index("--speculative-config") + 1]
    plain = _folder(tmp_path, "plain", DFLASH_CONFIG)
    with pytest.raises(ConfigError, match="xpress_topc is only supported by XPress drafters"):
        _xpress_space(plain, 512)
    with pytest.raises(ConfigError, match=r"xpress_topc 200000 is above its draft vocabulary"):
        _xpress_space(xpress, 200000)
    with pytest.raises(ConfigError, match="xpress_topc belongs to method dflash"):
        _space({"methods": [{"method": "dspark", "model": xpress, "xpress_topc": 8}]})
