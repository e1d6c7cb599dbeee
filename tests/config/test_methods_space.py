"""Speculation methods in the search space: both YAML forms, conditional suggestions, pairings."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from tuner.config.space import SearchSpace, load_space, space_from_dict
from tuner.config.trial import SpecMethod
from tuner.config.vllm_args import parse_version, server_argv
from tuner.errors import ConfigError, IncompatibleDraftError
from tuner.search.strategy import warm_start

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
NEW_SPACES = ("llama3.1-8b-4090x1-eagle3", "qwen3-next-80b-h100x4-mtp")


def _space(search: dict[str, Any], target: str = LLAMA, version: str = "0.32.0") -> SearchSpace:
    raw = {"hardware": "h100", "target": target, "vllm": {"version": version}, "search": search}
    return space_from_dict(raw, "test space")


def test_the_earlier_draft_form_loads_as_methods() -> None:
    space = _space(
        {
            "draft": ["none", "ngram", "meta-llama/Llama-3.2-1B-Instruct"],
            "num_speculative_tokens": {"low": 2, "high": 5},
        }
    )
    assert space.drafts == ("none", "ngram", "meta-llama/Llama-3.2-1B-Instruct")
    ngram = space.speculative("ngram", 3)
    assert ngram is not None and (ngram.prompt_lookup_min, ngram.prompt_lookup_max) == (1, 4)
    assert space.k_range("ngram") == range(2, 6) and space.k_range("none") == range(0, 1)
    # What earlier versions stored for a trial still means the same config.
    assert space.choice_params("ngram", 3) == {"draft": "ngram", "num_speculative_tokens": 3}


def test_each_choice_asks_only_for_its_own_parameters() -> None:
    space = _space(
        {
            "methods": [
                "none",
                {
                    "method": "ngram",
                    "num_speculative_tokens": {"low": 1, "high": 8},
                    "prompt_lookup_min": {"low": 1, "high": 3},
                    "prompt_lookup_max": {"low": 2, "high": 5},
                },
                {
                    "method": "eagle3",
                    "model": EAGLE3,
                    "num_speculative_tokens": {"low": 1, "high": 3},
                },
                {"method": "suffix", "suffix_decoding_min_token_prob": {"low": 0.05, "high": 0.3}},
            ]
        }
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen: dict[str, set[str]] = {}
    for _ in range(60):
        trial = study.ask()
        config = space.suggest(trial)
        draft = trial.params["draft"]
        seen.setdefault(draft, set()).update(set(trial.params) - {"draft"})
        spec = config.server.speculative
        if draft == "none":
            assert spec is None
            continue
        assert spec is not None and config.server.draft == draft
        if spec.method is SpecMethod.NGRAM:
            assert spec.prompt_lookup_min is not None and spec.prompt_lookup_max is not None
            assert 1 <= spec.prompt_lookup_min <= spec.prompt_lookup_max <= 5
        if spec.method is SpecMethod.EAGLE3:
            assert spec.model == EAGLE3 and 1 <= spec.num_speculative_tokens <= 3
        study.tell(trial, 1.0)
    memory = {"gpu_memory_utilization", "max_num_batched_tokens"}
    assert seen["none"] == memory
    assert seen[f"eagle3:{EAGLE3}"] == memory | {"num_speculative_tokens"}
    assert seen["ngram"] == memory | {
        "num_speculative_tokens",
        "prompt_lookup_min",
        "prompt_lookup_max",
    }
    assert seen["suffix"] == memory | {"num_speculative_tokens", "suffix_decoding_min_token_prob"}


@pytest.mark.parametrize(
    ("search", "target", "version", "match"),
    [
        (
            {"methods": [{"method": "eagle3", "model": "AngelSlim/Qwen3-8B_eagle3"}]},
            LLAMA,
            "0.32.0",
            "trained for Qwen/Qwen3-8B",
        ),
        (
            {"methods": [{"method": "eagle", "model": EAGLE3}]},
            LLAMA,
            "0.32.0",
            "is an eagle3 head, not eagle",
        ),
        ({"methods": ["mtp"]}, LLAMA, "0.32.0", "carries no MTP layers"),
        (
            {"methods": [{"method": "draft_model", "model": EAGLE3}]},
            LLAMA,
            "0.32.0",
            "is an EAGLE head, not a draft model",
        ),
        (
            {"methods": [{"method": "eagle3", "model": EAGLE3}]},
            LLAMA,
            "0.8.4",
            "cannot speculate with method eagle3",
        ),
        ({"methods": ["suffix"]}, LLAMA, "0.10.0", "cannot speculate with method suffix"),
        (  # the methods are enum members: the message still lists them as the user writes them
            {"methods": [{"method": "eagle4", "model": EAGLE3}]},
            LLAMA,
            "0.32.0",
            r"methods\[0\] = .*'eagle4'.* expected tags: 'none', 'ngram', 'ngram_gpu', 'suffix'",
        ),
    ],
)
def test_a_wrong_pairing_is_one_line_when_the_space_loads(
    search: dict[str, Any], target: str, version: str, match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        _space(search, target, version)
    assert "\n" not in str(caught.value) and str(caught.value).startswith("test space: ")


def test_both_forms_or_a_repeated_choice_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"search\.methods and search\.draft"):
        _space({"methods": ["none"], "draft": ["ngram"]})
    with pytest.raises(ConfigError, match="lists the choice 'ngram' twice"):
        _space({"methods": ["ngram", {"method": "ngram", "prompt_lookup_max": 5}]})
    with pytest.raises(ConfigError, match="prompt_lookup_min 4 is above every prompt_lookup_max"):
        _space({"methods": [{"method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 3}]})
    with pytest.raises(IncompatibleDraftError):
        _space({"methods": ["mtp"]})


def test_mtp_targets_are_offered_mtp() -> None:
    space = _space({"methods": ["none", "mtp"]}, "deepseek-ai/DeepSeek-R1")
    server = space.config(space.speculative("mtp", 2), 0.9, 2048, 0.0).server
    argv = server_argv(server, parse_version("0.32.0"), host="h", port=1)
    assert '{"method": "mtp", "num_speculative_tokens": 2}' in argv


@pytest.mark.parametrize("name", NEW_SPACES)
def test_a_simulated_study_on_each_shipped_space_proposes_every_method_it_lists(
    name: str,
) -> None:
    space = load_space(name)
    study = optuna.create_study(directions=["maximize", "minimize"])
    assert warm_start(study, space, 40) > 0
    proposed = {trial.system_attrs["fixed_params"]["draft"] for trial in study.get_trials()}
    assert proposed == set(space.drafts)
    for trial in study.get_trials():  # each enqueued point is one the space can suggest
        params = trial.system_attrs["fixed_params"]
        k = params.get("num_speculative_tokens", 0)
        assert k in space.k_range(params["draft"])
