"""The search-space schema: bounds, typos, stored copies, and the JSON Schema it publishes."""

import json
from pathlib import Path

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.config.schema import (
    BUILTIN_PROMPT_SETS,
    DEFAULT_TEMPERATURE,
    parse_space,
    space_json_schema,
)
from tuner.config.space import Range, builtin_spaces, load_space, space_from_dict
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError

TARGET = "target: Qwen/Qwen2.5-7B-Instruct\n"


def _message(tmp_path: Path, text: str) -> str:
    path = tmp_path / "my.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_space(str(path))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


def test_the_error_names_key_value_and_fix(tmp_path: Path) -> None:
    text = TARGET + "search: {gpu_memory_utilization: {low: 0.8, high: 1.5}}\n"
    assert _message(tmp_path, text) == (
        "search.gpu_memory_utilization.high = 1.5: must be a number > 0 and <= 1 (e.g. 0.92)"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("serch: {}\n" + TARGET, "unknown key 'serch'; did you mean 'search'?"),
        (
            TARGET + "workload: {concurency: [1, 8]}\n",
            "unknown key 'workload.concurency'; did you mean 'workload.concurrency'?",
        ),
        (
            TARGET + "search: {temperature: {low: 0, high: 1, stepp: 0.1}}\n",
            "unknown key 'search.temperature.stepp'; did you mean 'search.temperature.step'?",
        ),
        (TARGET + "colour: blue\n", "unknown key 'colour'; known keys: name, hardware, target"),
    ],
)
def test_a_misspelt_key_names_the_nearest_known_one(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert _message(tmp_path, text).startswith(expected)


def test_only_the_first_problem_is_spelt_out(tmp_path: Path) -> None:
    message = _message(tmp_path, TARGET + "search: {max_num_batched_tokens: [-2048, 0]}\n")
    assert message == (
        "search.max_num_batched_tokens[0] = -2048: must be an integer > 0 (e.g. 2048)"
        " (and 1 more problem)"
    )


def test_a_prompt_set_is_a_builtin_name_or_an_existing_file(tmp_path: Path) -> None:
    message = _message(tmp_path, TARGET + "workload: {prompt_set: kode}\n")
    assert message.startswith(
        "workload.prompt_set = 'kode': must be a built-in set (code (real), creative (synthetic), "
    )
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    for name in (*BUILTIN_PROMPT_SETS, str(prompts)):
        (tmp_path / "ok.yaml").write_text(TARGET + f"workload: {{prompt_set: '{name}'}}\n")
        assert load_space(str(tmp_path / "ok.yaml")).workload.prompt_set == name


def test_a_fixed_value_and_a_range_give_the_dimensions_the_study_tunes(tmp_path: Path) -> None:
    path = tmp_path / "fixed.yaml"
    path.write_text(  # 0.32: the memory range as written (0.34 leaves the flag unset)
        TARGET + "vllm: {image: 'vllm/vllm-openai:v0.32.0'}\n"
        "search:\n  draft: ngram\n  num_speculative_tokens: 3\n"
        "  gpu_memory_utilization: {low: 0.8, high: 0.9, step: 0.05}\n"
        "  max_num_batched_tokens: 4096\n  temperature: 0\n"
    )
    space = load_space(str(path))
    assert space.drafts == ("ngram",) and space.num_speculative_tokens == Range(3, 3)
    assert space.gpu_memory_utilization == Range(0.8, 0.9, 0.05)
    assert space.max_num_batched_tokens == (4096,) and space.trial_temperature == 0.0
    assert space.tuned_dimensions == ("gpu_memory_utilization",)
    assert load_space().tuned_dimensions == (
        "draft",
        "num_speculative_tokens",
        "gpu_memory_utilization",
        "max_num_batched_tokens",
    )


def test_empty_sections_take_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "bare.yaml"
    path.write_text(TARGET + "server:\nsearch:\nworkload:\n")
    space = load_space(str(path))
    assert space.workload == WorkloadSpec()  # the schema's defaults are the dataclass's
    assert space.max_model_len == 8192 and space.ttft_limit_ms == 1000.0
    assert space.drafts == ("none",) and space.trial_temperature == DEFAULT_TEMPERATURE
    assert not space.tunes_temperature and space.max_failed_requests == 0.0


@pytest.mark.parametrize("name", sorted(builtin_spaces()))
def test_shipped_spaces_round_trip_through_the_stored_dict(name: str) -> None:
    space = load_space(name)
    stored = json.loads(json.dumps(space.source))  # as Optuna keeps study attributes
    assert space_from_dict(stored, origin="study s") == space
    changed = (
        space.with_hardware(parse_hardware("h100x1"))
        .with_ttft_limit(250)
        .with_vllm_version("0.33.0")
    )
    assert space_from_dict(json.loads(json.dumps(changed.source))) == changed


def test_a_stored_copy_keeps_loading_where_a_file_would_be_refused(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    raw = {
        "target": "Qwen/Qwen2.5-7B-Instruct",
        "serch": {"draft": ["ngram"]},  # earlier versions stored unread keys
        "workload": {"prompt_set": str(prompts)},
    }
    prompts.unlink()  # the study is read on another machine
    space = space_from_dict(raw, origin="study s")
    assert space.workload.prompt_set == str(prompts) and space.drafts == ("none",)
    # Stored again as validated: the unread key is gone, what was read is kept.
    assert space.source == {
        "name": "study s",  # named by its origin, as before; stored with the name now
        "target": raw["target"],
        "workload": {"prompt_set": str(prompts)},
    }
    with pytest.raises(ConfigError, match="unknown key 'serch'"):
        parse_space(raw, "my.yaml")
    with pytest.raises(ConfigError, match=r"^study s: search\.temperature = -1"):
        space_from_dict({**raw, "search": {"temperature": -1}}, origin="study s")


def test_a_workload_built_in_code_meets_the_same_bounds() -> None:
    with pytest.raises(ConfigError, match=r"^workload\.warmup = -4: must be an integer >= 0"):
        WorkloadSpec(warmup=-4)
    with pytest.raises(ConfigError, match=r"^workload\.concurrency\[1\]\.level = 0: must be"):
        WorkloadSpec(concurrency=(1, 0))
    assert WorkloadSpec(prompt_set="later.jsonl").prompt_set == "later.jsonl"  # read when used


def test_the_json_schema_forbids_unknown_keys_and_carries_the_bounds() -> None:
    schema = space_json_schema()
    assert schema["$schema"].endswith("2020-12/schema") and schema["required"] == ["target"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {
        "name",
        "hardware",
        "target",
        "server",
        "vllm",
        "slo",
        "workload",
        "quality",
        "search",
    }
    defs = schema["$defs"]
    sections = [d for d in defs.values() if d.get("type") == "object"]  # not the enum
    assert len(sections) >= 6 and all(d["additionalProperties"] is False for d in sections)
    assert defs["Objective"]["enum"] == ["throughput", "goodput"]
    low = defs["FractionRange"]["properties"]["low"]
    assert (low["exclusiveMinimum"], low["maximum"]) == (0, 1)
    temperature = defs["TemperatureRange"]["properties"]["high"]
    assert (temperature["minimum"], temperature["maximum"]) == (0, 2)
    assert defs["SpecTokensRange"]["properties"]["low"]["minimum"] == 1
    assert "step" not in defs["SpecTokensRange"]["properties"]
