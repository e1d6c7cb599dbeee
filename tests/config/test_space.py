import re
from pathlib import Path
from typing import cast

import optuna
import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.config.space import builtin_spaces, load_space
from tuner.errors import ConfigError, IncompatibleDraftError


def test_shipped_spaces_load() -> None:
    assert {"default", "qwen2.5-14b-awq-4090x1"} <= set(builtin_spaces())
    default = load_space()
    assert default.target.hf_id == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    assert default.hardware == parse_hardware("4090x2") and default.tensor_parallel_size == 2
    assert "none" in default.drafts and "Qwen/Qwen2.5-0.5B-Instruct" in default.drafts
    small = load_space("qwen2.5-14b-awq-4090x1")
    assert small.tensor_parallel_size == 1 and not small.tunes_temperature
    # The shipped spaces serve a realistic mix, measured at each temperature, never tuned.
    assert small.workload.temperature_mix == ((0.2, 0.7), (0.8, 0.3))
    assert small.workload.load_profile == ((1, 0.5), (8, 0.3), (32, 0.2))


def test_suggest_with_draft_has_k_and_without_draft_has_none() -> None:
    # A FixedTrial answers the suggest_* calls of the optuna.Trial that suggest() is typed for.
    space = load_space()
    with_draft = space.suggest(
        cast(
            optuna.Trial,
            optuna.trial.FixedTrial(
                {
                    "draft": "Qwen/Qwen2.5-0.5B-Instruct",
                    "num_speculative_tokens": 4,
                    "gpu_memory_utilization": 0.92,
                    "max_num_batched_tokens": 2048,
                    "temperature": 0.2,
                }
            ),
        )
    )
    assert with_draft.server.speculative is not None
    assert with_draft.server.speculative.method == "draft_model"
    assert with_draft.server.k == 4
    # The default space does not tune the temperature: the trial serves the workload's mix.
    assert with_draft.client.workload.temperature == (0.2, 0.8)
    no_draft = space.suggest(
        cast(
            optuna.Trial,
            optuna.trial.FixedTrial(
                {
                    "draft": "none",
                    "gpu_memory_utilization": 0.9,
                    "max_num_batched_tokens": 1024,
                    "temperature": 0.0,
                }
            ),
        )
    )
    assert no_draft.server.speculative is None and no_draft.server.k == 0
    ngram = space.suggest(
        cast(
            optuna.Trial,
            optuna.trial.FixedTrial(
                {
                    "draft": "ngram",
                    "num_speculative_tokens": 3,
                    "gpu_memory_utilization": 0.9,
                    "max_num_batched_tokens": 1024,
                    "temperature": 0.0,
                }
            ),
        )
    )
    assert ngram.server.speculative is not None and ngram.server.speculative.method == "ngram"


def test_request_side_change_keeps_the_server_config() -> None:
    space = load_space()
    a = space.config(space.speculative("ngram", 3), 0.9, 2048, 0.1)
    assert a.with_temperature(0.7).server == a.server


def test_override_hardware_and_slo_are_part_of_the_space() -> None:
    space = load_space().with_hardware(parse_hardware("h100x1")).with_ttft_limit(300)
    assert space.tensor_parallel_size == 1 and space.ttft_limit_ms == 300
    assert space.source["hardware"] == "h100x1" and space.source["slo"]["ttft_ms"] == 300
    assert space != load_space()


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def test_mismatched_draft_stops_the_space(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "target: Qwen/Qwen2.5-32B-Instruct-AWQ\n"
        "search: {draft: [none, meta-llama/Llama-3.2-1B-Instruct]}\n",
    )
    with pytest.raises(IncompatibleDraftError, match=r"Llama-3\.2-1B"):
        load_space(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("target: [unclosed\n", "not valid YAML at line"),
        ("- a\n- b\n", "YAML mapping"),
        ("hardware: 4090x2\n", "'target' must be set"),
        (
            "target: Qwen/Qwen2.5-7B-Instruct\nsearch: {gpu_memory_utilization: {low: 0.9}}\n",
            "gpu_memory_utilization",
        ),
        ("target: Qwen/Qwen2.5-7B-Instruct\nworkload: {concurrency: [0]}\n", "concurrency"),
        ("target: Qwen/Nope\n", "unknown model"),
    ],
)
def test_bad_space_files(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_space(_write(tmp_path, text))


def test_missing_space_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="default"):
        load_space("no-such-space")


def test_vllm_version_override_is_stored_and_checked() -> None:
    space = load_space().with_vllm_version("0.26.0")
    assert str(space.version) == "0.26.0" and space.source["vllm"]["version"] == "0.26.0"
    assert str(load_space().version) == "v0.32.0"  # from the image tag
    with pytest.raises(ConfigError, match="--vllm-version"):
        load_space().with_vllm_version("bogus")


@pytest.mark.parametrize(
    ("fragment", "shown"),
    [
        ("server: {max_model_len: 8k}\n", "server.max_model_len = '8k'"),
        ("search: {max_num_batched_tokens: [big]}\n", "search.max_num_batched_tokens[0] = 'big'"),
        ("slo: {ttft_ms: fast}\n", "slo.ttft_ms = 'fast'"),
    ],
)
def test_non_numbers_name_their_key(tmp_path: Path, fragment: str, shown: str) -> None:
    path = _write(tmp_path, "target: Qwen/Qwen2.5-7B-Instruct\n" + fragment)
    with pytest.raises(ConfigError, match=f"{re.escape(shown)}: must be an? (integer|number)"):
        load_space(path)


@pytest.mark.parametrize("flag", ["api-key: sk-very-secret", "api-key=sk-very-secret: true"])
def test_a_secret_in_extra_flags_is_refused_before_it_is_stored(tmp_path: Path, flag: str) -> None:
    path = _write(
        tmp_path, f"target: Qwen/Qwen2.5-7B-Instruct\nserver: {{extra_flags: {{{flag}}}}}\n"
    )
    with pytest.raises(ConfigError, match="`api-key` carries a secret") as info:
        load_space(path)
    assert "sk-very-secret" not in str(info.value)
