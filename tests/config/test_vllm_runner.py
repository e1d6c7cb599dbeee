"""The model runner each config lands on, and the options each release and runner honour.

The predictions are vLLM's rules as read in its releases (tuner/config/vllm_runner.py); the
validation tier (tests/config/test_vllm_judges_runners.py) holds them against vLLM 0.32's own
choice.
"""

from __future__ import annotations

from typing import Any

import pytest

from tuner.config.space import SearchSpace, load_space, space_from_dict
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_args import parse_version, server_argv
from tuner.config.vllm_features import choice_runners
from tuner.config.vllm_runner import ModelRunner, predict_runner
from tuner.errors import ConfigError

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
QWEN32 = "Qwen/Qwen2.5-32B-Instruct-AWQ"


def _server(method: str, **spec: Any) -> ServerConfig:
    return ServerConfig(LLAMA, 1, 8192, 0.9, 2048, SpeculativeConfig(SpecMethod(method), 3, **spec))


@pytest.mark.parametrize(
    ("method", "spec", "version", "runner", "reason"),
    [
        ("ngram", {}, "0.32.0", ModelRunner.V2, None),
        ("ngram", {}, "0.31.0", ModelRunner.V1, "speculative method 'ngram'"),
        ("ngram_gpu", {}, "0.29.0", ModelRunner.V1, "ngram/ngram_gpu speculative decoding"),
        ("draft_model", {"model": "x"}, "0.30.0", ModelRunner.V1, "method 'draft_model'"),
        ("draft_model", {"model": "x"}, "0.31.0", ModelRunner.V2, None),
        ("suffix", {}, "0.33.0", ModelRunner.V1, "speculative method 'suffix'"),
        ("eagle3", {"model": EAGLE3}, "0.32.0", ModelRunner.V2, None),
        (
            "eagle3",
            {"model": EAGLE3, "parallel_drafting": True},
            "0.33.0",
            ModelRunner.V1,
            "parallel drafting for EAGLE speculative decoding",
        ),
        ("dflash", {"model": "x", "parallel_drafting": True}, "0.32.0", ModelRunner.V2, None),
        ("dspark", {"model": "x"}, "0.25.0", ModelRunner.V2, None),  # vLLM forces V2 for it
        ("eagle3", {"model": EAGLE3}, "0.21.0", ModelRunner.V1, None),  # V2 opt-in
        ("eagle3", {"model": EAGLE3}, "0.26.0", ModelRunner.V2, None),  # Llama: dense
    ],
)
def test_the_runner_follows_the_releases_rules(
    method: str, spec: dict[str, Any], version: str, runner: ModelRunner | None, reason: str | None
) -> None:
    forecast = predict_runner(_server(method, **spec), parse_version(version))
    assert forecast.runner is runner
    if reason is None:
        assert forecast.reasons == ()
    else:
        assert any(reason in r for r in forecast.reasons)


def test_the_default_spaces_drafts_land_on_v1_for_their_vocabulary() -> None:
    space = load_space("default")
    runners = {
        c.label: choice_runners(c, space.target, space.version)[0][1].describe()
        for c in space.choices
        if c.method != "none"
    }
    mixed = "V1 (Model Runner V2 does not yet support heterogeneous-vocabulary draft models)"
    assert runners == {
        "ngram": "V2",
        "suffix": "V1 (Model Runner V2 does not yet support speculative method 'suffix')",
        "Qwen/Qwen2.5-0.5B-Instruct": mixed,
        "Qwen/Qwen2.5-1.5B-Instruct": mixed,
    }
    # 0.31 has no such rule: the same pair runs on V2 there.
    small = space.choice("Qwen/Qwen2.5-0.5B-Instruct")
    assert choice_runners(small, space.target, parse_version("0.31.0"))[0][1].runner is (
        ModelRunner.V2
    )


def _space(
    search: dict[str, Any], target: str = LLAMA, version: str = "0.32.0", **extra: Any
) -> SearchSpace:
    raw = {
        "hardware": "h100",
        "target": target,
        "vllm": {"version": version},
        "search": search,
        **extra,
    }
    return space_from_dict(raw, "test space")


@pytest.mark.parametrize(
    ("method", "version", "match"),
    [
        ({"method": "dflash", "model": "z"}, "0.19.0", "cannot speculate with method dflash"),
        ({"method": "ngram_gpu"}, "0.17.0", "it came in 0.18.0"),
        (
            {"method": "eagle3", "model": EAGLE3, "rejection_sample_method": "block"},
            "0.24.0",
            "vLLM 0.24.0 has no rejection_sample_method 'block' \\(it came in 0.25.0",
        ),
        (
            {"method": "eagle3", "model": EAGLE3, "draft_sample_method": "probabilistic"},
            "0.21.0",
            "no draft_sample_method 'probabilistic' \\(it came in 0.22.0",
        ),
        (
            {"method": "eagle3", "model": EAGLE3, "enable_adaptive_verification": [False, True]},
            "0.27.0",
            "no enable_adaptive_verification True \\(it came in 0.28.0",
        ),
        (
            {"method": "eagle3", "model": EAGLE3, "enable_adaptive_verification": True},
            "0.29.0",
            "runs adaptive verification with DSpark only",
        ),
        ({"method": "suffix"}, "0.32.0", None),
        (
            {"method": "ngram", "rejection_sample_method": "block"},
            "0.31.0",
            "rejection_sample_method 'block' runs on Model Runner V2 only, and this config lands "
            "on the V1 model runner",
        ),
        (
            {
                "method": "draft_model",
                "model": "meta-llama/Llama-3.2-1B-Instruct",
                "enable_adaptive_verification": True,
            },
            "0.30.0",
            "enable_adaptive_verification True runs on Model Runner V2 only, and this config lands "
            "on the V1 model runner \\(Model Runner V2 does not yet support speculative method "
            "'draft_model'\\) on vLLM 0.30.0",
        ),
    ],
)
def test_an_option_the_release_or_runner_lacks_is_one_line(
    method: dict[str, Any], version: str, match: str | None
) -> None:
    if match is None:
        _space({"methods": [method]}, version=version)
        return
    with pytest.raises(ConfigError, match=match) as info:
        _space({"methods": [method]}, version=version)
    assert "\n" not in str(info.value)


def test_a_heterogeneous_draft_keeps_the_v2_only_options_off() -> None:
    for option, value in (
        ("rejection_sample_method", "block"),
        ("draft_sample_method", "probabilistic"),
    ):
        method = {"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct", option: value}
        with pytest.raises(ConfigError, match="vocabulary size"):
            _space({"methods": [method]}, target=QWEN32)


def test_adaptive_verification_and_enforce_eager_are_refused_together() -> None:
    method = {"method": "eagle3", "model": EAGLE3, "enable_adaptive_verification": [False, True]}
    with pytest.raises(ConfigError, match="requires full CUDA graphs"):
        _space({"methods": [method]}, server={"extra_flags": {"enforce-eager": True}})


def test_an_older_image_refuses_a_stored_option_before_launch() -> None:
    server = _server("eagle3", model=EAGLE3, rejection_sample_method="block")
    with pytest.raises(ConfigError, match=r"vLLM 0\.24\.0 has no rejection_sample_method 'block'"):
        server_argv(server, parse_version("0.24.0"), host="h", port=1)
    argv = server_argv(server, parse_version("0.32.0"), host="h", port=1)
    assert '"rejection_sample_method": "block"' in argv[argv.index("--speculative-config") + 1]
