"""Pins the vLLM flag dialects: one ServerConfig spelled for 0.6.6 up to the newest release."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.testbed import VllmOracle
from tuner.catalog.gpus import find_gpu
from tuner.config.methods import method_of
from tuner.config.trial import (
    ServerConfig,
    SpecMethod,
    SpeculativeConfig,
    server_from_dict,
    server_to_dict,
)
from tuner.config.vllm_args import (
    NEWEST_KNOWN,
    Dialect,
    VllmVersion,
    check_supported,
    config_file_argv,
    detect_version,
    dialect,
    parse_version,
    sampled_value_refusal,
    server_argv,
    server_yaml,
    version_from_image,
)
from tuner.errors import ConfigError, LaunchError

TARGET = "Qwen/Qwen2.5-14B-Instruct-AWQ"
DRAFT = "Qwen/Qwen2.5-7B-Instruct"  # 152064 vocabulary rows, like the target
BASE = ServerConfig(
    model=TARGET,
    tensor_parallel_size=2,
    max_model_len=8192,
    gpu_memory_utilization=0.92,
    max_num_batched_tokens=2048,
    quantization="awq",
)
NGRAM = replace(
    BASE,
    speculative=SpeculativeConfig(
        SpecMethod.NGRAM, num_speculative_tokens=4, prompt_lookup_max=4, prompt_lookup_min=2
    ),
)
DRAFTED = replace(
    BASE,
    speculative=SpeculativeConfig(SpecMethod.DRAFT_MODEL, num_speculative_tokens=4, model=DRAFT),
)
COMMON_ARGV = [
    "--tensor-parallel-size",
    "2",
    "--max-model-len",
    "8192",
    "--gpu-memory-utilization",
    "0.92",
    "--max-num-batched-tokens",
    "2048",
    "--enable-chunked-prefill",
]
COMMON_YAML: dict[str, Any] = {
    "tensor-parallel-size": 2,
    "max-model-len": 8192,
    "gpu-memory-utilization": 0.92,
    "max-num-batched-tokens": 2048,
    "enable-chunked-prefill": True,
}

LEGACY_NGRAM = [
    "--speculative-model",
    "[ngram]",
    "--num-speculative-tokens",
    "4",
    "--ngram-prompt-lookup-max",
    "4",
    "--ngram-prompt-lookup-min",
    "2",
]
LEGACY_DRAFT = ["--speculative-model", DRAFT, "--num-speculative-tokens", "4"]
NGRAM_JSON = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}
V0_DRAFT_JSON = {"model": DRAFT, "num_speculative_tokens": 4}  # 0.8.2-0.9: method inferred
V1_DRAFT_JSON = {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 4}
V2 = ["--use-v2-block-manager"]
REFUSED = None

# version: (ngram argv tail, draft argv tail or REFUSED)
ARGV_DIALECTS: dict[str, tuple[list[str], list[str] | None]] = {
    "0.6.6": (LEGACY_NGRAM + V2, LEGACY_DRAFT + V2),
    "0.7.2": (LEGACY_NGRAM, LEGACY_DRAFT),
    "0.8.1": (LEGACY_NGRAM, LEGACY_DRAFT),
    "0.8.2": (
        ["--speculative-config", json.dumps(NGRAM_JSON)],
        ["--speculative-config", json.dumps(V0_DRAFT_JSON)],
    ),
    "0.8.5": (
        ["--speculative-config", json.dumps(NGRAM_JSON)],
        ["--speculative-config", json.dumps(V0_DRAFT_JSON)],
    ),
    "0.9.2": (
        ["--speculative-config", json.dumps(NGRAM_JSON)],
        ["--speculative-config", json.dumps(V0_DRAFT_JSON)],
    ),
    "v0.10.1.1": (["--speculative-config", json.dumps(NGRAM_JSON)], REFUSED),
    "0.14.1": (["--speculative-config", json.dumps(NGRAM_JSON)], REFUSED),
    "0.15.0": (
        ["--speculative-config", json.dumps(NGRAM_JSON)],
        ["--speculative-config", json.dumps(V1_DRAFT_JSON)],
    ),
    "0.16.0": (
        ["--speculative-config", json.dumps(NGRAM_JSON)],
        ["--speculative-config", json.dumps(V1_DRAFT_JSON)],
    ),
    "latest": (
        ["--speculative-config", json.dumps(NGRAM_JSON)],
        ["--speculative-config", json.dumps(V1_DRAFT_JSON)],
    ),
}


def _argv(server: ServerConfig, version: str) -> list[str]:
    return server_argv(server, parse_version(version), host="0.0.0.0", port=8000)


@pytest.mark.parametrize("version", ARGV_DIALECTS)
def test_argv_without_speculation_is_the_same_everywhere(version: str) -> None:
    assert _argv(BASE, version) == [TARGET, "--host", "0.0.0.0", "--port", "8000", *COMMON_ARGV]


@pytest.mark.parametrize(("version", "expected"), [(v, e[0]) for v, e in ARGV_DIALECTS.items()])
def test_argv_ngram(version: str, expected: list[str]) -> None:
    assert _argv(NGRAM, version) == [*_argv(BASE, version), *expected]


@pytest.mark.parametrize(("version", "expected"), [(v, e[1]) for v, e in ARGV_DIALECTS.items()])
def test_argv_draft_model(version: str, expected: list[str] | None) -> None:
    if expected is REFUSED:
        with pytest.raises(ConfigError, match=r"0\.15 or later .*ngram"):
            _argv(DRAFTED, version)
    else:
        assert _argv(DRAFTED, version) == [*_argv(BASE, version), *expected]


@pytest.mark.parametrize("version", ["0.10.0", "0.11.2", "0.12.0", "0.13.0", "0.14.1"])
def test_v1_without_draft_models_refuses_them_with_the_fix(version: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_supported(DRAFTED, parse_version(version))
    message = str(caught.value)
    assert f"vLLM {version} cannot speculate with a separate draft model ({DRAFT})" in message
    assert "0.15 or later" in message and "ngram" in message
    check_supported(NGRAM, parse_version(version))  # ngram stays fine


YAML_DIALECTS: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    # version: (ngram YAML, draft YAML); no "model" key before 0.8.4, JSON strings before 0.16.
    "0.6.6": (
        {
            **COMMON_YAML,
            "speculative-model": "[ngram]",
            "num-speculative-tokens": 4,
            "ngram-prompt-lookup-max": 4,
            "ngram-prompt-lookup-min": 2,
            "use-v2-block-manager": True,
        },
        {
            **COMMON_YAML,
            "speculative-model": DRAFT,
            "num-speculative-tokens": 4,
            "use-v2-block-manager": True,
        },
    ),
    "0.8.1": (
        {
            **COMMON_YAML,
            "speculative-model": "[ngram]",
            "num-speculative-tokens": 4,
            "ngram-prompt-lookup-max": 4,
            "ngram-prompt-lookup-min": 2,
        },
        {**COMMON_YAML, "speculative-model": DRAFT, "num-speculative-tokens": 4},
    ),
    "0.8.2": (
        {**COMMON_YAML, "speculative-config": json.dumps(NGRAM_JSON)},
        {**COMMON_YAML, "speculative-config": json.dumps(V0_DRAFT_JSON)},
    ),
    "0.8.5": (
        {"model": TARGET, **COMMON_YAML, "speculative-config": json.dumps(NGRAM_JSON)},
        {"model": TARGET, **COMMON_YAML, "speculative-config": json.dumps(V0_DRAFT_JSON)},
    ),
    "0.12.0": (
        {"model": TARGET, **COMMON_YAML, "speculative-config": json.dumps(NGRAM_JSON)},
        REFUSED,
    ),
    "0.15.1": (
        {"model": TARGET, **COMMON_YAML, "speculative-config": json.dumps(NGRAM_JSON)},
        {"model": TARGET, **COMMON_YAML, "speculative-config": json.dumps(V1_DRAFT_JSON)},
    ),
    "0.16.0": (
        {"model": TARGET, **COMMON_YAML, "speculative-config": NGRAM_JSON},
        {"model": TARGET, **COMMON_YAML, "speculative-config": V1_DRAFT_JSON},
    ),
    "nightly": (
        {"model": TARGET, **COMMON_YAML, "speculative-config": NGRAM_JSON},
        {"model": TARGET, **COMMON_YAML, "speculative-config": V1_DRAFT_JSON},
    ),
}


@pytest.mark.parametrize(("version", "expected"), [(v, e[0]) for v, e in YAML_DIALECTS.items()])
def test_yaml_ngram(version: str, expected: dict[str, Any]) -> None:
    assert server_yaml(NGRAM, parse_version(version)) == expected


@pytest.mark.parametrize(("version", "expected"), [(v, e[1]) for v, e in YAML_DIALECTS.items()])
def test_yaml_draft_model(version: str, expected: dict[str, Any] | None) -> None:
    if expected is REFUSED:
        with pytest.raises(ConfigError, match="separate draft model"):
            server_yaml(DRAFTED, parse_version(version))
    else:
        assert server_yaml(DRAFTED, parse_version(version)) == expected


def test_yaml_keeps_json_a_quoted_string_before_0_16() -> None:
    text = yaml.safe_dump(server_yaml(NGRAM, parse_version("0.15.0")), sort_keys=False)
    assert 'speculative-config: \'{"method": "ngram"' in text
    assert yaml.safe_load(text)["speculative-config"] == json.dumps(NGRAM_JSON)


@pytest.mark.parametrize(
    ("version", "argv", "yaml_items"),
    [
        ("0.6.6", ["--enable-chunked-prefill", "False"], {"enable-chunked-prefill": "False"}),
        ("0.8.4", ["--enable-chunked-prefill", "False"], {"enable-chunked-prefill": "False"}),
        ("0.8.5", ["--no-enable-chunked-prefill"], {"no-enable-chunked-prefill": True}),
        ("latest", ["--no-enable-chunked-prefill"], {"no-enable-chunked-prefill": True}),
    ],
)
def test_disabling_chunked_prefill_follows_the_boolean_style(
    version: str, argv: list[str], yaml_items: dict[str, Any]
) -> None:
    server = replace(BASE, enable_chunked_prefill=False)
    assert _argv(server, version)[-len(argv) :] == argv
    config = server_yaml(server, parse_version(version))
    assert "enable-chunked-prefill" not in config or "no-enable-chunked-prefill" not in config
    assert {k: config[k] for k in yaml_items} == yaml_items


def test_extra_flags_pass_through_true_bare_false_omitted() -> None:
    server = replace(
        BASE,
        served_model_name="coder",
        extra_flags=(
            ("enforce-eager", True),
            ("--kv_cache_memory_bytes", "64M"),
            ("max-num-seqs", 8),
            ("enable-prefix-caching", False),
            ("no-enable-prefix-caching", True),
        ),
    )
    argv = _argv(server, "0.32.0+cpu")
    assert argv[argv.index("--served-model-name") + 1] == "coder"
    assert argv[-6:] == [
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        "64M",
        "--max-num-seqs",
        "8",
        "--no-enable-prefix-caching",
    ]
    config = server_yaml(server, parse_version("0.32.0"))
    assert config["served-model-name"] == "coder"
    assert config["enforce-eager"] is True
    assert config["kv-cache-memory-bytes"] == "64M"
    assert "enable-prefix-caching" not in config


@pytest.mark.parametrize("flag", ["max-model-len", "--speculative-config", "port", "model"])
def test_extra_flag_may_not_repeat_a_modeled_setting(flag: str) -> None:
    with pytest.raises(ConfigError, match="duplicates a setting"):
        _argv(replace(BASE, extra_flags=((flag, "1"),)), "0.8.5")


def test_use_v2_block_manager_as_extra_flag_is_refused_from_0_10() -> None:
    server = replace(BASE, extra_flags=(("use-v2-block-manager", True),))
    assert "--use-v2-block-manager" in _argv(server, "0.9.2")
    with pytest.raises(ConfigError, match=r"removed in vLLM 0\.10"):
        _argv(server, "0.10.0")


@pytest.mark.parametrize(
    ("server", "match"),
    [
        (replace(BASE, speculative=SpeculativeConfig(SpecMethod.DRAFT_MODEL, 3)), "needs a model"),
        (replace(BASE, speculative=SpeculativeConfig(SpecMethod.NGRAM, 0)), "at least 1"),
        (replace(BASE, extra_flags=(("bad flag", True),)), "not a vLLM flag name"),
    ],
)
def test_unusable_configs_are_refused(server: ServerConfig, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_supported(server, NEWEST_KNOWN)


def test_an_unknown_method_is_refused_where_the_config_is_read() -> None:
    # A name arrives as a string (a stored config, a flag): it becomes a SpecMethod or is refused.
    spec = {"method": "medusa", "num_speculative_tokens": 3, "model": "x"}
    with pytest.raises(ConfigError, match="unknown speculative method 'medusa'"):
        server_from_dict({**server_to_dict(BASE), "speculative": spec})


def test_ngram_needs_a_lookup_window_only_with_the_standalone_flags() -> None:
    server = replace(BASE, speculative=SpeculativeConfig(SpecMethod.NGRAM, 3))
    with pytest.raises(ConfigError, match="prompt_lookup_max"):
        check_supported(server, parse_version("0.8.1"))
    assert json.loads(_argv(server, "0.8.2")[-1]) == {
        "method": "ngram",
        "num_speculative_tokens": 3,
    }


def test_versions_before_0_6_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"older than 0\.6\.0"):
        check_supported(BASE, parse_version("0.5.5"))


def test_config_file_argv_passes_the_model_only_when_the_file_cannot() -> None:
    new = server_yaml(BASE, parse_version("0.8.4"))
    old = server_yaml(BASE, parse_version("0.8.3"))
    assert config_file_argv(new, "/c.yaml", model=TARGET) == ["--config", "/c.yaml"]
    assert config_file_argv(old, "/c.yaml", model=TARGET) == [TARGET, "--config", "/c.yaml"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.7.2", (0, 7, 2)),
        ("v0.10.1.1", (0, 10, 1)),
        ("0.32.0+cpu", (0, 32, 0)),
        ("0.8.5.post1", (0, 8, 5)),
        ("0.11.0rc2", (0, 11, 0)),
        (" 0.9\n", (0, 9, 0)),
        ("latest", (0, 34, 0)),
        ("nightly", (0, 34, 0)),
    ],
)
def test_parse_version(text: str, expected: tuple[int, int, int]) -> None:
    version = parse_version(text)
    assert (version.major, version.minor, version.patch) == expected
    assert str(version) == text.strip()


def test_versions_compare_by_release_only() -> None:
    assert parse_version("0.32.0+cpu") == VllmVersion(0, 32, 0)
    assert parse_version("0.8.10") > parse_version("0.8.9")
    assert str(VllmVersion(0, 8, 5)) == "0.8.5"


@pytest.mark.parametrize("text", ["", "vllm", "0", "x0.7.2", "banana-1.2"])
def test_parse_version_refuses_non_versions(text: str) -> None:
    with pytest.raises(ConfigError, match="--vllm-version"):
        parse_version(text)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("vllm/vllm-openai:v0.7.2", "0.7.2"),
        ("docker.io/vllm/vllm-openai:v0.10.1.1", "0.10.1"),
        ("localhost:5000/vllm-openai:0.8.5-cu124", "0.8.5"),
        ("vllm/vllm-openai", "latest"),
        ("vllm/vllm-openai:latest", "latest"),
        ("vllm/vllm-openai:nightly-1a2b3c", "latest"),
        ("localhost:5000/vllm-openai", "latest"),
        ("vllm/vllm-openai:gptoss", None),
        ("vllm/vllm-openai@sha256:0123abcd", None),
        ("vllm/vllm-openai:v0.9.2@sha256:0123abcd", "0.9.2"),
    ],
)
def test_version_from_image(image: str, expected: str | None) -> None:
    version = version_from_image(image)
    if expected is None:
        assert version is None
    else:
        assert version == parse_version(expected)


def test_dialect_table() -> None:
    table = {v: dialect(parse_version(v)) for v in ("0.6.6", "0.8.2", "0.8.5", "0.12.0", "0.16.0")}
    assert table["0.6.6"] == Dialect("standalone", True, False, False, False)
    assert table["0.8.2"] == Dialect("json", False, False, False, False)
    assert table["0.8.5"] == Dialect("json", False, True, False, True)
    assert table["0.12.0"] == Dialect("json", False, True, False, True)
    assert table["0.16.0"] == Dialect("json", False, True, True, True)


def test_a_draft_model_is_named_as_a_method_from_0_15_and_refused_between() -> None:
    # The draft-model rule moved into its method's module (tuner/config/methods/draft_model.py).
    draft = method_of(SpecMethod.DRAFT_MODEL)
    assert not draft.writes_name(parse_version("0.9.2"))
    assert draft.refusal(parse_version("0.9.2")) is None
    refusal = str(draft.refusal(parse_version("0.12.0")))
    assert "dropped draft models from 0.10 until 0.15" in refusal
    assert draft.writes_name(parse_version("0.15.0"))
    assert draft.refusal(parse_version("0.15.0")) is None


def _script(tmp_path: Path, body: str) -> tuple[str, ...]:
    script = tmp_path / "fake.py"
    script.write_text(body)
    return (sys.executable, str(script))


def test_detect_version_reads_the_last_version_line(tmp_path: Path) -> None:
    command = _script(tmp_path, "print('WARNING Triton not available')\nprint('0.32.0+cpu')\n")
    assert detect_version(command) == parse_version("0.32.0+cpu")


def test_detect_version_without_a_version_says_what_to_do(tmp_path: Path) -> None:
    command = _script(tmp_path, "import sys\nsys.exit('usage: fake')\n")
    with pytest.raises(ConfigError, match=r"exit status 1: usage: fake\); pass --vllm-version"):
        detect_version(command)


def test_detect_version_of_a_missing_command() -> None:
    with pytest.raises(ConfigError, match="not found; install vLLM or pass --vllm-version"):
        detect_version(["/nonexistent/vllm"])


def test_detect_version_that_hangs(tmp_path: Path) -> None:
    command = _script(tmp_path, "import time\ntime.sleep(30)\n")
    with pytest.raises(LaunchError, match=r"did not answer within 0\.5 s"):
        detect_version(command, timeout_s=0.5)


@pytest.mark.vllm
def test_vllm_0_32_parses_our_argv_and_yaml(vllm_oracle: VllmOracle, tmp_path: Path) -> None:
    """The installed vLLM's own parser reads every spelling the way spectune means it."""
    version = parse_version("0.32.0")
    target = tmp_path / "target"  # vLLM resolves the model at parse time; offline, a local dir
    target.mkdir()
    flags = (("enforce-eager", True), ("kv-cache-memory-bytes", "64M"))
    servers = {
        "plain": replace(BASE, model=str(target), served_model_name="tiny"),
        "ngram-no-chunking": replace(NGRAM, model=str(target), enable_chunked_prefill=False),
        "draft": replace(DRAFTED, model=str(target), extra_flags=flags),
    }
    argvs = []
    for name, server in servers.items():
        argvs.append(["serve", *server_argv(server, version, host="127.0.0.1", port=8001)])
        path = tmp_path / f"{name}.yaml"
        config = server_yaml(server, version)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        from_file = config_file_argv(config, str(path), model="unused")
        argvs.append(["serve", *from_file, "--host", "::", "--port", "9"])
    argvs.append(["serve", str(target), "--use-v2-block-manager"])

    parsed = vllm_oracle.parse(argvs)

    plain, plain_yaml, ngram, ngram_yaml, draft, draft_yaml, removed = parsed
    for from_flags, from_yaml in ((plain, plain_yaml), (ngram, ngram_yaml), (draft, draft_yaml)):
        assert from_flags["model"] == from_yaml["model"] == str(target)
        assert (from_flags["host"], from_flags["port"]) == ("127.0.0.1", 8001)
        assert (from_yaml["host"], from_yaml["port"]) == ("::", 9)
        assert from_flags["tensor_parallel_size"] == from_yaml["tensor_parallel_size"] == 2
        assert from_flags["max_model_len"] == from_yaml["max_model_len"] == 8192
        assert from_flags["gpu_memory_utilization"] == from_yaml["gpu_memory_utilization"] == 0.92
        assert from_flags["max_num_batched_tokens"] == from_yaml["max_num_batched_tokens"] == 2048
        assert from_flags["quantization"] == from_yaml["quantization"] == "awq"
    assert plain["served_model_name"] == plain_yaml["served_model_name"] == ["tiny"]
    assert plain["enable_chunked_prefill"] is plain_yaml["enable_chunked_prefill"] is True
    assert plain["speculative_config"] is plain_yaml["speculative_config"] is None
    assert ngram["enable_chunked_prefill"] is ngram_yaml["enable_chunked_prefill"] is False
    assert ngram["speculative_config"] == ngram_yaml["speculative_config"] == NGRAM_JSON
    assert draft["speculative_config"] == draft_yaml["speculative_config"] == V1_DRAFT_JSON
    assert draft["enforce_eager"] is draft_yaml["enforce_eager"] is True
    assert draft["kv_cache_memory_bytes"] == draft_yaml["kv_cache_memory_bytes"] == 64 * 2**20
    assert removed["exit"] == 2
    assert removed["error"] == ["vllm: error: unrecognized arguments: --use-v2-block-manager"]


def test_speculative_json_text_is_pinned() -> None:
    assert _argv(NGRAM, "0.8.2")[-2:] == [
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 4, '
        '"prompt_lookup_max": 4, "prompt_lookup_min": 2}',
    ]
    assert _argv(DRAFTED, "0.15.0")[-1] == (
        '{"method": "draft_model", "model": "Qwen/Qwen2.5-7B-Instruct", '
        '"num_speculative_tokens": 4}'
    )


def test_quantization_is_left_to_vllm_unless_another_method_is_asked_for() -> None:
    # The checkpoint declares AWQ: vLLM detects it and picks Marlin; --quantization awq would
    # force the slow AWQ kernel on 0.9.2-0.16.
    assert "--quantization" not in _argv(BASE, "0.9.2")
    assert "quantization" not in server_yaml(BASE, parse_version("0.32.0"))
    assert "--quantization" not in _argv(replace(BASE, quantization=None), "0.32.0")
    online = replace(BASE, model="Qwen/Qwen2.5-14B-Instruct", quantization="fp8")
    assert _argv(online, "0.32.0")[-3:-1] == ["--quantization", "fp8"]
    marlin = replace(BASE, quantization="awq_marlin")  # another kernel, asked for by name
    assert _argv(marlin, "0.32.0")[-3:-1] == ["--quantization", "awq_marlin"]


def _spec_json(server: ServerConfig, version: str) -> dict[str, Any]:
    argv = _argv(server, version)
    result: dict[str, Any] = json.loads(argv[argv.index("--speculative-config") + 1])
    return result


def test_draft_of_another_vocabulary_size_gets_use_heterogeneous_vocab() -> None:
    small = replace(
        BASE,
        speculative=SpeculativeConfig(
            SpecMethod.DRAFT_MODEL, 4, model="Qwen/Qwen2.5-0.5B-Instruct"
        ),
    )
    for version in ("0.25.0", "0.32.0", "0.33.0"):
        assert _spec_json(small, version) == {
            "method": "draft_model",
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
            "num_speculative_tokens": 4,
            "use_heterogeneous_vocab": True,
        }
    # 0.15-0.24 and 0.34 have no such field (the draft-model method refuses the pair when the
    # space loads).
    assert "use_heterogeneous_vocab" not in _spec_json(small, "0.24.0")
    assert "use_heterogeneous_vocab" not in _spec_json(small, "latest")
    assert "use_heterogeneous_vocab" not in _spec_json(DRAFTED, "0.32.0")  # same size
    assert "use_heterogeneous_vocab" not in _spec_json(NGRAM, "0.32.0")
    unknown = replace(small, model="/nowhere/model")  # vLLM alone can tell
    assert "use_heterogeneous_vocab" not in _spec_json(unknown, "0.32.0")


def test_sampled_values_vllm_refuses_are_named_not_raised() -> None:
    small = replace(BASE, max_num_batched_tokens=512)
    assert sampled_value_refusal(BASE, find_gpu("4090")) is None
    assert sampled_value_refusal(small, find_gpu("4090")) is None  # 256 sequences by default
    # vLLM 0.32 defaults to 1024 sequences on 70 GiB+ cards (A100 excepted).
    assert sampled_value_refusal(small, find_gpu("H100")) == (
        "max_num_batched_tokens (512) must be greater than or equal to max_num_seqs (1024)."
    )
    assert sampled_value_refusal(small, find_gpu("A100-80GB")) is None
    fewer = replace(small, extra_flags=(("max-num-seqs", 64),))
    assert sampled_value_refusal(fewer, find_gpu("H100")) is None
    unchunked = replace(BASE, enable_chunked_prefill=False)
    assert "is smaller than max_model_len (8192)" in str(sampled_value_refusal(unchunked))
