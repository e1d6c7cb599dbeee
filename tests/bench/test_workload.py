"""Built-in prompt sets and user prompt files."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from tuner.config.workload import (
    BUILTIN_PROMPT_SETS,
    CHARS_PER_TOKEN,
    LONG_CONTEXT_TOKENS,
    ChatMessage,
    PromptRequest,
    WorkloadSpec,
    build_requests,
)
from tuner.errors import ConfigError


@pytest.mark.parametrize("prompt_set", BUILTIN_PROMPT_SETS)
def test_builtin_sets_are_deterministic_per_seed(prompt_set: str) -> None:
    spec = WorkloadSpec(prompt_set=prompt_set, seed=7)
    first = build_requests(spec, 6)
    assert first == build_requests(spec, 6)
    assert first != build_requests(WorkloadSpec(prompt_set=prompt_set, seed=8), 6)
    assert len({r.prompt for r in first}) == 6  # prompts differ within a run too
    assert all(r.max_tokens == spec.output_tokens for r in first)


def test_builtin_sets_differ_from_each_other() -> None:
    prompts = {s: build_requests(WorkloadSpec(prompt_set=s), 3) for s in BUILTIN_PROMPT_SETS}
    firsts = {s: requests[0].prompt for s, requests in prompts.items()}
    assert len(set(firsts.values())) == len(BUILTIN_PROMPT_SETS)
    assert "def " in firsts["code"] and "```python" in firsts["code"]
    assert "story" in firsts["creative"]
    chat = prompts["chat"][0].messages
    assert chat[0].role == "system" and chat[-1].role == "user"
    assert {"user", "assistant"} <= {m.role for m in chat}
    assert "report" in firsts["long-context"]


@pytest.mark.parametrize("prompt_set", ["code", "creative", "chat"])
def test_builtin_lengths_follow_input_tokens(prompt_set: str) -> None:
    requests = build_requests(WorkloadSpec(prompt_set=prompt_set, input_tokens=600), 40)
    mean = statistics.mean(r.approx_input_tokens for r in requests)
    assert 0.85 * 600 < mean < 1.15 * 600


def test_long_context_prompts_are_about_4k_tokens() -> None:
    requests = build_requests(WorkloadSpec(prompt_set="long-context"), 4)
    for request in requests:
        assert request.approx_input_tokens == math.ceil(len(request.prompt) / CHARS_PER_TOKEN)
        assert 0.95 * LONG_CONTEXT_TOKENS <= request.approx_input_tokens <= LONG_CONTEXT_TOKENS
    longer = build_requests(WorkloadSpec(prompt_set="long-context", input_tokens=6000), 1)
    assert longer[0].approx_input_tokens > 5500


def test_prompt_request_forms() -> None:
    plain = PromptRequest.from_prompt("hello there", 5)
    assert plain.chat_messages() == [{"role": "user", "content": "hello there"}]
    assert plain.approx_input_tokens == 3
    chat = PromptRequest.from_messages((ChatMessage("system", "s"), ChatMessage("user", "u")), 2)
    assert chat.prompt == "s\n\nu"
    assert build_requests(WorkloadSpec(), 0) == []


def test_bad_lengths_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="output_tokens"):
        build_requests(WorkloadSpec(output_tokens=0), 1)
    with pytest.raises(ConfigError, match="input_tokens"):
        build_requests(WorkloadSpec(input_tokens=0), 1)


def test_jsonl_file(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    lines = [
        {"prompt": "Write a haiku about rain."},
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 7},
        {"conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    spec = WorkloadSpec(prompt_set=str(path), output_tokens=32, seed=3)
    requests = build_requests(spec, 7)
    assert requests == build_requests(spec, 7)
    assert {r.prompt for r in requests} == {"Write a haiku about rain.", "Hi", "Q"}
    assert {r.max_tokens for r in requests if r.prompt == "Hi"} == {7}
    assert {r.max_tokens for r in requests if r.prompt == "Write a haiku about rain."} == {32}
    # A ShareGPT line keeps its recorded reply's length ("A": one token), not output_tokens.
    assert {r.max_tokens for r in requests if r.prompt == "Q"} == {1}
    assert requests[:3] == requests[3:6]  # cycled after a seeded shuffle


def test_sharegpt_file(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    data = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": "What is a tide?"},
                {"from": "gpt", "value": "The rise and fall of the sea."},
                {"from": "human", "value": "Why?"},
                {"from": "gpt", "value": "The moon."},
            ],
        },
        {"id": "b", "conversations": [{"from": "gpt", "value": "no user turn"}]},
    ]
    path.write_text(json.dumps(data))
    (request,) = build_requests(WorkloadSpec(prompt_set=str(path), output_tokens=9), 1)
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "user"]
    assert request.messages[-1].content == "Why?"
    # The reply the conversation recorded sets the length ("The moon." is about 3 tokens).
    assert request.max_tokens == math.ceil(len("The moon.") / CHARS_PER_TOKEN)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("p.jsonl", '{"prompt": "ok"}\n{"prompt": \n', r"p\.jsonl:2: not valid JSON"),
        ("p.jsonl", '{"text": "no prompt"}\n', "needs 'prompt'"),
        ("p.jsonl", '{"prompt": "x", "max_tokens": 0}\n', "max_tokens must be a positive"),
        ("p.jsonl", '{"messages": [{"role": "user"}]}\n', "string 'role' and 'content'"),
        ("p.jsonl", "\n\n", "holds no usable prompts"),
        ("p.json", '{"conversations": []}', "expected a JSON list"),
        ("p.json", '[{"conversations": [{"from": "alien", "value": "x"}]}]', "unknown ShareGPT"),
        ("p.json", "[1, 2]", "expected a JSON object"),
    ],
)
def test_malformed_files_are_config_errors(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        build_requests(WorkloadSpec(prompt_set=str(path)), 1)


def test_missing_file_or_unknown_set_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"neither a built-in set \(code, creative"):
        build_requests(WorkloadSpec(prompt_set=str(tmp_path / "absent.jsonl")), 1)
    with pytest.raises(ConfigError, match="'kode'"):
        build_requests(WorkloadSpec(prompt_set="kode"), 1)
